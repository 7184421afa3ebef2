package main

import "testing"

// Ensure that event and target text quotes what would not read as itself:
// terminal escapes, bidirectional overrides and zero-width characters.
func TestQuoteIfNeeded(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"configmap/prod", "configmap/prod"},
		{"two words", `"two words"`},
		{"", `""`},
		{"evil\x1b[2J", `"evil\x1b[2J"`},
		{"deploy\u200b", `"deploy\u200b"`},
		{"abc\u202edcba", `"abc\u202edcba"`},
		{"caf\u00e9", "caf\u00e9"},
	} {
		if got := quoteIfNeeded(tc.in); got != tc.want {
			t.Errorf("quoteIfNeeded(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
