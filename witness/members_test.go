package witness_test

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/witness"
)

// writePub writes priv's public key as kvfence witness init does (K.pub)
// and returns its path.
func writePub(t *testing.T, dir, name string, priv ed25519.PrivateKey) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := keyfile.Write(path, priv, "w"); err != nil {
		t.Fatal(err)
	}
	return path + ".pub"
}

// writeFile writes data to dir/name and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// certPEM is the PEM of srv's certificate.
func certPEM(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// Ensure that LoadMembers refuses every spec it cannot act on, naming the
// witness or file at fault, and accepts a good one.
func TestLoadMembersRefusals(t *testing.T) {
	dir := t.TempDir()
	pub1 := writePub(t, dir, "w1", key(1))
	pub2 := writePub(t, dir, "w2", key(2))
	pub1again := writePub(t, dir, "w1copy", key(1))
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	ca := writeFile(t, dir, "ca.pem", certPEM(srv))
	empty := writeFile(t, dir, "empty.pem", nil)
	notPEM := writeFile(t, dir, "junk.pem", []byte("not a certificate\n"))
	keyPEM := writeFile(t, dir, "key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}))
	truncated := writeFile(t, dir, "trunc.pem", append(certPEM(srv), []byte("-----BEGIN CERTIFICATE-----\nMIIB")...))
	badCert := writeFile(t, dir, "bad.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}))
	huge := writeFile(t, dir, "huge.pem", make([]byte, witness.MaxCAFileSize+1))
	notPub := writeFile(t, dir, "notpub", []byte("hello\n"))

	good := func() witness.MemberSpec {
		return witness.MemberSpec{URLs: map[string]string{"w1.test": "https://127.0.0.1:1", "w2.test": "https://127.0.0.1:2"},
			PubFiles: map[string]string{"w1.test": pub1, "w2.test": pub2}}
	}
	for _, tc := range []struct {
		name   string
		edit   func(*witness.MemberSpec)
		want   error  // nil: ErrBadMemberSpec
		substr string // in the message
	}{
		{"url without pub", func(s *witness.MemberSpec) { delete(s.PubFiles, "w2.test") }, nil, `"w2.test" has a URL but no public key file`},
		{"pub without url", func(s *witness.MemberSpec) { s.PubFiles["w3.test"] = pub2 }, nil, `"w3.test" has a public key file but no URL`},
		{"empty url", func(s *witness.MemberSpec) { s.URLs["w1.test"] = "" }, nil, `"w1.test" has an empty URL`},
		{"empty pub path", func(s *witness.MemberSpec) { s.PubFiles["w1.test"] = "" }, nil, `"w1.test" has a URL but no public key file`},
		{"bad name", func(s *witness.MemberSpec) {
			s.URLs["a b"], s.PubFiles["a b"] = "https://127.0.0.1:3", pub1again
		}, nil, `witness name "a b"`},
		{"ftp url", func(s *witness.MemberSpec) { s.URLs["w1.test"] = "ftp://127.0.0.1:1" }, nil, "witness w1.test: URL"},
		{"no host", func(s *witness.MemberSpec) { s.URLs["w1.test"] = "https:///x" }, nil, "witness w1.test: URL"},
		{"user info", func(s *witness.MemberSpec) { s.URLs["w1.test"] = "https://u:p@127.0.0.1:1" }, nil, "user information"},
		{"query", func(s *witness.MemberSpec) { s.URLs["w1.test"] = "https://127.0.0.1:1/?a=b" }, nil, "witness w1.test"},
		{"http", func(s *witness.MemberSpec) { s.URLs["w1.test"] = "http://127.0.0.1:1" }, nil, "is plain http: use https"},
		{"http beside CA", func(s *witness.MemberSpec) { s.URLs["w1.test"], s.CAFile = "http://127.0.0.1:1", ca }, nil, "is plain http: use https"},
		{"same URL twice", func(s *witness.MemberSpec) { s.URLs["w2.test"] = s.URLs["w1.test"] }, nil, "w1.test and w2.test have the same URL"},
		{"same key twice", func(s *witness.MemberSpec) { s.PubFiles["w2.test"] = pub1again }, nil, "w1.test and w2.test have the same public key"},
		{"missing pub file", func(s *witness.MemberSpec) { s.PubFiles["w1.test"] = filepath.Join(dir, "nope") }, os.ErrNotExist, "witness w1.test"},
		{"pub file not a key", func(s *witness.MemberSpec) { s.PubFiles["w1.test"] = notPub }, keyfile.ErrMalformedKey, "witness w1.test"},
		{"negative timeout", func(s *witness.MemberSpec) { s.Timeout = -time.Second }, nil, "negative timeout"},
		{"CA without witnesses", func(s *witness.MemberSpec) { *s = witness.MemberSpec{CAFile: ca} }, nil, "a CA file without witnesses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := good()
			tc.edit(&spec)
			_, err := witness.LoadMembers(spec)
			want := tc.want
			if want == nil {
				want = witness.ErrBadMemberSpec
			}
			if !errors.Is(err, want) || !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("LoadMembers: %v, want %v containing %q", err, want, tc.substr)
			}
		})
	}
	https := func(caFile string) witness.MemberSpec {
		return witness.MemberSpec{URLs: map[string]string{"w1.test": srv.URL}, PubFiles: map[string]string{"w1.test": pub1}, CAFile: caFile}
	}
	for _, tc := range []struct{ name, ca, substr string }{
		{"missing CA", filepath.Join(dir, "nope.pem"), "no such file"},
		{"CA is a directory", dir, "not a regular file"},
		{"empty CA", empty, "holds no PEM certificate"},
		{"CA not PEM", notPEM, "not PEM after certificate 0"},
		{"CA holds a key", keyPEM, `holds a "PRIVATE KEY" block`},
		{"CA truncated", truncated, "not PEM after certificate 1"},
		{"CA bad certificate", badCert, "certificate 1"},
		{"CA too large", huge, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := witness.LoadMembers(https(tc.ca))
			if !errors.Is(err, witness.ErrBadMemberSpec) || !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("LoadMembers: %v, want ErrBadMemberSpec containing %q", err, tc.substr)
			}
		})
	}

	ms, err := witness.LoadMembers(good())
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Name != "w1.test" || ms[1].Name != "w2.test" || ms[0].Verifier.Name() != "w1.test" {
		t.Fatalf("members %+v, want w1.test and w2.test in order", ms)
	}
	if ms, err := witness.LoadMembers(witness.MemberSpec{}); ms != nil || err != nil {
		t.Fatalf("empty spec: %v, %v; want nil, nil", ms, err)
	}
}

