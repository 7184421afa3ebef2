package doccheck

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path"
	"sort"
	"strings"
	"testing"
)

// attachedExamples returns the examples that go/doc, and so pkg.go.dev,
// shows for a package: on the package, its functions, its types and their
// methods.
func attachedExamples(p *doc.Package) []*doc.Example {
	ex := append([]*doc.Example(nil), p.Examples...)
	for _, f := range p.Funcs {
		ex = append(ex, f.Examples...)
	}
	for _, t := range p.Types {
		ex = append(ex, t.Examples...)
		for _, f := range t.Funcs {
			ex = append(ex, f.Examples...)
		}
		for _, m := range t.Methods {
			ex = append(ex, m.Examples...)
		}
	}
	return ex
}

// exampleProblems returns, for one package's parsed files (its test files
// included), each Example function that documentation tools do not attach
// to anything, because its name names no exported identifier, and each
// one without an output comment, which go test compiles but never runs.
func exampleProblems(fset *token.FileSet, importPath string, files []*ast.File) ([]string, error) {
	var tests []*ast.File
	for _, f := range files {
		if strings.HasSuffix(fset.Position(f.Package).Filename, "_test.go") {
			tests = append(tests, f)
		}
	}
	all := doc.Examples(tests...)
	if len(all) == 0 {
		return nil, nil
	}
	p, err := doc.NewFromFiles(fset, files, importPath)
	if err != nil {
		return nil, err
	}
	attached := map[string]bool{}
	for _, ex := range attachedExamples(p) {
		attached[ex.Name] = true
	}
	var out []string
	for _, ex := range all {
		name := "Example" + ex.Name
		if ex.Name != "" && !attached[ex.Name] {
			out = append(out, name+" is attached to nothing: its name must be Example, ExampleF, ExampleT or ExampleT_M, with an optional _suffix")
		}
		if ex.Output == "" && !ex.EmptyOutput {
			out = append(out, name+" has no // Output: comment, so go test never runs it")
		}
	}
	return out, nil
}

// Ensure that every Example function of the module is one that go doc's
// web view and pkg.go.dev attach to the package, function, type or method
// it shows, and that go test checks its output: an example nobody finds,
// or whose output nobody checks, documents nothing.
func TestExamplesAttachAndRun(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	byDir := map[string][]*ast.File{}
	for _, rel := range moduleFiles(t, root, ".go") {
		f, err := parser.ParseFile(fset, rel, readFile(t, root, rel), parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "main" {
			byDir[path.Dir(rel)] = append(byDir[path.Dir(rel)], f)
		}
	}
	var dirs []string
	for dir := range byDir {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	examples := 0
	for _, dir := range dirs {
		problems, err := exampleProblems(fset, "github.com/kvfence/kvfence/"+dir, byDir[dir])
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", dir, p)
		}
		examples += len(doc.Examples(byDir[dir]...))
	}
	if examples < 10 {
		t.Fatalf("found %d examples in the module; the walk is broken", examples)
	}
}

// Ensure that the example check refuses an example attached to nothing and
// one without output, and accepts the names go/doc attaches.
func TestExampleProblems(t *testing.T) {
	const src = `package p

// T is a type.
type T int

// M is a method.
func (T) M() {}

// F is a function.
func F() {}
`
	for _, tc := range []struct {
		name, test string
		want       int
	}{
		{"attached", `package p_test
import "fmt"
func Example() { fmt.Println(1) // Output: 1
}
func ExampleF() { fmt.Println(1) // Output: 1
}
func ExampleT() { fmt.Println(1) // Output: 1
}
func ExampleT_M() { fmt.Println(1) // Output: 1
}
func ExampleT_M_second() { fmt.Println(1) // Output: 1
}
func ExampleF_empty() {
	// Output:
}
`, 0},
		{"unknown method", "package p_test\nfunc ExampleT_Submit() {\n\t// Output:\n}\n", 1},
		{"unknown type", "package p_test\nfunc ExampleReceiver() {\n\t// Output:\n}\n", 1},
		{"no output", "package p_test\nfunc ExampleF() {}\n", 1},
		{"neither", "package p_test\nfunc ExampleG() {}\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			var files []*ast.File
			for name, s := range map[string]string{"p.go": src, "p_test.go": tc.test} {
				f, err := parser.ParseFile(fset, name, s, parser.ParseComments)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
			}
			problems, err := exampleProblems(fset, "example.com/p", files)
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != tc.want {
				t.Errorf("got %d problems %q, want %d", len(problems), problems, tc.want)
			}
		})
	}
}
