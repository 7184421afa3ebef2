package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func testAdmission() Admission {
	return Admission{Receiver: testReceiver, SupersededAnchor: Head{8, Hash{8}}, AdmittedHead: Head{7, Hash{7}},
		AdmittedState: Hash{0x57}, At: t0 + 3600e9, Expires: t0 + 7200e9, Reason: "restored from backup after disk loss; ticket OPS-1234"}
}

func testLostAnchorAdmission() Admission {
	return Admission{Receiver: testReceiver, LostAnchor: true, AdmittedHead: Head{7, Hash{7}}, AdmittedState: Hash{0x57}, EpochFloor: 40,
		At: t0 + 3600e9, Expires: t0 + 7200e9, Reason: "anchor volume lost; highest epoch seen in monitoring was 40; ticket OPS-1235"}
}

// Ensure that an admission verifies under the recovery key only, and
// that its signature cannot stand in for a checkpoint's.
func TestSignAdmission_Verify(t *testing.T) {
	sa, err := SignAdmission(recoveryKey, testAdmission())
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.Verify(pubOf(recoveryKey)); err != nil {
		t.Fatal(err)
	}
	if err := sa.Verify(pubOf(receiverKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("Verify with the receiver key: %v", err)
	}
	edited := sa
	edited.Reason += "."
	if err := edited.Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("Verify after an edit: %v", err)
	}
	// The same key signing a checkpoint and an admission never produces
	// one signature valid for both, thanks to the domain prefixes.
	sc, _ := Sign(recoveryKey, Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: 1})
	forged := SignedCheckpoint{Checkpoint: sc.Checkpoint, Key: sa.Key, Signature: sa.Signature}
	if err := forged.Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("admission signature accepted for a checkpoint: %v", err)
	}
	if _, err := SignAdmission(recoveryKey[:10], testAdmission()); !errors.Is(err, ErrBadKey) {
		t.Fatalf("SignAdmission with a short key: %v", err)
	}
}

// Ensure that Check refuses an admission for any other receiver, anchor or
// head.
func TestAdmission_Check(t *testing.T) {
	a := testAdmission()
	for _, tc := range []struct {
		name     string
		receiver string
		anchor   Head
		head     Head
		want     error
		state    Hash
	}{
		{"match", testReceiver, Head{8, Hash{8}}, Head{7, Hash{7}}, nil, Hash{0x57}},
		{"other state", testReceiver, Head{8, Hash{8}}, Head{7, Hash{7}}, ErrAdmissionMismatch, Hash{0x58}},
		{"other receiver", "receiver-2", Head{8, Hash{8}}, Head{7, Hash{7}}, ErrAdmissionMismatch, Hash{0x57}},
		{"other anchor seq", testReceiver, Head{9, Hash{8}}, Head{7, Hash{7}}, ErrAdmissionMismatch, Hash{0x57}},
		{"other anchor head", testReceiver, Head{8, Hash{9}}, Head{7, Hash{7}}, ErrAdmissionMismatch, Hash{0x57}},
		{"other head seq", testReceiver, Head{8, Hash{8}}, Head{6, Hash{7}}, ErrAdmissionMismatch, Hash{0x57}},
		{"other head hash", testReceiver, Head{8, Hash{8}}, Head{7, Hash{6}}, ErrAdmissionMismatch, Hash{0x57}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := a.Check(tc.receiver, tc.anchor, tc.head, tc.state)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Check: %v, want %v", err, tc.want)
			}
		})
	}
}

