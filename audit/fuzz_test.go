package audit

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// Each decoder must refuse with its sentinel or return a value whose
// encoding is exactly the input: one value, one spelling.

func FuzzDecodeEntry(f *testing.F) {
	recs, _ := testChain(f, 8)
	for _, r := range recs {
		f.Add(r.v)
	}
	// An archive entry, so that the base fields are explored too.
	if all, _, _, _ := storedAfterArchive(f, 4, 2); len(all) == 5 {
		f.Add(all[4].v)
	}
	for _, h := range []string{"", "a0", "80", "f6",
		"a4626174006373657101646b696e6464696e69746470726576" + "5820" + "0000000000000000000000000000000000000000000000000000000000000000",
		"bf626174006373657101646b696e6464696e6974ff"} {
		b, _ := hex.DecodeString(h)
		f.Add(b)
	}
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := DecodeEntry(raw)
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("error %v does not wrap ErrBadEntry", err)
			}
			return
		}
		again, err := EncodeEntry(&e)
		if err != nil || !bytes.Equal(again, raw) || entrySize(&e) != len(raw) {
			t.Fatalf("accepted %x, re-encodes to %x (size %d), %v", raw, again, entrySize(&e), err)
		}
		// An independent core deterministic encoder agrees.
		if indep, err := em.Marshal(&e); err != nil || !bytes.Equal(indep, raw) {
			t.Fatalf("accepted %x, core deterministic encoding is %x, %v", raw, indep, err)
		}
	})
}

func FuzzParseSignedCheckpoint(f *testing.F) {
	sc, _ := Sign(receiverKey, testCheckpoint())
	raw, _ := sc.Marshal()
	f.Add(raw)
	f.Add(raw[:len(raw)-1])
	f.Add(append(bytes.Clone(raw), 0))
	f.Add([]byte{0xa0})
	sr, _ := Sign(receiverKey, testCheckpointAdmission())
	rawRec, _ := sr.Marshal()
	f.Add(rawRec)
	// A zero root, spelled as the encoder would spell it with any other.
	f.Add(bytes.Replace(raw, append([]byte("\x64root\x58\x20"), sc.Root[:]...), append([]byte("\x64root\x58\x20"), make([]byte, 32)...), 1))
	f.Fuzz(func(t *testing.T, raw []byte) {
		sc, err := ParseSignedCheckpoint(raw)
		if err != nil {
			if !errors.Is(err, ErrBadCheckpoint) {
				t.Fatalf("error %v does not wrap ErrBadCheckpoint", err)
			}
			return
		}
		if again, err := sc.Marshal(); err != nil || !bytes.Equal(again, raw) {
			t.Fatalf("accepted %x, re-encodes to %x, %v", raw, again, err)
		}
		// Every signed checkpoint has an anchor spelling and back.
		text, err := sc.MarshalAnchor()
		if err != nil {
			t.Fatal(err)
		}
		if back, err := ParseAnchor(text); err != nil || back != sc {
			t.Fatalf("anchor round trip of %x: %v", raw, err)
		}
	})
}

func FuzzParseAnchor(f *testing.F) {
	sc, _ := Sign(receiverKey, testCheckpoint())
	text, _ := sc.MarshalAnchor()
	f.Add(text)
	f.Add(bytes.Replace(text, []byte("seq 42"), []byte("seq 042"), 1))
	f.Add(bytes.Replace(text, []byte("Z\n"), []byte("+00:00\n"), 1))
	f.Add([]byte(anchorMagic + "\n"))
	f.Add([]byte{})
	sr, _ := Sign(receiverKey, testCheckpointAdmission())
	textRec, _ := sr.MarshalAnchor()
	f.Add(textRec)
	f.Add(bytes.Replace(textRec, []byte("\nadmission_at "), []byte("\nadmission_at  "), 1))
	// The root line: zero, missing, and the v2 anchor that had none.
	root := []byte("root " + hex.EncodeToString(sc.Root[:]) + "\n")
	f.Add(bytes.Replace(text, root, []byte("root "+strings.Repeat("0", 64)+"\n"), 1))
	noRoot := bytes.Replace(text, root, nil, 1)
	f.Add(noRoot)
	f.Add(bytes.Replace(noRoot, []byte(anchorMagic), []byte(anchorMagicV2), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseAnchor(data)
		if err != nil {
			if !errors.Is(err, ErrBadAnchor) {
				t.Fatalf("error %v does not wrap ErrBadAnchor", err)
			}
			return
		}
		if again, err := sc.MarshalAnchor(); err != nil || !bytes.Equal(again, data) {
			t.Fatalf("accepted %q, re-encodes to %q, %v", data, again, err)
		}
		raw, err := sc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if back, err := ParseSignedCheckpoint(raw); err != nil || back != sc {
			t.Fatalf("CBOR round trip of %q: %v", data, err)
		}
	})
}