// Ensure that the members' clients trust the CA file (and without it only
// the system's CAs), and follow no redirect.
func TestLoadMembersTLSAndRedirect(t *testing.T) {
	dir := t.TempDir()
	pub := writePub(t, dir, "w1", key(1))
	var redirected atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { redirected.Add(1) }))
	defer target.Close()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "redirect") {
			http.Redirect(w, r, target.URL+"/kvfence/v1/latest", http.StatusTemporaryRedirect)
			return
		}
		http.Error(w, witness.ErrUnknownLog.Error()+": o", http.StatusNotFound)
	}))
	defer srv.Close()
	ca := writeFile(t, dir, "ca.pem", certPEM(srv))
	latest := func(url, caFile string) error {
		ms, err := witness.LoadMembers(witness.MemberSpec{URLs: map[string]string{"w1.test": url},
			PubFiles: map[string]string{"w1.test": pub}, CAFile: caFile, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ms[0].Client.Latest(context.Background(), "o")
		return err
	}
	if err := latest(srv.URL, ca); !errors.Is(err, witness.ErrUnknownLog) {
		t.Fatalf("with the CA: %v, want the witness's ErrUnknownLog", err)
	}
	var unknownAuthority x509.UnknownAuthorityError
	if err := latest(srv.URL, ""); !errors.As(err, &unknownAuthority) {
		t.Fatalf("without the CA: %v, want an unknown authority", err)
	}
	if err := latest(srv.URL+"/redirect", ca); !errors.Is(err, witness.ErrUnexpectedResponse) || redirected.Load() != 0 {
		t.Fatalf("redirect: %v (followed %d times), want ErrUnexpectedResponse and not followed", err, redirected.Load())
	}
}
