package etcddev

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure that snapshot restore refuses every command line it cannot act on
// as a usage error, and parses the others into the file and data directory
// they name, the file before or after the flags.
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
		r, err := ParseRestore(tc.args, io.Discard)
		var ue *UsageError
		if (err != nil) != tc.usage || (err != nil && !errors.As(err, &ue)) {
			t.Errorf("ParseRestore(%q) = %v; want a usage error: %v", tc.args, err, tc.usage)
		}
		if !tc.usage && (r.File != missing || !strings.HasPrefix(r.DataDir, dir+"/") || r.Name != "default" || len(r.PeerURLs) != 1) {
			t.Errorf("ParseRestore(%q) = %+v", tc.args, r)
		}
	}
}
