package audit

import (
	"errors"
	"strings"
	"testing"
)

func testAdmission() Admission {
	return Admission{Receiver: testReceiver, SupersededAnchor: Head{8, Hash{8}}, AdmittedHead: Head{7, Hash{7}},
		At: t0 + 3600e9, Reason: "restored from backup after disk loss; ticket OPS-1234"}
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
	sc, _ := Sign(recoveryKey, Checkpoint{Receiver: testReceiver, Seq: 1})
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
	}{
		{"match", testReceiver, Head{8, Hash{8}}, Head{7, Hash{7}}, nil},
		{"other receiver", "receiver-2", Head{8, Hash{8}}, Head{7, Hash{7}}, ErrAdmissionMismatch},
		{"other anchor seq", testReceiver, Head{9, Hash{8}}, Head{7, Hash{7}}, ErrAdmissionMismatch},
		{"other anchor head", testReceiver, Head{8, Hash{9}}, Head{7, Hash{7}}, ErrAdmissionMismatch},
		{"other head seq", testReceiver, Head{8, Hash{8}}, Head{6, Hash{7}}, ErrAdmissionMismatch},
		{"other head hash", testReceiver, Head{8, Hash{8}}, Head{7, Hash{6}}, ErrAdmissionMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := a.Check(tc.receiver, tc.anchor, tc.head)
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := testAdmission()
			tc.edit(&a)
			if _, err := SignAdmission(recoveryKey, a); !errors.Is(err, ErrBadAdmission) {
				t.Fatalf("SignAdmission: %v, want ErrBadAdmission", err)
			}
		})
	}
	a := testAdmission()
	a.Receiver, a.Reason = strings.Repeat("r", MaxReceiverLen), strings.Repeat("x", MaxReasonLen)
	sa, err := SignAdmission(recoveryKey, a)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := sa.Marshal(); err != nil || len(raw) > MaxAdmissionSize {
		t.Fatalf("largest admission encodes to %d bytes: %v", len(raw), err)
	}
}

// Ensure that every single-byte change of an encoded signed admission is
// refused by the decoder or by the signature check.
func TestSignedAdmission_Mangling(t *testing.T) {
	a := testAdmission()
	a.Reason = "disk loss"
	sa, _ := SignAdmission(recoveryKey, a)
	raw, err := sa.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseSignedAdmission(raw); err != nil || got != sa {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	mangle(raw, func(i int, m []byte) {
		got, err := ParseSignedAdmission(m)
		if err == nil {
			err = got.Verify(pubOf(recoveryKey))
		}
		if err == nil {
			t.Fatalf("byte %d = %#x: accepted", i, m[i])
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
			t.Errorf("%s: %v, want ErrBadAdmission", name, err)
		}
	}
}
