package lab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/keyfile"
)

// hungWorker writes a stand-in for the lab binary whose worker never
// answers: it says "ready" (or not) and then sleeps far past any bound,
// ignoring its stdin and its --timeout, as a worker stuck in a call would.
func hungWorker(t *testing.T, ready bool) string {
	t.Helper()
	script := "#!/bin/sh\n"
	if ready {
		script += "echo ready\n"
	}
	script += "exec sleep 600\n"
	p := filepath.Join(t.TempDir(), "hung")
	if err := os.WriteFile(p, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// Ensure that the lab kills a worker process that outlives its time bound
// and reports it, whether it hangs before "ready", after it (the release
// is never answered), or during a served worker's command, instead of
// waiting on it for ever.
func TestWorker_HungIsKilledAndReported(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Fatal("no /bin/sh to stand in for a hung worker")
	}
	const bound = 300 * time.Millisecond
	for _, tc := range []struct {
		name  string
		ready bool
		step  func(w *workerProc) error
	}{
		{"never ready", false, nil},
		{"release never answered", true, func(w *workerProc) error { _, err := w.release(); return err }},
		{"command never answered", true, func(w *workerProc) error { _, err := w.command("submit"); return err }},
		{"never exits", true, func(w *workerProc) error { return w.finish() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &lab{opts: Options{Executable: hungWorker(t, tc.ready), WorkerTimeout: bound, Progress: io.Discard}}
			began := time.Now()
			w, err := l.startProc(context.Background(), "worker-x", []string{WorkerCommand})
			if err == nil {
				err = tc.step(w)
				w.kill()
			}
			took := time.Since(began)
			if !errors.Is(err, errWorkerKilled) || !strings.Contains(err.Error(), "worker-x") ||
				!strings.Contains(err.Error(), "past its time bound") {
				t.Fatalf("a hung worker: %v", err)
			}
			if took > 2*bound+3*time.Second {
				t.Fatalf("the lab waited %v on a worker bound to %v", took, bound)
			}
			if w != nil && (w.cmd.ProcessState == nil || w.cmd.ProcessState.Success()) {
				t.Fatalf("the hung worker was not ended: %v", w.cmd.ProcessState)
			}
		})
	}
}

// Ensure that a worker ends by itself at its own --timeout when the lab
// never releases it, saying so, instead of waiting on its stdin for ever.
func TestWorker_OwnTimeBound(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, markerFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, env, key := filepath.Join(dir, "receiver.db"), filepath.Join(dir, "envelope.cbor"), filepath.Join(dir, "receiver.key")
	for _, p := range []string{db, env} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := keyfile.Write(key, priv, "lab"); err != nil {
		t.Fatal(err)
	}
	stdin, never := io.Pipe()
	defer never.Close()
	var stdout, stderr strings.Builder
	began := time.Now()
	code := WorkerMain(context.Background(), []string{"--db", db, "--anchor", filepath.Join(dir, "receiver.anchor"), "--key", key,
		"--envelope", env, "--as", "worker-x", "--timeout", "200ms"}, stdin, &stdout, &stderr)
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the worker waited %v past a 200ms bound", took)
	}
	if code == 0 || !strings.Contains(stderr.String(), "past its time bound") || stdout.String() != "ready\n" {
		t.Fatalf("a worker never released: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
