package checkpoint_test

import (
	"testing"

	"github.com/kvfence/kvfence/checkpoint"
)

// Ensure that an extension line cannot carry characters that change how
// it reads when printed (bidirectional overrides, zero-width marks): the
// origin line refuses every character that is not printable, but extension
// lines refuse only control characters (Cc), so "kvfence-epoch-hw 7" can be
// made to display as another value while its bytes, and what the witness
// cosigned, say something else.
func TestRedteamExtensionFormatCharacters(t *testing.T) {
	for _, ext := range []string{
		"kvfence-epoch-hw \u202e71",      // right-to-left override: shows as "17"
		"kvfence-state ab\u200bcd",       // zero-width space
		"kvfence-epoch-hw 7\u2066\u2069", // isolates
	} {
		body := "example.com/log\n1\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n" + ext + "\n"
		if _, err := checkpoint.Parse([]byte(body)); err == nil {
			t.Errorf("extension line %+q accepted", ext)
		}
	}
}