// Ensure that SignAdmission refuses admissions the decoder would refuse.
func TestSignAdmission_Refuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Admission)
	}{
		{"no receiver", func(a *Admission) { a.Receiver = "" }},
		{"no reason", func(a *Admission) { a.Reason = "" }},
		{"long reason", func(a *Admission) { a.Reason = strings.Repeat("r", MaxReasonLen+1) }},
		{"invalid UTF-8 reason", func(a *Admission) { a.Reason = "\xff" }},
		{"anchor seq 0", func(a *Admission) { a.SupersededAnchor.Seq = 0 }},
		{"head seq 0", func(a *Admission) { a.AdmittedHead.Seq = 0 }},
		{"epoch floor in an ordinary admission", func(a *Admission) { a.EpochFloor = 1 }},
		{"lost anchor with a superseded anchor", func(a *Admission) { a.LostAnchor = true }},
		{"lost anchor with a superseded seq only", func(a *Admission) {
			a.LostAnchor, a.SupersededAnchor = true, Head{Seq: 1}
		}},
		{"lost anchor with a superseded hash only", func(a *Admission) {
			a.LostAnchor, a.SupersededAnchor = true, Head{Hash: Hash{1}}
		}},
		{"lost anchor, head seq 0", func(a *Admission) {
			a.LostAnchor, a.SupersededAnchor, a.AdmittedHead.Seq = true, Head{}, 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := testAdmission()
			tc.edit(&a)
			if _, err := SignAdmission(recoveryKey, a); !errors.Is(err, ErrBadAdmission) {
				t.Fatalf("SignAdmission: %v, want ErrBadAdmission", err)
			}
		})
	}
	for _, a := range []Admission{testAdmission(), testLostAnchorAdmission()} {
		a.Receiver, a.Reason = strings.Repeat("r", MaxReceiverLen), strings.Repeat("x", MaxReasonLen)
		if a.LostAnchor {
			a.EpochFloor = ^uint64(0)
		}
		sa, err := SignAdmission(recoveryKey, a)
		if err != nil {
			t.Fatal(err)
		}
		if raw, err := sa.Marshal(); err != nil || len(raw) > MaxAdmissionSize {
			t.Fatalf("largest admission encodes to %d bytes: %v", len(raw), err)
		}
	}
}

// Ensure that every single-byte change of an encoded signed admission, of
// either kind, is refused by the decoder or by the signature check.
func TestSignedAdmission_Mangling(t *testing.T) {
	for _, a := range []Admission{testAdmission(), testLostAnchorAdmission()} {
		a.Reason = "disk loss"
		sa, _ := SignAdmission(recoveryKey, a)
		raw, err := sa.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ParseSignedAdmission(raw); err != nil || !reflect.DeepEqual(got, sa) {
			t.Fatalf("round trip: %+v, %v", got, err)
		}
		mangle(raw, func(i int, m []byte) {
			got, err := ParseSignedAdmission(m)
			if err == nil {
				err = got.Verify(pubOf(recoveryKey))
			}
			if err == nil {
				t.Fatalf("lost anchor %v: byte %d = %#x: accepted", a.LostAnchor, i, m[i])
			}
		})
		body := appendAdmission(nil, &sa.Admission)
		for name, bad := range map[string][]byte{
			"trailing byte":            append(raw[:len(raw):len(raw)], 0),
			"checkpoint body key":      appendSigned(nil, keyCheckpoint, sa.Key, &sa.Signature, body),
			"body with trailing bytes": appendSigned(nil, keyAdmission, sa.Key, &sa.Signature, append(body, 0)),
			"oversize":                 make([]byte, MaxAdmissionSize+1),
		} {
			if _, err := ParseSignedAdmission(bad); !errors.Is(err, ErrBadAdmission) {
				t.Errorf("lost anchor %v: %s: %v, want ErrBadAdmission", a.LostAnchor, name, err)
			}
		}
	}
}

