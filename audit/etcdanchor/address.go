package etcdanchor

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Scheme begins every etcd anchor address; a CLI tells an etcd anchor from
// an anchor file by it.
const Scheme = "etcd://"

// Limits on an address. They are far above any real configuration and keep
// a hostile one from costing more than a glance.
const (
	// MaxAddressLen is the longest address accepted, in bytes.
	MaxAddressLen = 4096
	// MaxEndpoints is the most HOST:PORT pairs one address may name.
	MaxEndpoints = 16
	// MaxKeyLen is the longest etcd key accepted, in bytes.
	MaxKeyLen = 1024
)

// Address is a parsed etcd anchor address: the members to dial and the key
// that holds the anchor.
type Address struct {
	// Endpoints are the members as HOST:PORT, in the order given; an IPv6
	// host is in brackets.
	Endpoints []string
	// Key is the etcd key, beginning with a slash.
	Key string
}

// String returns the address in the form ParseAddress accepts.
func (a Address) String() string {
	return Scheme + strings.Join(a.Endpoints, ",") + a.Key
}

// ParseAddress parses etcd://HOST:PORT[,HOST:PORT...]/KEY, where KEY is the
// etcd key with its leading slash: etcd://127.0.0.1:2379/kvfence/anchor is
// the key /kvfence/anchor on the member at 127.0.0.1:2379.
//
// It accepts one spelling of each address and refuses anything else rather
// than guess: the scheme in lower case; no user information, query,
// fragment or percent-escape; each HOST a DNS name, an IPv4 address or an
// IPv6 address in brackets without a zone; each PORT a decimal number from
// 1 to 65535 without leading zeros; no endpoint twice; a KEY of printable
// ASCII without empty, "." or ".." segments and without a trailing slash,
// so that two spellings never name two keys an operator takes for one.
func ParseAddress(s string) (Address, error) {
	if len(s) > MaxAddressLen {
		return Address{}, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrBadAddress, len(s), MaxAddressLen)
	}
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return Address{}, fmt.Errorf("%w: %q does not begin with %q", ErrBadAddress, s, Scheme)
	}
	hosts, key, ok := strings.Cut(rest, "/")
	if !ok {
		return Address{}, fmt.Errorf("%w: %q names no key: want %sHOST:PORT/KEY", ErrBadAddress, s, Scheme)
	}
	key = "/" + key
	if err := checkKey(key); err != nil {
		return Address{}, fmt.Errorf("%w: key %q: %v", ErrBadAddress, key, err)
	}
	if hosts == "" {
		return Address{}, fmt.Errorf("%w: %q names no HOST:PORT", ErrBadAddress, s)
	}
	if strings.Contains(hosts, "@") {
		return Address{}, fmt.Errorf("%w: user information is not accepted: credentials come from the TLS options", ErrBadAddress)
	}
	list := strings.Split(hosts, ",")
	if len(list) > MaxEndpoints {
		return Address{}, fmt.Errorf("%w: %d endpoints exceeds the limit of %d", ErrBadAddress, len(list), MaxEndpoints)
	}
	seen := make(map[string]bool, len(list))
	for i, hp := range list {
		if err := checkEndpoint(hp); err != nil {
			return Address{}, fmt.Errorf("%w: endpoint %d %q: %v", ErrBadAddress, i+1, hp, err)
		}
		// Host names are case-insensitive: one member named twice is a
		// mistake, and it would count twice towards nothing.
		if k := strings.ToLower(hp); seen[k] {
			return Address{}, fmt.Errorf("%w: endpoint %q is named twice", ErrBadAddress, hp)
		} else {
			seen[k] = true
		}
	}
	return Address{Endpoints: list, Key: key}, nil
}

