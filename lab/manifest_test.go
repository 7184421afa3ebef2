package lab

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gitOut runs git in dir for the test and returns its trimmed output.
func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// readSource runs writeManifests into a new output directory and returns
// source.json.
func readSource(t *testing.T) sourceManifest {
	t.Helper()
	out := filepath.Join(t.TempDir(), "lab")
	if err := makeOutput(out); err != nil {
		t.Fatal(err)
	}
	l := &lab{opts: Options{Output: out, Executable: os.Args[0], Progress: io.Discard}}
	if err := l.writeManifests(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "source.json"))
	if err != nil {
		t.Fatal(err)
	}
	var src sourceManifest
	if err := json.Unmarshal(raw, &src); err != nil {
		t.Fatal(err)
	}
	return src
}

// Ensure that source.json names the source's revision when the binary
// carries no VCS stamp (a test binary, like go run, carries none): read
// with git from the source tree; and that without git it says why, with
// no revision made up.
func TestWriteManifests_RevisionWithoutBuildStamp(t *testing.T) {
	src := readSource(t)
	if _, err := exec.LookPath("git"); err != nil {
		if src.VCSRevision != "" || !strings.HasPrefix(src.VCSSource, "none: ") || !strings.Contains(src.VCSSource, "git") {
			t.Fatalf("without git: revision %q, source %q", src.VCSRevision, src.VCSSource)
		}
		return
	}
	want := gitOut(t, moduleDir(), "rev-parse", "HEAD")
	if src.VCSSource != "git" || src.VCSRevision != want || (src.VCSModified != "true" && src.VCSModified != "false") ||
		src.SourceDir != moduleDir() {
		t.Fatalf("source.json: revision %q (want %q), modified %q, source %q, dir %q", src.VCSRevision, want, src.VCSModified,
			src.VCSSource, src.SourceDir)
	}
	if _, err := time.Parse(time.RFC3339, src.VCSTime); err != nil {
		t.Fatalf("vcs_time %q: %v", src.VCSTime, err)
	}

	// No git in PATH: the reason, and no revision.
	t.Setenv("PATH", t.TempDir())
	src = readSource(t)
	if src.VCSRevision != "" || src.VCSModified != "" || !strings.HasPrefix(src.VCSSource, "none: ") ||
		!strings.Contains(src.VCSSource, "git is not installed") {
		t.Fatalf("without git: revision %q, modified %q, source %q", src.VCSRevision, src.VCSModified, src.VCSSource)
	}
}

// Ensure that gitVCS reports a tree's commit and whether it differs from
// it, not counting the lab's own output directory inside the tree, and
// refuses a directory that is not a repository.
func TestGitVCS(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		if _, err := gitVCS(t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "git is not installed") {
			t.Fatalf("gitVCS without git = %v", err)
		}
		return
	}
	repo := t.TempDir()
	gitOut(t, repo, "init", "-q")
	if err := os.WriteFile(filepath.Join(repo, "a.go"), []byte("package a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitOut(t, repo, "add", "a.go")
	gitOut(t, repo, "commit", "-q", "-m", "one")
	out := filepath.Join(repo, "lab-out")
	if err := os.MkdirAll(filepath.Join(out, "01"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "01", "receiver.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := gitVCS(repo, out)
	if err != nil || v.revision != gitOut(t, repo, "rev-parse", "HEAD") || v.modified != "false" {
		t.Fatalf("clean tree with the lab's output inside: %+v, %v", v, err)
	}
	if v, err := gitVCS(repo, ""); err != nil || v.modified != "true" {
		t.Fatalf("the same output not excluded: %+v, %v; want modified", v, err)
	}
	if err := os.WriteFile(filepath.Join(repo, "a.go"), []byte("package a // changed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := gitVCS(repo, out); err != nil || v.modified != "true" {
		t.Fatalf("changed tracked file: %+v, %v; want modified", v, err)
	}
	if v, err := gitVCS(t.TempDir(), ""); err == nil {
		t.Fatalf("a directory that is not a repository: %+v, want an error", v)
	}
}
