package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// designPath is the design document, relative to the module root.
const designPath = "docs/design.md"

var (
	// sectionHeading is a numbered heading of the design document:
	// "## 7. Audit chain…" or "### 7.3 The anchor".
	sectionHeading = regexp.MustCompile(`^#{2,3} (\d+(?:\.\d+)?)\.? `)
	// designRef is a citation of a section of the design document, which
	// may be wrapped across lines.
	designRef = regexp.MustCompile(`design\.md\s+\x{00a7}\s*(\d+(?:\.\d+)?)`)
	// bareRef is a citation of a design that is not in the repository,
	// in the spelling the code used before docs/design.md existed.
	bareRef = regexp.MustCompile(`\bDESIGN(?:\.md)?\s*\x{00a7}`)
	// innerRef is a section reference inside the design document itself.
	innerRef = regexp.MustCompile(`\x{00a7}(\d+(?:\.\d+)?)`)
)

// designSections returns the section numbers of a design document, in
// order, and fails if a number repeats or goes backwards: the numbers are
// cited from the code, so a renumbered section would silently change what
// every citation means.
func designSections(doc []byte) (map[string]bool, error) {
	sections := map[string]bool{}
	var prev []int
	sc := bufio.NewScanner(bytes.NewReader(doc))
	inFence := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		m := sectionHeading.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		var num []int
		for _, p := range strings.Split(m[1], ".") {
			n, _ := strconv.Atoi(p)
			num = append(num, n)
		}
		if sections[m[1]] || !numberAfter(prev, num) {
			return nil, fmt.Errorf("section %s follows %v: numbers must increase by one", m[1], prev)
		}
		sections[m[1]] = true
		prev = num
	}
	return sections, sc.Err()
}

// numberAfter reports whether section number next may follow prev: the
// next top-level section, or the next subsection of the current one.
func numberAfter(prev, next []int) bool {
	switch {
	case len(prev) == 0:
		return len(next) == 1 && next[0] == 1
	case len(next) == 1:
		return next[0] == prev[0]+1
	case len(prev) == 1:
		return next[0] == prev[0] && next[1] == 1
	default:
		return next[0] == prev[0] && next[1] == prev[1]+1
	}
}

// goTexts returns the comments and string literals of a Go file, where a
// citation may be; each comment group is one text, so that a citation
// wrapped across comment lines is still found.
func goTexts(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var texts []string
	for _, cg := range f.Comments {
		texts = append(texts, cg.Text())
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				texts = append(texts, s)
			}
		}
		return true
	})
	return texts, nil
}

// badRefs returns the problems with the citations in texts: a bare
// citation of the old design, or a citation of a section that sections
// does not have.
func badRefs(texts []string, sections map[string]bool) []string {
	var out []string
	for _, text := range texts {
		for _, m := range bareRef.FindAllString(text, -1) {
			out = append(out, fmt.Sprintf("%q cites a design that is not in the repository; cite %s", m, designPath))
		}
		for _, m := range designRef.FindAllStringSubmatch(text, -1) {
			if !sections[m[1]] {
				out = append(out, fmt.Sprintf("%q names a section that %s does not have", m[0], designPath))
			}
		}
	}
	return out
}

// Ensure that every citation of docs/design.md in the module's Go files
// and Markdown names a section that exists, that no citation of the old,
// absent design remains, and that the document's own cross-references
// resolve: a reader who follows one must land on what was meant.
func TestDesignReferencesResolve(t *testing.T) {
	root := moduleRoot(t)
	doc := readFile(t, root, designPath)
	sections, err := designSections(doc)
	if err != nil {
		t.Fatalf("%s: %v", designPath, err)
	}
	if len(sections) < 13 {
		t.Fatalf("%s has %d numbered sections; the code cites up to §13", designPath, len(sections))
	}
	for _, m := range innerRef.FindAllStringSubmatch(string(doc), -1) {
		if !sections[m[1]] {
			t.Errorf("%s: %q names a section it does not have", designPath, m[0])
		}
	}
	cited := 0
	for _, rel := range moduleFiles(t, root, ".go", ".md") {
		src := readFile(t, root, rel)
		texts := []string{string(src)}
		if strings.HasSuffix(rel, ".go") {
			if texts, err = goTexts(rel, src); err != nil {
				t.Fatal(err)
			}
		}
		for _, text := range texts {
			cited += len(designRef.FindAllString(text, -1))
		}
		for _, p := range badRefs(texts, sections) {
			t.Errorf("%s: %s", rel, p)
		}
	}
	if cited == 0 {
		t.Errorf("no citation of %s found: the scan is broken", designPath)
	}
}

// Ensure that the citation check refuses what it must and accepts what it
// may, so that a passing run means something.
func TestBadRefs(t *testing.T) {
	sections := map[string]bool{"4": true, "7": true, "7.3": true}
	sec := "\u00a7"
	for _, tc := range []struct {
		text string
		bad  bool
	}{
		{"see docs/design.md " + sec + "4", false},
		{"see docs/design.md " + sec + "7.3.", false},
		{"(docs/design.md\n" + sec + "7)", false},
		{"RFC 8949 " + sec + "4.2.1", false},
		{"see docs/design.md " + sec + "5", true},
		{"see docs/design.md " + sec + "7.9", true},
		{"see DESIGN " + sec + "4", true},
		{"see DESIGN.md " + sec + "4", true},
		{"(DESIGN\n" + sec + "12)", true},
	} {
		if got := len(badRefs([]string{tc.text}, sections)) > 0; got != tc.bad {
			t.Errorf("badRefs(%q) found a problem: %v, want %v", tc.text, got, tc.bad)
		}
	}
	for _, tc := range []struct {
		doc string
		ok  bool
	}{
		{"## 1. A\n### 1.1 B\n## 2. C\n", true},
		{"## 1. A\n## 3. C\n", false},
		{"## 1. A\n## 1. A again\n", false},
		{"## 1. A\n### 1.2 B\n", false},
		{"## 2. A\n", false},
		{"## 1. A\n```\n## 5. in a code block\n```\n## 2. B\n", true},
	} {
		if _, err := designSections([]byte(tc.doc)); (err == nil) != tc.ok {
			t.Errorf("designSections(%q): %v, want ok %v", tc.doc, err, tc.ok)
		}
	}
}
