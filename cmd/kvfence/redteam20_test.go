package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure that serve refuses an administrator ID the authenticator could
// never produce from a certificate, from the flag or from KVFENCE_ADMIN
// (whitespace around an item, a trailing slash, an upper-case trust
// domain), rather than serving with an administrator no one can be.
func TestRedteam20_ServeAdminNotCanonical(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string
		args []string
	}{
		{"env trailing space", "spiffe://ex.org/ops/a ", nil},
		{"env space after comma", "spiffe://ex.org/ops/a, spiffe://ex.org/ops/b", nil},
		{"env trailing slash", "spiffe://ex.org/ops/a/", nil},
		{"env upper-case trust domain", "spiffe://Ex.org/ops/a", nil},
		{"flag trailing space", "", []string{"--admin", "spiffe://ex.org/ops/a "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			c.env["KVFENCE_LISTEN"] = "127.0.0.1:0"
			c.env["KVFENCE_TLS_CERT"] = c.path("s.crt")
			c.env["KVFENCE_TLS_KEY"] = c.path("s.key")
			c.env["KVFENCE_CLIENT_CA"] = c.path("ca.pem")
			c.env["KVFENCE_MAX_CONNECTIONS"] = "16"
			c.env[envDB] = c.path("r.db")
			c.env[envAnchor] = c.path("r.anchor")
			c.env[envKey] = c.path("r.key")
			if tc.env != "" {
				c.env["KVFENCE_ADMIN"] = tc.env
			}
			r := c.run(append([]string{"serve"}, tc.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, "is not a SPIFFE ID") {
				t.Fatalf("got %s, want a usage error naming the ID", r)
			}
		})
	}
}

// Ensure that --assignment-out refuses a symbolic link at its path, one
// whose target does not exist included (it would otherwise create the
// target wherever the link points), and leaves the target untouched.
func TestRedteam20_AssignmentOutSymlink(t *testing.T) {
	dir := t.TempDir()
	target, existing := filepath.Join(dir, "elsewhere.json"), filepath.Join(dir, "victim")
	if err := os.WriteFile(existing, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, to := range map[string]string{"dangling": target, "to a file": existing} {
		link := filepath.Join(dir, "link-"+strings.ReplaceAll(name, " ", "-"))
		if err := os.Symlink(to, link); err != nil {
			t.Fatal(err)
		}
		if o, err := createAssignmentFile(link); err == nil {
			o.abandon()
			t.Errorf("%s: a symbolic link was opened", name)
		}
		if _, err := os.Lstat(link); err != nil {
			t.Errorf("%s: the link was removed: %v", name, err)
		}
	}
	if _, err := os.Stat(target); err == nil {
		t.Error("the link's target was created")
	}
	if b, err := os.ReadFile(existing); err != nil || string(b) != "keep" {
		t.Errorf("the link's target was changed: %q %v", b, err)
	}
}
