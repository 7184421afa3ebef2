//go:build !windows

package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Attack 7 (spliced anchor): the slot memo remembers the bytes of every
// slot this process wrote. Between two Stores of the same FileAnchor the
// path is swapped (a) for a symbolic link to a copy of the file as it was
// two writes ago, whose slots the memo remembers byte for byte, and (b) by
// rename for a hard link to that copy. The symlink must be refused without
// writing through it; the renamed-in old copy must fail the
// compare-and-swap (its current slot is older than the anchor named), and
// neither may be changed.
func TestAttack7_MemoizedOldCopySwappedIn(t *testing.T) {
	a, b, c, d := signedAt(t, 2), signedAt(t, 3), signedAt(t, 4), signedAt(t, 5)
	for _, how := range []string{"symlink", "hardlink-rename"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			fa := FileAnchor{Path: filepath.Join(dir, "anchor")}
			if err := fa.Store(nil, a); err != nil {
				t.Fatal(err)
			}
			if err := fa.Store(&a, b); err != nil {
				t.Fatal(err)
			}
			old := readAnchor(t, fa) // slots: a, b
			if err := fa.Store(&b, c); err != nil {
				t.Fatal(err)
			}
			copyPath := filepath.Join(dir, "old-copy")
			if err := os.WriteFile(copyPath, old, 0o600); err != nil {
				t.Fatal(err)
			}
			switch how {
			case "symlink":
				if err := os.Rename(fa.Path, filepath.Join(dir, "moved")); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(copyPath, fa.Path); err != nil {
					t.Fatal(err)
				}
			default:
				link := filepath.Join(dir, "link")
				if err := os.Link(copyPath, link); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(link, fa.Path); err != nil {
					t.Fatal(err)
				}
			}
			// The process believes the anchor is c; the old copy holds b.
			err := fa.Store(&c, d)
			if err == nil {
				t.Fatal("Store over a swapped-in old copy succeeded")
			}
			if how == "symlink" && !errors.Is(err, ErrAnchorNotRegular) {
				t.Fatalf("symlink: %v, want ErrAnchorNotRegular", err)
			}
			if how != "symlink" && !errors.Is(err, ErrWriteConflict) {
				t.Fatalf("old copy: %v, want ErrWriteConflict", err)
			}
			if got, _ := os.ReadFile(copyPath); !bytes.Equal(got, old) {
				t.Fatal("the old copy was written")
			}
			// A writer that names the old copy's anchor must not be able
			// to regress the anchor below it either.
			if how != "symlink" {
				if err := fa.Store(&b, a); !errors.Is(err, ErrAnchorRegression) {
					t.Fatalf("regressing store on old copy: %v, want ErrAnchorRegression", err)
				}
			}
		})
	}
}