func FuzzParseSignedAdmission(f *testing.F) {
	sa, _ := SignAdmission(recoveryKey, testAdmission())
	raw, _ := sa.Marshal()
	f.Add(raw)
	f.Add(raw[:len(raw)-1])
	f.Add(append(bytes.Clone(raw), 0))
	f.Add([]byte{0xa0})
	// With witnessed checkpoints.
	wa, _ := SignAdmission(recoveryKey, witnessedAdmission())
	wraw, _ := wa.Marshal()
	f.Add(wraw)
	// The second format, without an expiry: refused, and a nearby seed.
	if v2, err := os.ReadFile("testdata/format/admission-v2.cbor"); err == nil {
		f.Add(v2)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		sa, err := ParseSignedAdmission(raw)
		if err != nil {
			if !errors.Is(err, ErrBadAdmission) {
				t.Fatalf("error %v does not wrap ErrBadAdmission", err)
			}
			return
		}
		if again, err := sa.Marshal(); err != nil || !bytes.Equal(again, raw) {
			t.Fatalf("accepted %x, re-encodes to %x, %v", raw, again, err)
		}
	})
}

// FuzzParseLostAnchorAdmission starts from lost-anchor admissions and the
// spellings that sit next to them, and checks that whatever is accepted
// is one kind or the other, never a mix: a lost-anchor admission names no
// anchor and passes only CheckLostAnchor, an ordinary one has no epoch
// floor and passes only Check.
func FuzzParseLostAnchorAdmission(f *testing.F) {
	sa, _ := SignAdmission(recoveryKey, testLostAnchorAdmission())
	raw, _ := sa.Marshal()
	f.Add(raw)
	f.Add(appendSigned(nil, keyAdmission, sa.Key, &sa.Signature, appendAdmission(nil, &Admission{Receiver: "r",
		LostAnchor: true, AdmittedHead: Head{Seq: 1}, Expires: 1, Reason: "r"})))
	f.Fuzz(func(t *testing.T, raw []byte) {
		sa, err := ParseSignedAdmission(raw)
		if err != nil {
			if !errors.Is(err, ErrBadAdmission) {
				t.Fatalf("error %v does not wrap ErrBadAdmission", err)
			}
			return
		}
		if again, err := sa.Marshal(); err != nil || !bytes.Equal(again, raw) {
			t.Fatalf("accepted %x, re-encodes to %x, %v", raw, again, err)
		}
		a := sa.Admission
		if a.LostAnchor {
			if a.SupersededAnchor != (Head{}) || a.CheckLostAnchor(a.Receiver, a.AdmittedHead, a.AdmittedState) != nil ||
				a.Check(a.Receiver, a.SupersededAnchor, a.AdmittedHead, a.AdmittedState) == nil {
				t.Fatalf("accepted a lost-anchor admission that is not only that: %+v", a)
			}
		} else if a.EpochFloor != 0 || a.Check(a.Receiver, a.SupersededAnchor, a.AdmittedHead, a.AdmittedState) != nil ||
			a.CheckLostAnchor(a.Receiver, a.AdmittedHead, a.AdmittedState) == nil {
			t.Fatalf("accepted an ordinary admission that is not only that: %+v", a)
		}
	})
}
