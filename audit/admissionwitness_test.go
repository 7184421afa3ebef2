package audit

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// witnessedAdmission is testAdmission naming two witnesses.
func witnessedAdmission() Admission {
	a := testAdmission()
	a.Witnessed = []WitnessedCheckpoint{{Witness: "w1", Size: 7, Root: Hash{1}}, {Witness: "w2", Size: 9, Root: Hash{2}}}
	a.AdmittedRoot = Hash{0x77}
	return a
}

// Ensure that an admission naming witnessed checkpoints, of either kind,
// round-trips, is signed over its list, and survives no single-byte change.
func TestAdmission_WitnessedRoundTrip(t *testing.T) {
	for _, lost := range []bool{false, true} {
		a := witnessedAdmission()
		if lost {
			a = testLostAnchorAdmission()
			a.Witnessed, a.AdmittedRoot = witnessedAdmission().Witnessed, witnessedAdmission().AdmittedRoot
		}
		sa, err := SignAdmission(recoveryKey, a)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := sa.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseSignedAdmission(raw)
		if err != nil || !reflect.DeepEqual(got, sa) {
			t.Fatalf("lost %v: round trip: %+v, %v", lost, got, err)
		}
		if err := got.Verify(pubOf(recoveryKey)); err != nil {
			t.Fatalf("lost %v: verify: %v", lost, err)
		}
		// The list is signed: another root under the same signature fails.
		changed := got
		changed.Witnessed = append([]WitnessedCheckpoint(nil), got.Witnessed...)
		changed.Witnessed[1].Root = Hash{3}
		if err := changed.Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("lost %v: changed root verified: %v", lost, err)
		}
		// So is the admitted root.
		changed = got
		changed.AdmittedRoot = Hash{0x78}
		if err := changed.Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("lost %v: changed admitted root verified: %v", lost, err)
		}
		mangle(raw, func(i int, m []byte) {
			got, err := ParseSignedAdmission(m)
			if err == nil {
				err = got.Verify(pubOf(recoveryKey))
			}
			if err == nil {
				t.Fatalf("lost %v: byte %d = %#x: accepted", lost, i, m[i])
			}
		})
	}
}

// Ensure that the witnessed key is spelled as documented: after
// "receiver", one three-key map per witness, with "admitted_root" between
// "admitted_head" and "admitted_state"; and that an admission without
// witnesses keeps its old encoding (neither key, nine pairs).
func TestAdmission_WitnessedEncoding(t *testing.T) {
	a := testAdmission()
	old := appendAdmission(nil, &a)
	if old[0] != 0xa9 || bytes.Contains(old, []byte("witnessed")) || bytes.Contains(old, []byte("admitted_root")) {
		t.Fatalf("an admission without witnesses changed form: %x", old)
	}
	a.Witnessed = []WitnessedCheckpoint{{Witness: "w", Size: 5, Root: Hash{0xaa}}}
	a.AdmittedRoot = Hash{0xbb}
	enc := appendAdmission(nil, &a)
	want := "\x69witnessed\x81\xa3\x64name\x61w\x64root\x58\x20\xaa" + strings.Repeat("\x00", 31) + "\x64size\x05"
	i := bytes.Index(enc, []byte("\x68receiver"))
	if enc[0] != 0xab || i < 0 || !bytes.Contains(enc[i:], []byte(want)) || bytes.Index(enc, []byte(want)) > bytes.Index(enc, []byte("admitted_seq")) {
		t.Fatalf("encoding %x does not hold %x after the receiver", enc, want)
	}
	root := "\x6dadmitted_root\x58\x20\xbb" + strings.Repeat("\x00", 31)
	j := bytes.Index(enc, []byte(root))
	if j < 0 || j < bytes.Index(enc, []byte("\x6dadmitted_head")) || j > bytes.Index(enc, []byte("\x6eadmitted_state")) {
		t.Fatalf("encoding %x does not hold %x between admitted_head and admitted_state", enc, root)
	}
}

// Ensure that an admission naming witnesses without the admitted root, or
// with a root but no witnesses, is refused by the encoder and the decoder.
func TestAdmission_AdmittedRootRefused(t *testing.T) {
	noRoot := witnessedAdmission()
	noRoot.AdmittedRoot = Hash{}
	rootOnly := testAdmission()
	rootOnly.AdmittedRoot = Hash{1}
	for name, a := range map[string]Admission{"witnesses without a root": noRoot, "a root without witnesses": rootOnly} {
		if _, err := SignAdmission(recoveryKey, a); !errors.Is(err, ErrBadAdmission) {
			t.Errorf("%s: signed: %v", name, err)
		}
	}
	// The encoder writes neither form, so the bytes are made here: the
	// witnessed key cut out of a witnessed admission (a root without
	// witnesses), and a zero root (witnesses without one).
	w := witnessedAdmission()
	enc := appendAdmission(nil, &w)
	start := bytes.Index(enc, []byte(keyWitnessed))
	end := bytes.Index(enc, []byte("\x6cadmitted_seq"))
	cut := append(append([]byte{enc[0] - 1}, enc[1:start]...), enc[end:]...)
	if _, err := parseAdmission(cut); !errors.Is(err, ErrBadAdmission) || !strings.Contains(err.Error(), "admitted tree root") {
		t.Errorf("a root without witnesses: parsed: %v", err)
	}
	if _, err := parseAdmission(appendAdmission(nil, &noRoot)); !errors.Is(err, ErrBadAdmission) || !strings.Contains(err.Error(), "admitted tree's root") {
		t.Errorf("witnesses without a root: parsed: %v", err)
	}
}

