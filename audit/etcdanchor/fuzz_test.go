package etcdanchor

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseAddress checks that ParseAddress accepts only what it can print
// back byte for byte, and that what it accepts names one key and endpoints
// within the limits; everything else is ErrBadAddress.
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{
		"etcd://127.0.0.1:2379/kvfence/anchor",
		"etcd://a.example:2379,b.example:2379,10.0.0.3:22379/k",
		"etcd://[::1]:2379/kvfence/anchor",
		"etcd://user:pass@127.0.0.1:2379/k",
		"etcd://[fe80::1%eth0]:2379/k",
		"etcd://127.0.0.1:2379/a/../k",
		"etcd://127.1:2379/k",
		"etcd://127.0.0.1:02379/k?x#y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			if !errors.Is(err, ErrBadAddress) {
				t.Fatalf("ParseAddress(%q): %v, not ErrBadAddress", s, err)
			}
			return
		}
		if a.String() != s {
			t.Fatalf("ParseAddress(%q) prints back as %q", s, a.String())
		}
		if !utf8.ValidString(s) || strings.ContainsAny(s, "@?#% \x00\n") {
			t.Fatalf("ParseAddress(%q) accepted a byte it refuses", s)
		}
		if len(a.Endpoints) == 0 || len(a.Endpoints) > MaxEndpoints {
			t.Fatalf("ParseAddress(%q): %d endpoints", s, len(a.Endpoints))
		}
		if !strings.HasPrefix(a.Key, "/") || len(a.Key) < 2 || strings.HasSuffix(a.Key, "/") || strings.Contains(a.Key, "//") {
			t.Fatalf("ParseAddress(%q): key %q", s, a.Key)
		}
		for _, ep := range a.Endpoints {
			if strings.Contains(ep, ",") || strings.Contains(ep, "/") {
				t.Fatalf("ParseAddress(%q): endpoint %q", s, ep)
			}
		}
		again, err := ParseAddress(a.String())
		if err != nil || again.String() != a.String() {
			t.Fatalf("ParseAddress(%q) does not parse its own output: %v", s, err)
		}
	})
}
