//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package audit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Ensure that a write removes the temporary files that writers killed
// between creating and renaming them left beside the anchor, and nothing
// else in the directory.
func TestFileAnchor_RemovesAbandonedTemporaryFiles(t *testing.T) {
	recs, _ := testChain(t, 3)
	dir := t.TempDir()
	fa := FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	if err := fa.Store(nil, checkpointOf(t, receiverKey, testReceiver, recs, 1)); err != nil {
		t.Fatal(err)
	}
	abandoned := []string{".receiver.anchor1234567890", ".receiver.anchor0"}
	kept := []string{".receiver.anchor", ".receiver.anchorx1", ".receiver.anchor12.bak", "receiver.anchor1",
		".other.anchor123", "receiver.anchor.bak"}
	for _, name := range append(abandoned, kept...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old, err := fa.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := fa.Store(&old, checkpointOf(t, receiverKey, testReceiver, recs, 2)); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := append([]string{"receiver.anchor"}, kept...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("directory after the write: %q, want %q", got, want)
	}
	if a, err := fa.Load(); err != nil || a.Seq != 2 {
		t.Fatalf("anchor after the write: %+v, %v", a, err)
	}
}