// Ensure that a witnessed list that is unsorted, repeats a name, names a
// witness badly, is too long, has a short root, or is present but empty
// is refused by the encoder and the decoder alike.
func TestAdmission_WitnessedRefused(t *testing.T) {
	w := func(name string, size uint64) WitnessedCheckpoint {
		return WitnessedCheckpoint{Witness: name, Size: size, Root: Hash{1}}
	}
	many := make([]WitnessedCheckpoint, MaxWitnessed+1)
	for i := range many {
		many[i] = w(string(rune('a'+i)), 1)
	}
	for _, tc := range []struct {
		name string
		list []WitnessedCheckpoint
	}{
		{"unsorted", []WitnessedCheckpoint{w("w2", 1), w("w1", 1)}},
		{"repeated name", []WitnessedCheckpoint{w("w1", 1), w("w1", 2)}},
		{"empty name", []WitnessedCheckpoint{w("", 1)}},
		{"name with a space", []WitnessedCheckpoint{w("w 1", 1)}},
		{"name with a plus", []WitnessedCheckpoint{w("w+1", 1)}},
		{"size over 2^62", []WitnessedCheckpoint{w("w1", 1<<62+1)}},
		{"too many", many},
	} {
		a := testAdmission()
		a.Witnessed, a.AdmittedRoot = tc.list, Hash{1}
		if _, err := SignAdmission(recoveryKey, a); !errors.Is(err, ErrBadAdmission) {
			t.Errorf("%s: signed: %v", tc.name, err)
		}
		// The same bytes, written past the encoder's check, are refused
		// by the decoder.
		if _, err := parseAdmission(appendAdmission(nil, &a)); !errors.Is(err, ErrBadAdmission) {
			t.Errorf("%s: parsed: %v", tc.name, err)
		}
	}
	// Within every per-field limit, too large together.
	big := testAdmission()
	big.Reason = strings.Repeat("r", MaxReasonLen)
	for i := range MaxWitnessed {
		big.Witnessed = append(big.Witnessed, WitnessedCheckpoint{Witness: string(rune('a'+i)) + strings.Repeat("w", 200), Size: 1})
	}
	if _, err := SignAdmission(recoveryKey, big); !errors.Is(err, ErrBadAdmission) {
		t.Errorf("an admission over MaxAdmissionSize was signed: %v", err)
	}
	a := testAdmission()
	enc := appendAdmission(nil, &a)
	i := bytes.Index(enc, []byte("\x6cadmitted_seq"))
	for name, ins := range map[string]string{
		"empty list": "\x69witnessed\x80",
		"short root": "\x69witnessed\x81\xa3\x64name\x61w\x64root\x41\x00\x64size\x05",
		"extra key":  "\x69witnessed\x81\xa4\x64name\x61w\x64root\x58\x20" + strings.Repeat("\x00", 32) + "\x64size\x05\x64zzzz\x00",
	} {
		bad := append(append(append([]byte{0xaa}, enc[1:i]...), ins...), enc[i:]...)
		if _, err := parseAdmission(bad); !errors.Is(err, ErrBadAdmission) {
			t.Errorf("%s: parsed: %v", name, err)
		}
	}
}

// Ensure that CheckWitnesses accepts exactly the answers the admission
// names, and refuses, naming the witness, an answer at another size or
// root, an answering witness it omits, and a named witness that holds
// nothing.
func TestAdmission_CheckWitnesses(t *testing.T) {
	empty := Hash{0xee}
	a := witnessedAdmission() // w1 at 7/{1}, w2 at 9/{2}
	for _, tc := range []struct {
		name   string
		latest []WitnessedCheckpoint
		bad    string // the witness the error names; "" for none
	}{
		{"both as named", []WitnessedCheckpoint{{"w1", 7, Hash{1}}, {"w2", 9, Hash{2}}}, ""},
		{"one did not answer", []WitnessedCheckpoint{{"w2", 9, Hash{2}}}, ""},
		{"an unnamed witness holds nothing", []WitnessedCheckpoint{{"w1", 7, Hash{1}}, {"w3", 0, empty}}, ""},
		{"older size named", []WitnessedCheckpoint{{"w1", 8, Hash{1}}}, "w1"},
		{"other root", []WitnessedCheckpoint{{"w2", 9, Hash{9}}}, "w2"},
		{"answering witness omitted", []WitnessedCheckpoint{{"w1", 7, Hash{1}}, {"w3", 4, Hash{4}}}, "w3"},
		{"named witness holds nothing", []WitnessedCheckpoint{{"w1", 0, empty}}, "w1"},
	} {
		err := a.CheckWitnesses(tc.latest, empty)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.bad != "" && (!errors.Is(err, ErrAdmissionMismatch) || !strings.Contains(err.Error(), "witness "+tc.bad+" ")):
			t.Errorf("%s: %v, want a mismatch naming %s", tc.name, err, tc.bad)
		}
	}
}
