package kubeproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure that a kubeconfig written with a relative CA path names the CA
// by its absolute path: a kubeconfig's relative paths are read from its
// own directory, so a relative one would name another file whenever the
// kubeconfig is not in the working directory (the lab's quick start, run
// with a relative output directory, hit that).
func TestWriteKubeconfigRelativeCA(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("out", 0o700); err != nil {
		t.Fatal(err)
	}
	s := &Server{Tokens: map[string]string{Receiver: "tok"}}
	if err := s.WriteKubeconfig(filepath.Join("out", "r.kubeconfig"), Receiver, "https://127.0.0.1:1", filepath.Join("out", "ca.pem")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("out", "r.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	want := "certificate-authority: " + filepath.Join(dir, "out", "ca.pem") + "\n"
	if !strings.Contains(string(b), want) {
		t.Fatalf("kubeconfig:\n%s\nwant the line %q", b, want)
	}
	if err := s.WriteKubeconfig("x", "nobody", "https://127.0.0.1:1", "ca.pem"); err == nil {
		t.Fatal("a kubeconfig for an unknown identity was written")
	}
}
