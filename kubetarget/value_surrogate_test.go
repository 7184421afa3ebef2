package kubetarget

import (
	"errors"
	"testing"
)

// Ensure that a value whose string holds a lone UTF-16 surrogate escape
// (\ud800), which the JSON decoder replaces silently with U+FFFD, is
// refused as invalid UTF-8 is, rather than decided as another value: two
// approved requests that differ only there would otherwise be dispatched
// as one and the same value, neither the one approved.
func TestCheckValueLoneSurrogate(t *testing.T) {
	var d Dispatcher
	for _, in := range []string{`{"a":"\ud800"}`, `{"a":"\udc00x"}`, `{"a":"x\ud83d"}`} {
		if got, err := d.CheckValue([]byte(in)); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("CheckValue(%s) = %q, %v; want ErrInvalidValue", in, got, err)
		}
	}
	// A valid surrogate pair is a character, and is kept.
	if got, err := d.CheckValue([]byte(`{"a":"\ud83d\ude00"}`)); err != nil || string(got) != `{"a":"😀"}` {
		t.Errorf("CheckValue of a surrogate pair = %q, %v", got, err)
	}
}
