package kubetarget

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/kvfence"
)

// full returns a stamp's four annotations with one changed (or removed,
// for the value "<absent>").
func full(key, value string) map[string]string {
	a := map[string]string{
		AnnotationScope:   "prod/backup",
		AnnotationEpoch:   "7",
		AnnotationGrant:   "g-1",
		AnnotationReceipt: "r-42",
	}
	if key != "" {
		if value == "<absent>" {
			delete(a, key)
		} else {
			a[key] = value
		}
	}
	return a
}

// Ensure that a stamp is read only when all four annotations are present
// and well formed: partial or malformed annotations, which anyone able to
// write the object could forge, are ErrMalformedStamp and the zero stamp,
// never a stamp half read.
func TestParseStamp(t *testing.T) {
	good := kvfence.Stamp{Scope: "prod/backup", Epoch: 7, Grant: "g-1", Receipt: "r-42"}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        kvfence.Stamp
		wantErr     string
	}{
		{"no annotations", nil, kvfence.Stamp{}, ""},
		{"unrelated annotations", map[string]string{"a": "b"}, kvfence.Stamp{}, ""},
		{"all four", full("", ""), good, ""},
		{"fencing write: empty grant", full(AnnotationGrant, ""), kvfence.Stamp{Scope: "prod/backup", Epoch: 7, Receipt: "r-42"}, ""},
		{"epoch zero", full(AnnotationEpoch, "0"), kvfence.Stamp{Scope: "prod/backup", Grant: "g-1", Receipt: "r-42"}, ""},
		{"largest epoch", full(AnnotationEpoch, "18446744073709551615"), kvfence.Stamp{Scope: "prod/backup", Epoch: 1<<64 - 1, Grant: "g-1", Receipt: "r-42"}, ""},
		{"scope missing", full(AnnotationScope, "<absent>"), kvfence.Stamp{}, "kvfence.dev/scope is missing"},
		{"epoch missing", full(AnnotationEpoch, "<absent>"), kvfence.Stamp{}, "kvfence.dev/epoch is missing"},
		{"grant missing", full(AnnotationGrant, "<absent>"), kvfence.Stamp{}, "kvfence.dev/grant is missing"},
		{"receipt missing", full(AnnotationReceipt, "<absent>"), kvfence.Stamp{}, "kvfence.dev/receipt is missing"},
		{"only a receipt", map[string]string{AnnotationReceipt: "r-1"}, kvfence.Stamp{}, "missing"},
		{"empty scope", full(AnnotationScope, ""), kvfence.Stamp{}, "scope is empty"},
		{"empty receipt", full(AnnotationReceipt, ""), kvfence.Stamp{}, "receipt is empty"},
		{"control character in receipt", full(AnnotationReceipt, "r\x1b[2J"), kvfence.Stamp{}, "control character"},
		{"bidi override in scope", full(AnnotationScope, "a\u202eb"), kvfence.Stamp{}, "control character"},
		{"control character in grant", full(AnnotationGrant, "g\n"), kvfence.Stamp{}, "control character"},
		{"long receipt", full(AnnotationReceipt, strings.Repeat("r", 513)), kvfence.Stamp{}, "limit"},
		{"empty epoch", full(AnnotationEpoch, ""), kvfence.Stamp{}, "not a decimal epoch"},
		{"negative epoch", full(AnnotationEpoch, "-1"), kvfence.Stamp{}, "not a decimal epoch"},
		{"plus sign", full(AnnotationEpoch, "+7"), kvfence.Stamp{}, "not a decimal epoch"},
		{"leading zero", full(AnnotationEpoch, "07"), kvfence.Stamp{}, "not a decimal epoch"},
		{"spaces", full(AnnotationEpoch, " 7"), kvfence.Stamp{}, "not a decimal epoch"},
		{"hex", full(AnnotationEpoch, "0x7"), kvfence.Stamp{}, "not a decimal epoch"},
		{"underscore", full(AnnotationEpoch, "1_0"), kvfence.Stamp{}, "not a decimal epoch"},
		{"overflow", full(AnnotationEpoch, "18446744073709551616"), kvfence.Stamp{}, "64 bits"},
		{"very long", full(AnnotationEpoch, strings.Repeat("9", 40)), kvfence.Stamp{}, "not a decimal epoch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStamp(tc.annotations)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("ParseStamp: %v", err)
			}
			if tc.wantErr != "" && (!errors.Is(err, ErrMalformedStamp) || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("ParseStamp = %v; want ErrMalformedStamp with %q", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseStamp = %+v; want %+v", got, tc.want)
			}
		})
	}
}

// Ensure that a stamp that could not be read back is refused before it is
// written, and that a valid one is written as ParseStamp reads it.
func TestStampAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stamp kvfence.Stamp
		ok    bool
	}{
		{"full", kvfence.Stamp{Scope: "s", Epoch: 3, Grant: "g", Receipt: "r"}, true},
		{"fence without grant", kvfence.Stamp{Scope: "s", Epoch: 4, Receipt: "r"}, true},
		{"zero", kvfence.Stamp{}, false},
		{"no receipt", kvfence.Stamp{Scope: "s", Epoch: 3, Grant: "g"}, false},
		{"no scope", kvfence.Stamp{Epoch: 3, Grant: "g", Receipt: "r"}, false},
		{"control character", kvfence.Stamp{Scope: "s", Epoch: 3, Grant: "g\x00", Receipt: "r"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := StampAnnotations(tc.stamp)
			if !tc.ok {
				if !errors.Is(err, ErrInvalidStamp) {
					t.Fatalf("StampAnnotations = %v, %v; want ErrInvalidStamp", a, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseStamp(a)
			if err != nil || back != tc.stamp {
				t.Errorf("read back %+v, %v; want %+v", back, err, tc.stamp)
			}
		})
	}
}

// FuzzParseStamp checks that ParseStamp returns either the zero stamp
// with an error, or a stamp that StampAnnotations writes back as the very
// annotations it was read from.
func FuzzParseStamp(f *testing.F) {
	f.Add("s", "7", "g", "r", uint8(15))
	f.Add("s", "07", "", "r", uint8(15))
	f.Add("", "18446744073709551616", "g", "", uint8(15))
	f.Add("s", "1", "g", "r", uint8(5))
	f.Fuzz(func(t *testing.T, scope, epoch, grant, receipt string, present uint8) {
		a := map[string]string{}
		for i, kv := range [][2]string{{AnnotationScope, scope}, {AnnotationEpoch, epoch}, {AnnotationGrant, grant}, {AnnotationReceipt, receipt}} {
			if present&(1<<i) != 0 {
				a[kv[0]] = kv[1]
			}
		}
		s, err := ParseStamp(a)
		if err != nil {
			if s != (kvfence.Stamp{}) || !errors.Is(err, ErrMalformedStamp) {
				t.Fatalf("error %v with stamp %+v", err, s)
			}
			return
		}
		if s == (kvfence.Stamp{}) {
			if len(a) != 0 {
				t.Fatalf("annotations %q read as no stamp without an error", a)
			}
			return
		}
		back, err := StampAnnotations(s)
		if err != nil {
			t.Fatalf("a stamp read is not writable: %v", err)
		}
		for k, v := range back {
			if a[k] != v {
				t.Fatalf("annotation %s: read %q, writes %q", k, a[k], v)
			}
		}
	})
}
