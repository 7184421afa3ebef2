package testbin

import (
	"bufio"
	"go/build/constraint"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tagsAllowed are the only files outside tests whose build constraints may
// name the race detector or NoSQLiteTag: the bench's SQLite rows, which
// are measurement, not the receiver, and Race itself.
var tagsAllowed = map[string]bool{
	"bench/row_sqlite.go":        true,
	"bench/row_nosqlite.go":      true,
	"internal/testbin/race.go":   true,
	"internal/testbin/norace.go": true,
}

// Ensure that no shipped code depends on the build tags the tests' binaries
// carry and the shipped binary does not (race, NoSQLiteTag): code behind
// them would escape every test of a built binary, the checks that the
// shipped binary has no defective mode among them.
func TestNoShippedCodeBehindTestTags(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not at %s: %v", root, err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		checked++
		expr, err := buildConstraint(path)
		if err != nil {
			return err
		}
		if expr == nil || tagsAllowed[rel] {
			return nil
		}
		var named []string
		expr.Eval(func(tag string) bool {
			if tag == "race" || tag == NoSQLiteTag {
				named = append(named, tag)
			}
			return false
		})
		if len(named) > 0 {
			t.Errorf("%s: its build constraint names %v, which the tests' binaries carry and the shipped binary does not", rel, named)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files under %s", checked, root)
	}
}

// buildConstraint returns the //go:build line of a Go file, nil if none.
func buildConstraint(path string) (constraint.Expr, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if constraint.IsGoBuild(line) {
			return constraint.Parse(line)
		}
		if line != "" && !strings.HasPrefix(line, "//") {
			return nil, nil
		}
	}
	return nil, sc.Err()
}
