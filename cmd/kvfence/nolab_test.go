//go:build !kvfencelab

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure that kvfence lab, run in-process by a test binary built without
// the kvfencelab tag (as the shipped binary is), refuses with exit code 2
// and creates nothing. (In the lab build it would run the lab with this
// test binary as its workers, which it is not.)
func TestLab_RefusesInProcess(t *testing.T) {
	out := filepath.Join(t.TempDir(), "lab-out")
	c := newCLI(t)
	r := c.must(ExitUsage, "lab", "--output", out)
	if !strings.Contains(r.stderr, "go run -tags kvfencelab ./cmd/kvfence lab --output") {
		t.Fatalf("kvfence lab (in-process): %s", r)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("kvfence lab (in-process) created %s: %v", out, err)
	}
}