// Ensure that the decoder refuses every mix of the two kinds' keys: the
// kind is spelled out, never inferred from a zero or a missing anchor.
func TestParseAdmission_KindConfusion(t *testing.T) {
	h7 := "\x58\x20" + string(bytes.Repeat([]byte{7}, 32))
	h8 := "\x58\x20" + string(bytes.Repeat([]byte{8}, 32))
	zero := "\x58\x20" + string(make([]byte, 32))
	common := "\x62at\x00\x66reason\x61r\x67expires\x01\x68receiver\x61r"
	admitted := "\x6cadmitted_seq\x07\x6dadmitted_head" + h7 + "\x6eadmitted_state" + h7
	superseded := "\x6esuperseded_seq\x08\x6fsuperseded_head" + h8
	for name, body := range map[string]string{
		"lost_anchor false":                    "\xaa" + common + "\x6blost_anchor\xf4" + admitted + superseded,
		"lost_anchor false, no superseded":     "\xa8" + common + "\x6blost_anchor\xf4" + admitted,
		"lost_anchor 1":                        "\xa9" + common + "\x6bepoch_floor\x00\x6blost_anchor\x01" + admitted,
		"lost_anchor null":                     "\xa9" + common + "\x6bepoch_floor\x00\x6blost_anchor\xf6" + admitted,
		"lost anchor without epoch_floor":      "\xa8" + common + "\x6blost_anchor\xf5" + admitted,
		"lost anchor without lost_anchor":      "\xa8" + common + "\x6bepoch_floor\x00" + admitted,
		"lost anchor with a superseded anchor": "\xab" + common + "\x6bepoch_floor\x00\x6blost_anchor\xf5" + admitted + superseded,
		"lost anchor with a zero anchor": "\xab" + common + "\x6bepoch_floor\x00\x6blost_anchor\xf5" + admitted +
			"\x6esuperseded_seq\x00\x6fsuperseded_head" + zero,
		"ordinary with epoch_floor 0":   "\xaa" + common + "\x6bepoch_floor\x00" + admitted + superseded,
		"ordinary with a zero anchor":   "\xa9" + common + admitted + "\x6esuperseded_seq\x00\x6fsuperseded_head" + zero,
		"no anchor and no kind":         "\xa7" + common + admitted,
		"epoch_floor not shortest":      "\xa9" + common + "\x6bepoch_floor\x18\x07\x6blost_anchor\xf5" + admitted,
		"epoch_floor after lost_anchor": "\xa9" + common + "\x6blost_anchor\xf5\x6bepoch_floor\x07" + admitted,
	} {
		if _, err := parseAdmission([]byte(body)); !errors.Is(err, ErrBadAdmission) {
			t.Errorf("%s: %v, want ErrBadAdmission", name, err)
		}
	}
	// The well-formed spellings of both kinds, for contrast.
	for name, body := range map[string]string{
		"ordinary":    "\xa9" + common + admitted + superseded,
		"lost anchor": "\xa9" + common + "\x6bepoch_floor\x07\x6blost_anchor\xf5" + admitted,
	} {
		if _, err := parseAdmission([]byte(body)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Ensure that a lost-anchor admission verifies under the recovery key only,
// and that neither kind's signature is worth anything as the other's: the
// prefixes differ, so even a signer tricked into signing the other kind's
// message for the same body bytes produces nothing usable.
func TestSignAdmission_LostAnchorDomain(t *testing.T) {
	la, err := SignAdmission(recoveryKey, testLostAnchorAdmission())
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Verify(pubOf(recoveryKey)); err != nil {
		t.Fatal(err)
	}
	if err := la.Verify(pubOf(receiverKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("Verify with the receiver key: %v", err)
	}
	byReceiver, _ := SignAdmission(receiverKey, testLostAnchorAdmission())
	if err := byReceiver.Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("signed by the receiver key, verified as the recovery key's: %v", err)
	}
	for _, edit := range []func(*Admission){
		func(a *Admission) { a.EpochFloor-- },
		func(a *Admission) { a.AdmittedHead.Seq++ },
		func(a *Admission) { a.Receiver += "x" },
		func(a *Admission) { a.Expires++ },
	} {
		edited := la
		edit(&edited.Admission)
		if err := edited.Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("Verify after an edit: %v", err)
		}
	}

	// The same fields as an ordinary admission and as a lost-anchor one:
	// each signature fails as the other.
	ord := testAdmission()
	ord.AdmittedHead, ord.At, ord.Reason = la.AdmittedHead, la.At, la.Reason
	so, _ := SignAdmission(recoveryKey, ord)
	if err := (SignedAdmission{Admission: la.Admission, Key: so.Key, Signature: so.Signature}).Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("ordinary signature accepted on a lost-anchor admission: %v", err)
	}
	if err := (SignedAdmission{Admission: ord, Key: la.Key, Signature: la.Signature}).Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("lost-anchor signature accepted on an ordinary admission: %v", err)
	}
	// A signature over the lost-anchor body under the ordinary prefix, or
	// over the ordinary body under the lost-anchor prefix, is refused.
	for name, msg := range map[string][]byte{
		"lost-anchor body, ordinary prefix": append([]byte(admissionPrefix), appendAdmission(nil, &la.Admission)...),
		"ordinary body, lost-anchor prefix": append([]byte(reanchorPrefix), appendAdmission(nil, &ord)...),
	} {
		forged := la
		if name[0] == 'o' {
			forged = so
		}
		copy(forged.Signature[:], ed25519.Sign(recoveryKey, msg))
		if err := forged.Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Nor is a lost-anchor admission's signature a checkpoint's.
	sc, _ := Sign(recoveryKey, Checkpoint{Root: testRoot, Receiver: testReceiver, Seq: 7, Head: Hash{7}})
	if err := (SignedCheckpoint{Checkpoint: sc.Checkpoint, Key: la.Key, Signature: la.Signature}).Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("lost-anchor signature accepted for a checkpoint: %v", err)
	}
}

