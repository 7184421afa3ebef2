package checkpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that a receiver's extension lines parse back to what wrote them,
// with and without an admission.
func TestReceiverStateRoundTrip(t *testing.T) {
	for _, s := range []ReceiverState{
		{Head: audit.Hash{1}, State: audit.Hash{2}, EpochHighWater: 0, At: 0},
		{Head: audit.Hash{1}, State: audit.Hash{2}, EpochHighWater: 1<<64 - 1, At: 1<<63 - 1,
			Admission: audit.AdmissionRecord{SHA256: audit.Hash{3}, At: 42}},
	} {
		got, err := ParseReceiverState(s.Extensions())
		if err != nil || got != s {
			t.Fatalf("ParseReceiverState(%q) = %+v, %v; want %+v", s.Extensions(), got, err, s)
		}
	}
}

// Ensure that every other spelling of the extension lines is refused.
func TestParseReceiverStateRefuses(t *testing.T) {
	good := ReceiverState{Head: audit.Hash{0xab}, State: audit.Hash{2}, EpochHighWater: 7, At: 9,
		Admission: audit.AdmissionRecord{SHA256: audit.Hash{3}, At: 4}}.Extensions()
	zero := strings.Repeat("0", 64)
	for _, tc := range []struct {
		name string
		line int
		text string
	}{
		{"uppercase hex", 0, ExtHead + " " + strings.ToUpper(good[0][len(ExtHead)+1:])},
		{"short hash", 1, ExtState + " 00"},
		{"two spaces", 2, ExtEpochHighWater + "  7"},
		{"leading zero", 2, ExtEpochHighWater + " 07"},
		{"sign", 3, ExtAt + " +9"},
		{"negative time", 3, ExtAt + " -9"},
		{"time over int64", 3, ExtAt + " 9223372036854775808"},
		{"other prefix", 3, "kvfence-time 9"},
		{"admission without time", 4, ExtAdmission + " " + zero[:63] + "1"},
		{"admission zero hash", 4, ExtAdmission + " " + zero + " 4"},
		{"admission spelled None", 4, ExtAdmission + " None"},
		{"trailing space", 4, good[4] + " "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ext := append([]string(nil), good...)
			ext[tc.line] = tc.text
			if _, err := ParseReceiverState(ext); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseReceiverState(%q) = %v, want ErrMalformed", tc.text, err)
			}
		})
	}
	if _, err := ParseReceiverState(good[:4]); !errors.Is(err, ErrMalformed) {
		t.Fatal("four lines accepted")
	}
	if _, err := ParseReceiverState(append(good, "extra")); !errors.Is(err, ErrMalformed) {
		t.Fatal("six lines accepted")
	}
	if _, err := ParseReceiverState([]string{good[1], good[0], good[2], good[3], good[4]}); !errors.Is(err, ErrMalformed) {
		t.Fatal("lines out of order accepted")
	}
}
