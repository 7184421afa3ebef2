package lab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvfence/kvfence/internal/fixture"
)

// vcsInfo is a source tree's commit as git reports it.
type vcsInfo struct {
	revision, modified, time string
}

// moduleDir returns the module's source tree (the directory of go.mod),
// or "" if it cannot be found.
func moduleDir() string {
	d := fixture.Dir()
	if d == "" {
		return ""
	}
	return filepath.Dir(filepath.Dir(d))
}

// gitVCS reads the commit checked out in dir with git: its revision, its
// commit time, and whether the tree differs from it ("true" or "false",
// untracked files included, as the Go toolchain's stamp counts them). The
// directory exclude, the lab's own output when it lies in the tree, does
// not count as a change. It never guesses: an error says why it could not
// read them.
func gitVCS(dir, exclude string) (vcsInfo, error) {
	if dir == "" {
		return vcsInfo{}, errors.New("the source tree was not found (no go.mod of this module above the working directory)")
	}
	if _, err := exec.LookPath("git"); err != nil {
		return vcsInfo{}, fmt.Errorf("git is not installed here (%v)", err)
	}
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		// Reading only: git status must not take the index lock.
		cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s in %s: %v: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
		}
		return string(out), nil
	}
	rev, err := git("rev-parse", "HEAD")
	if err != nil {
		return vcsInfo{}, err
	}
	ct, err := git("log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		return vcsInfo{}, err
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(ct), 10, 64)
	if err != nil {
		return vcsInfo{}, fmt.Errorf("git log in %s: commit time %q: %v", dir, ct, err)
	}
	top, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return vcsInfo{}, err
	}
	status, err := git("status", "--porcelain", "-z", "--untracked-files=normal")
	if err != nil {
		return vcsInfo{}, err
	}
	skip := relativeTo(strings.TrimSpace(top), exclude)
	modified := false
	records := strings.Split(status, "\x00")
	for i := 0; i < len(records); i++ {
		r := records[i]
		if len(r) < 4 {
			continue
		}
		if r[0] == 'R' || r[0] == 'C' {
			i++ // a rename or copy is followed by its source path
		}
		p := strings.TrimSuffix(r[3:], "/")
		if skip != "" && (p == skip || strings.HasPrefix(p, skip+"/")) {
			continue
		}
		modified = true
	}
	return vcsInfo{revision: strings.TrimSpace(rev), modified: strconv.FormatBool(modified),
		time: time.Unix(secs, 0).UTC().Format(time.RFC3339)}, nil
}

// relativeTo returns path relative to the tree top, with slashes, or ""
// when path is empty or lies outside the tree.
func relativeTo(top, path string) string {
	if path == "" {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	if r, err := filepath.EvalSymlinks(top); err == nil {
		top = r
	}
	rel, err := filepath.Rel(top, abs)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return ""
	}
	return filepath.ToSlash(rel)
}
