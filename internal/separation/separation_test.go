package separation

import (
	"os"
	"path/filepath"
	"testing"
)

// Ensure that Compare reports each fact from the device and the owner
// alone, for every combination.
func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name      string
		db, a     Stat
		dev, user bool
	}{
		{"same device, same owner", Stat{Dev: 1, UID: 10}, Stat{Dev: 1, UID: 10}, true, true},
		{"other device, same owner", Stat{Dev: 1, UID: 10}, Stat{Dev: 2, UID: 10}, false, true},
		{"same device, other owner", Stat{Dev: 1, UID: 10}, Stat{Dev: 1, UID: 11}, true, false},
		{"other device, other owner", Stat{Dev: 1, UID: 10}, Stat{Dev: 2, UID: 11}, false, false},
	} {
		if got := Compare(tc.db, tc.a); got.SameDevice != tc.dev || got.SameOwner != tc.user {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
}

// Ensure that two files in one directory are on the same device and owned
// by the same uid, that a missing file is an error, and, where /dev/shm is
// another file system than the test's directory, that a file there is
// reported on another device.
func TestOf(t *testing.T) {
	dir := t.TempDir()
	db, anchor := filepath.Join(dir, "r.db"), filepath.Join(dir, "r.anchor")
	for _, p := range []string{db, anchor} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Of(db, anchor)
	if err != nil || !f.SameDevice || !f.SameOwner {
		t.Fatalf("one directory: %+v, %v", f, err)
	}
	if _, err := Of(db, filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing anchor gave facts")
	}
	shm, err := os.MkdirTemp("/dev/shm", "sep")
	if err != nil {
		t.Log("no /dev/shm here; the device comparison is covered by TestCompare")
		return
	}
	defer os.RemoveAll(shm)
	d1, err1 := statOf(dir)
	d2, err2 := statOf(shm)
	if err1 != nil || err2 != nil || d1.Dev == d2.Dev {
		t.Log("/dev/shm is on the test directory's device here; the device comparison is covered by TestCompare")
		return
	}
	other := filepath.Join(shm, "r.anchor")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := Of(db, other); err != nil || f.SameDevice || !f.SameOwner {
		t.Fatalf("anchor on /dev/shm: %+v, %v", f, err)
	}
}
