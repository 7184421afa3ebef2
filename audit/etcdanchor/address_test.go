package etcdanchor

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in  string
		eps []string
		key string
	}{
		{"etcd://127.0.0.1:2379/kvfence/anchor", []string{"127.0.0.1:2379"}, "/kvfence/anchor"},
		{"etcd://a.example:2379,b.example:2379,10.0.0.3:22379/k", []string{"a.example:2379", "b.example:2379", "10.0.0.3:22379"}, "/k"},
		{"etcd://[::1]:2379/kvfence/anchor", []string{"[::1]:2379"}, "/kvfence/anchor"},
		{"etcd://[2001:db8::1]:1/a/b-c_d.e~f", []string{"[2001:db8::1]:1"}, "/a/b-c_d.e~f"},
		{"etcd://localhost:65535/x", []string{"localhost:65535"}, "/x"},
		{"etcd://etcd-0:2379/kvfence/receiver-1:anchor", []string{"etcd-0:2379"}, "/kvfence/receiver-1:anchor"},
	} {
		a, err := ParseAddress(tc.in)
		if err != nil {
			t.Errorf("ParseAddress(%q): %v", tc.in, err)
			continue
		}
		if !slices.Equal(a.Endpoints, tc.eps) || a.Key != tc.key {
			t.Errorf("ParseAddress(%q) = %q %q, want %q %q", tc.in, a.Endpoints, a.Key, tc.eps, tc.key)
		}
		if a.String() != tc.in {
			t.Errorf("ParseAddress(%q).String() = %q", tc.in, a.String())
		}
	}
}

// Ensure that every address that could be read two ways, or that names
// something other than one key on listed members, is refused.
func TestParseAddress_Hostile(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"", "empty"},
		{"etcd://", "nothing after the scheme"},
		{"etcd:/127.0.0.1:2379/k", "one slash"},
		{"ETCD://127.0.0.1:2379/k", "upper-case scheme"},
		{"http://127.0.0.1:2379/k", "another scheme"},
		{"etcds://127.0.0.1:2379/k", "a scheme that does not exist"},
		{" etcd://127.0.0.1:2379/k", "leading space"},
		{"etcd://127.0.0.1:2379", "no key"},
		{"etcd://127.0.0.1:2379/", "empty key"},
		{"etcd:///k", "no endpoint"},
		{"etcd://127.0.0.1:2379//k", "doubled slash"},
		{"etcd://127.0.0.1:2379/k/", "trailing slash"},
		{"etcd://127.0.0.1:2379/a/../k", "dot-dot segment"},
		{"etcd://127.0.0.1:2379/a/./k", "dot segment"},
		{"etcd://127.0.0.1:2379/k%2Fx", "percent-escape"},
		{"etcd://127.0.0.1:2379/k?x=1", "query"},
		{"etcd://127.0.0.1:2379/k#frag", "fragment"},
		{"etcd://127.0.0.1:2379/k x", "space in key"},
		{"etcd://127.0.0.1:2379/k\x00", "NUL in key"},
		{"etcd://127.0.0.1:2379/k\n", "newline in key"},
		{"etcd://127.0.0.1:2379/k\x7f", "DEL in key"},
		{"etcd://127.0.0.1:2379/ключ", "non-ASCII key"},
		{"etcd://127.0.0.1:2379/a,b", "comma in key"},
		{"etcd://127.0.0.1:2379/a@b", "at sign in key"},
		{"etcd://user:pass@127.0.0.1:2379/k", "user information"},
		{"etcd://user@127.0.0.1:2379/k", "user name"},
		{"etcd://127.0.0.1/k", "no port"},
		{"etcd://127.0.0.1:/k", "empty port"},
		{"etcd://127.0.0.1:0/k", "port 0"},
		{"etcd://127.0.0.1:02379/k", "leading zero in port"},
		{"etcd://127.0.0.1:65536/k", "port out of range"},
		{"etcd://127.0.0.1:+2379/k", "signed port"},
		{"etcd://127.0.0.1:0x95b/k", "hex port"},
		{"etcd://127.0.0.1:99999999999999999999/k", "huge port"},
		{"etcd://:2379/k", "empty host"},
		{"etcd://127.0.0.1:2379,/k", "empty second endpoint"},
		{"etcd://,127.0.0.1:2379/k", "empty first endpoint"},
		{"etcd://127.0.0.1:2379,127.0.0.1:2379/k", "endpoint twice"},
		{"etcd://Host.example:1,host.example:1/k", "endpoint twice in another case"},
		{"etcd://::1:2379/k", "IPv6 without brackets"},
		{"etcd://[::1/k", "unterminated bracket"},
		{"etcd://[::1]/k", "IPv6 without a port"},
		{"etcd://[127.0.0.1]:2379/k", "IPv4 in brackets"},
		{"etcd://[::ffff:127.0.0.1]:2379/k", "IPv4-mapped IPv6"},
		{"etcd://[fe80::1%eth0]:2379/k", "IPv6 zone"},
		{"etcd://[0:0:0:0:0:0:0:1]:2379/k", "IPv6 not in canonical form"},
		{"etcd://127.1:2379/k", "short IPv4"},
		{"etcd://0x7f.0.0.1:2379/k", "hex IPv4"},
		{"etcd://127.000.000.001:2379/k", "IPv4 with leading zeros"},
		{"etcd://4294967295:2379/k", "IPv4 as one number"},
		{"etcd://-host:2379/k", "label beginning with a hyphen"},
		{"etcd://host-:2379/k", "label ending with a hyphen"},
		{"etcd://a..b:2379/k", "empty label"},
		{"etcd://host.:2379/k", "trailing dot"},
		{"etcd://ho_st:2379/k", "underscore in host"},
		{"etcd://hö.st:2379/k", "non-ASCII host"},
		{"etcd://host.0X1F:2379/k", "hex last label"},
		{"etcd://example.123:2379/k", "numeric last label"},
		{"etcd://host\x00:2379/k", "NUL in host"},
		{"etcd://" + strings.Repeat("a", 64) + ":2379/k", "label of 64 bytes"},
		{"etcd://" + strings.Repeat("a.", 127) + "a:2379/k", "host of 255 bytes"},
		{"etcd://127.0.0.1:2379/" + strings.Repeat("k", MaxKeyLen), "key too long"},
		{"etcd://" + strings.Repeat("h:1,", MaxEndpoints) + "h:2/k", "too many endpoints"},
		{"etcd://127.0.0.1:2379/" + strings.Repeat("k", MaxAddressLen), "address too long"},
	} {
		a, err := ParseAddress(tc.in)
		if !errors.Is(err, ErrBadAddress) {
			t.Errorf("%s: ParseAddress(%q) = %q, %v; want ErrBadAddress", tc.why, tc.in, a, err)
		}
	}
}

// Ensure that New holds a key to the same rules as an address.
func TestNew_RefusesBadKey(t *testing.T) {
	for _, key := range []string{"", "/", "k", "/a//b", "/a/", "/a b", "/a/../b"} {
		if _, err := New(nil, key, nil); err == nil {
			t.Errorf("New(nil, %q) succeeded", key)
		}
	}
}