// Ensure that CheckLostAnchor accepts a lost-anchor admission for exactly
// this receiver and head and nothing else, and that Check never accepts a
// lost-anchor admission, whatever anchor it is given.
func TestAdmission_CheckLostAnchor(t *testing.T) {
	la := testLostAnchorAdmission()
	for _, tc := range []struct {
		name     string
		a        Admission
		receiver string
		head     Head
		want     error
	}{
		{"match", la, testReceiver, Head{7, Hash{7}}, nil},
		{"other receiver", la, "receiver-2", Head{7, Hash{7}}, ErrAdmissionMismatch},
		{"other head seq", la, testReceiver, Head{8, Hash{7}}, ErrAdmissionMismatch},
		{"other head hash", la, testReceiver, Head{7, Hash{6}}, ErrAdmissionMismatch},
		{"ordinary admission", testAdmission(), testReceiver, Head{7, Hash{7}}, ErrAdmissionMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.a.CheckLostAnchor(tc.receiver, tc.head, Hash{0x57})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("CheckLostAnchor: %v, want %v", err, tc.want)
			}
		})
	}
	for _, anchor := range []Head{{}, {8, Hash{8}}, {7, Hash{7}}} {
		if err := la.Check(testReceiver, anchor, Head{7, Hash{7}}, Hash{0x57}); !errors.Is(err, ErrAdmissionMismatch) {
			t.Errorf("Check(anchor %v) of a lost-anchor admission: %v", anchor, err)
		}
	}
}

// Ensure that the lost-anchor example in the package documentation is the
// encoding, byte for byte.
func TestAdmission_LostAnchorDocExample(t *testing.T) {
	a := Admission{Receiver: "r", LostAnchor: true, AdmittedHead: Head{Seq: 1}, EpochFloor: 7, Expires: 3600e9, Reason: "r"}
	want := "a9" + "626174" + "00" + "66726561736f6e" + "6172" + "6765787069726573" + "1b0000034630b8a000" +
		"6872656365697665" + "72" + "6172" +
		"6b65706f63685f666c6f6f72" + "07" + "6b6c6f73745f616e63686f72" + "f5" +
		"6c61646d69747465645f736571" + "01" + "6d61646d69747465645f68656164" + "5820" + strings.Repeat("00", 32) +
		"6e61646d69747465645f7374617465" + "5820" + strings.Repeat("00", 32)
	if got := hex.EncodeToString(appendAdmission(nil, &a)); got != want {
		t.Fatalf("encoding\n got %s\nwant %s", got, want)
	}
	if got, err := parseAdmission(appendAdmission(nil, &a)); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("parse: %+v, %v", got, err)
	}
}