// checkEndpoint checks one HOST:PORT.
func checkEndpoint(hp string) error {
	if hp == "" {
		return fmt.Errorf("empty")
	}
	i := strings.LastIndexByte(hp, ':')
	if i < 0 {
		return fmt.Errorf("no :PORT")
	}
	host, port := hp[:i], hp[i+1:]
	if err := checkPort(port); err != nil {
		return fmt.Errorf("port: %v", err)
	}
	if strings.HasPrefix(host, "[") {
		inner, ok := strings.CutSuffix(host[1:], "]")
		if !ok {
			return fmt.Errorf("unterminated [IPv6] host")
		}
		a, err := netip.ParseAddr(inner)
		switch {
		case err != nil:
			return fmt.Errorf("host: %v", err)
		case !a.Is6() || a.Is4In6():
			return fmt.Errorf("host: only an IPv6 address goes in brackets")
		case a.Zone() != "":
			return fmt.Errorf("host: an IPv6 zone is not accepted")
		case a.String() != inner:
			return fmt.Errorf("host: not in canonical form, want [%s]", a)
		}
		return nil
	}
	if strings.ContainsAny(host, ":[]") {
		return fmt.Errorf("an IPv6 host must be in brackets")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if !a.Is4() {
			return fmt.Errorf("host: not an IPv4 address")
		}
		return nil
	}
	return checkHostname(host)
}

// checkPort accepts 1 to 65535 in decimal without leading zeros or sign.
func checkPort(p string) error {
	if p == "" || len(p) > 5 || p[0] == '0' {
		return fmt.Errorf("%q is not a number from 1 to 65535", p)
	}
	for _, c := range []byte(p) {
		if c < '0' || c > '9' {
			return fmt.Errorf("%q is not a number from 1 to 65535", p)
		}
	}
	if n, err := strconv.Atoi(p); err != nil || n > 65535 {
		return fmt.Errorf("%q is not a number from 1 to 65535", p)
	}
	return nil
}

// checkHostname accepts a DNS name of letters, digits and hyphens in labels
// of 1 to 63 bytes that neither begin nor end with a hyphen, at most 253
// bytes in all, whose last label is not a number.
func checkHostname(h string) error {
	if h == "" {
		return fmt.Errorf("empty host")
	}
	if len(h) > 253 {
		return fmt.Errorf("host is %d bytes, longer than a DNS name can be", len(h))
	}
	labels := strings.Split(h, ".")
	for _, label := range labels {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host %q: a DNS label is empty or longer than 63 bytes", h)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("host %q: a DNS label begins or ends with a hyphen", h)
		}
		for _, c := range []byte(label) {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
				return fmt.Errorf("host %q: byte %q is not allowed in a DNS name", h, c)
			}
		}
	}
	// No top-level domain is a number (RFC 3696, section 2). A name that
	// ends in one, such as 127.1 or 0x7f.0.0.1, is an IPv4 address to some
	// resolvers and a name to others: refuse it rather than let a resolver
	// pick the host.
	if isNumber(labels[len(labels)-1]) {
		return fmt.Errorf("host %q ends in a number but is not a dotted-quad IPv4 address", h)
	}
	return nil
}

// isNumber reports whether s is a number as inet_aton reads one: decimal,
// octal, or hexadecimal after 0x.
func isNumber(s string) bool {
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s = s[2:]
		for _, c := range []byte(s) {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
		return true
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// checkKey checks an etcd key taken from an address.
func checkKey(k string) error {
	if len(k) > MaxKeyLen {
		return fmt.Errorf("%d bytes exceeds the %d-byte limit", len(k), MaxKeyLen)
	}
	if k == "/" {
		return fmt.Errorf("empty")
	}
	for _, c := range []byte(k) {
		switch {
		case c <= ' ' || c >= 0x7f:
			return fmt.Errorf("byte %#02x: only printable ASCII without spaces is accepted", c)
		case c == '%':
			return fmt.Errorf("percent-escapes are not accepted: spell the key as it is")
		case c == '?' || c == '#':
			return fmt.Errorf("%q: a query or fragment is not accepted", c)
		case c == '@' || c == ',':
			// Either would make the address read as host information to
			// a reader who splits it differently.
			return fmt.Errorf("%q is not accepted in a key", c)
		}
	}
	for seg := range strings.SplitSeq(k[1:], "/") {
		switch seg {
		case "":
			return fmt.Errorf("an empty segment (a doubled or trailing slash)")
		case ".", "..":
			return fmt.Errorf("a %q segment", seg)
		}
	}
	return nil
}
