package main

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure that snapshot refuses every command line it cannot act on as a
// usage error, and reports a snapshot it cannot read as a restore error,
// without making the data directory.
func TestSnapshotArgs(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "absent.db")
	for _, tc := range []struct {
		args  []string
		usage bool
	}{
		{nil, true},
		{[]string{"status", missing}, true},
		{[]string{"restore"}, true},
		{[]string{"restore", "--data-dir", dir + "/a"}, true},
		{[]string{"restore", missing}, true},
		{[]string{"restore", missing, "--data-dir", dir + "/b", "extra"}, true},
		{[]string{"restore", missing, "--data-dir", dir + "/c", "--bump-revision", "5"}, true},
		{[]string{"restore", missing, "--data-dir", dir + "/d", "--mark-compacted"}, true},
		{[]string{"restore", missing, "--data-dir", dir + "/e", "--no-such-flag"}, true},
		{[]string{"restore", missing, "--data-dir", dir + "/f"}, false},
		{[]string{"restore", "--data-dir", dir + "/g", missing}, false},
	} {
		err := runSnapshot(tc.args, io.Discard)
		var ue *usageError
		if err == nil || errors.As(err, &ue) != tc.usage {
			t.Errorf("runSnapshot(%q) = %v; want a usage error: %v", tc.args, err, tc.usage)
		}
		if !tc.usage && !strings.Contains(err.Error(), "snapshot restore") {
			t.Errorf("runSnapshot(%q) = %v; want it to name the restore", tc.args, err)
		}
	}
}