// Ensure that an admission's validity is signed and bounded: it ends after
// it begins, lasts at most MaxAdmissionValidity, and a changed expiry
// breaks the signature.
func TestSignAdmission_Validity(t *testing.T) {
	max := int64(MaxAdmissionValidity)
	for _, tc := range []struct {
		name        string
		at, expires int64
		ok          bool
	}{
		{"an hour", t0, t0 + 3600e9, true},
		{"one nanosecond", t0, t0 + 1, true},
		{"the limit", t0, t0 + max, true},
		{"over the limit", t0, t0 + max + 1, false},
		{"zero", t0, t0, false},
		{"negative", t0, t0 - 1, false},
		{"no expiry", t0, 0, false},
		{"across the int64 range", math.MinInt64, math.MaxInt64, false},
		{"before 1970", -3600e9, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, a := range []Admission{testAdmission(), testLostAnchorAdmission()} {
				a.At, a.Expires = tc.at, tc.expires
				sa, err := SignAdmission(recoveryKey, a)
				if !tc.ok {
					if !errors.Is(err, ErrBadAdmission) {
						t.Fatalf("lost anchor %v: SignAdmission: %v, want ErrBadAdmission", a.LostAnchor, err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				raw, err := sa.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				if got, err := ParseSignedAdmission(raw); err != nil || !reflect.DeepEqual(got, sa) {
					t.Fatalf("round trip: %+v, %v", got, err)
				}
				edited := sa
				if edited.Expires--; edited.Expires <= edited.At {
					edited.Expires += 2
				}
				if err := edited.Verify(pubOf(recoveryKey)); !errors.Is(err, ErrBadSignature) {
					t.Fatalf("a later expiry kept the signature: %v", err)
				}
			}
		})
	}
}

// Ensure that CheckTime refuses an admission at and after its expiry and
// one signed further ahead of the clock than MaxAdmissionSkew, and accepts
// it in between.
func TestAdmission_CheckTime(t *testing.T) {
	a := testAdmission() // valid from t0+1h to t0+2h
	skew := int64(MaxAdmissionSkew)
	for _, tc := range []struct {
		name string
		now  int64
		want error
	}{
		{"at signing", a.At, nil},
		{"just before expiry", a.Expires - 1, nil},
		{"at expiry", a.Expires, ErrAdmissionExpired},
		{"a year after", a.Expires + 365*24*3600e9, ErrAdmissionExpired},
		{"signed within the skew ahead", a.At - skew, nil},
		{"signed beyond the skew ahead", a.At - skew - 1, ErrAdmissionNotYetValid},
		{"the clock at 1970", 0, ErrAdmissionNotYetValid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := a.CheckTime(time.Unix(0, tc.now))
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("CheckTime: %v, want %v", err, tc.want)
			}
		})
	}
}

// Ensure that an admission of the second format, which had no expiry, is
// refused with an error that says so, of either kind: it would otherwise
// be a bearer token valid forever.
func TestParseSignedAdmission_V2(t *testing.T) {
	for _, name := range []string{"admission-v2.cbor", "admission-lost-anchor-v2.cbor"} {
		raw, err := os.ReadFile(filepath.Join("testdata/format", name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseSignedAdmission(raw)
		if !errors.Is(err, ErrAdmissionV2) || !errors.Is(err, ErrBadAdmission) {
			t.Fatalf("%s: %v, want ErrAdmissionV2 and ErrBadAdmission", name, err)
		}
	}
	// Its body under the third format's prefix does not verify either:
	// the signature covers the v2 prefix and the v2 body.
	a := testAdmission()
	a.Expires = 0
	msg := append([]byte("kvfence/admission/v2\n"), appendAdmission(nil, &a)...)
	if bytes.HasPrefix(msg, []byte(admissionPrefix)) {
		t.Fatal("the admission prefix was not changed")
	}
}
