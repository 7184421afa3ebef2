package testbin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tagsAllowed are the only files outside tests whose presence in a build
// may depend on the race detector or NoSQLiteTag: the bench's SQLite rows,
// which are measurement, not the receiver, and Race itself.
var tagsAllowed = map[string]bool{
	"bench/row_sqlite.go":        true,
	"bench/row_nosqlite.go":      true,
	"internal/testbin/race.go":   true,
	"internal/testbin/norace.go": true,
}

// Ensure that no shipped code depends on the build tags the tests' binaries
// carry and the shipped binary does not (race, NoSQLiteTag): code behind
// them would escape every test of a built binary, the checks that the
// shipped binary has no defective mode among them. The go command itself
// says which files each build compiles, so no form of constraint (a
// //go:build line after a block comment, an old // +build line) escapes
// the comparison.
func TestNoShippedCodeBehindTestTags(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not at %s: %v", root, err)
	}
	shipped := buildFiles(t, root)
	tested := buildFiles(t, root, "-race", "-tags", NoSQLiteTag)
	if len(shipped) < 50 {
		t.Fatalf("the plain build lists only %d files under %s", len(shipped), root)
	}
	for _, d := range fileDifference(shipped, tested) {
		if !tagsAllowed[d] {
			t.Errorf("%s is compiled by only one of the shipped build and the tests' (-race -tags %s): a file that depends on the tests' tags", d, NoSQLiteTag)
		}
	}
}

// Ensure that fileDifference finds a file either build lacks, so that the
// test above can fail.
func TestFileDifference(t *testing.T) {
	for _, tc := range []struct {
		a, b, want []string
	}{
		{a: []string{"x.go", "y.go"}, b: []string{"x.go", "y.go"}},
		{a: []string{"x.go", "y.go"}, b: []string{"x.go"}, want: []string{"y.go"}},
		{a: []string{"x.go"}, b: []string{"x.go", "z.go"}, want: []string{"z.go"}},
		{a: []string{"p.go"}, b: []string{"q.go"}, want: []string{"p.go", "q.go"}},
	} {
		if got := fileDifference(tc.a, tc.b); !slices.Equal(got, tc.want) {
			t.Errorf("fileDifference(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// buildFiles lists the non-test Go files, relative to root, that the go
// command compiles for the module's packages with the given flags.
func buildFiles(t *testing.T, root string, flags ...string) []string {
	t.Helper()
	args := append([]string{"list", "-e"}, flags...)
	args = append(args, "-f", `{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .CgoFiles}}{{$d}}/{{.}}
{{end}}`, "./...")
	gocmd, err := goCommand()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gocmd, args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var files []string
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" {
			continue
		}
		rel, err := filepath.Rel(root, line)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	slices.Sort(files)
	return files
}

// fileDifference returns, sorted, the files in exactly one of a and b.
func fileDifference(a, b []string) []string {
	in := func(s []string, f string) bool { return slices.Contains(s, f) }
	var out []string
	for _, f := range a {
		if !in(b, f) {
			out = append(out, f)
		}
	}
	for _, f := range b {
		if !in(a, f) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}
