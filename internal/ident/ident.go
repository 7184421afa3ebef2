// Package ident checks the identifiers that the receiver and the ledger
// record and print: scope, target, action, worker and operator names.
package ident

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxLen bounds an identifier in bytes.
const MaxLen = 512

// Check returns an error naming field if s is empty, longer than MaxLen
// bytes, not valid UTF-8, or contains a control or bidirectional-override
// character.
func Check(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", field)
	}
	if len(s) > MaxLen {
		return fmt.Errorf("%s is %d bytes, over the %d-byte limit", field, len(s), MaxLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	for _, c := range s {
		// C0, DEL, C1 (terminal escapes) and bidirectional overrides would
		// make an identifier print as something it is not.
		if unicode.IsControl(c) || unicode.Is(unicode.Bidi_Control, c) {
			return fmt.Errorf("%s contains a control character", field)
		}
	}
	return nil
}
