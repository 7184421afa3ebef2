//go:build !kvfencelab

package lab

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The tests in this file check the build without the kvfencelab tag, as
// shipped; the lab build has the defective modes they refuse.

// Ensure that a binary built without the lab tag (this test binary, like
// the shipped one) refuses to run the lab and creates nothing.
func TestRun_RefusesWithoutLabBuild(t *testing.T) {
	if Available() {
		t.Fatal("the defective openers are installed in a build without the kvfencelab tag")
	}
	out := filepath.Join(t.TempDir(), "lab")
	if _, err := Run(context.Background(), Options{Output: out}); !errors.Is(err, ErrNotLabBuild) {
		t.Fatalf("Run = %v, want ErrNotLabBuild", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Run created %s: %v", out, err)
	}
}

// Ensure that a lab worker in a binary built without the lab tag refuses
// each defective mode before it reads or opens anything: it never gets
// ready, even for a database inside a lab directory.
func TestWorker_DefectiveModesNeedLabBuild(t *testing.T) {
	dir := t.TempDir()
	if err := makeOutput(filepath.Join(dir, "lab")); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "lab", "receiver.db")
	for _, mode := range [][]string{{"--defective"}, {"--skip-anchor"}, {"--skip-ledger-anchor", "--ledger", filepath.Join(dir, "lab", "ledger.db")}} {
		var stdout, stderr strings.Builder
		args := append([]string{"--db", db, "--anchor", "a", "--key", "k", "--envelope", "e", "--as", "w"}, mode...)
		code := WorkerMain(context.Background(), args, strings.NewReader("go\n"), &stdout, &stderr)
		if code == 0 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "kvfencelab") {
			t.Fatalf("lab worker %s: exit %d, stdout %q, stderr %q; want a refusal naming the lab build", mode[0], code, stdout.String(), stderr.String())
		}
	}
}
