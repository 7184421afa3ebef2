package clusterid

import "testing"

// Ensure that Parse reads what Format and etcdctl write, and refuses zero,
// prefixes, signs, separators and more than 16 digits.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{Format(0x7c3a6e3c0d1f1b2a), 0x7c3a6e3c0d1f1b2a, true},
		{"7C3A6E3C0D1F1B2A", 0x7c3a6e3c0d1f1b2a, true},
		{"1234", 0x1234, true},
		{"0000000000001234", 0x1234, true},
		{"ffffffffffffffff", ^uint64(0), true},
		{"", 0, false},
		{"0", 0, false},
		{"0000000000000000", 0, false},
		{"0x1234", 0, false},
		{"+1234", 0, false},
		{"-1", 0, false},
		{"12_34", 0, false},
		{"12 34", 0, false},
		{"10000000000000000", 0, false},
		{"g", 0, false},
	} {
		got, err := Parse(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Parse(%q) = %x, %v; want %x, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
