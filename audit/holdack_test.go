package audit

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

func testHoldAck() HoldAck {
	return HoldAck{Receiver: "recv-1", Scope: "payments", HoldID: "contain-1", PreviousEpoch: 3, Epoch: 4,
		AuditSeq: 17, RequestedAt: 1_700_000_000_000_000_000, At: 1_700_000_000_000_001_000,
		CheckpointSeq: 18, CheckpointHead: Hash{1, 2, 3}}
}

func TestHoldAckRoundTrip(t *testing.T) {
	sa, err := SignHoldAck(receiverKey, testHoldAck())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sa.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// The encoder is hand-written; a generic canonical encoder must agree.
	body := appendHoldAck(nil, &sa.HoldAck)
	w := holdAckWire{At: sa.At, Epoch: sa.Epoch, Scope: sa.Scope, HoldID: sa.HoldID, Receiver: sa.Receiver,
		AuditSeq: sa.AuditSeq, RequestedAt: sa.RequestedAt, CheckpointSeq: sa.CheckpointSeq,
		PreviousEpoch: sa.PreviousEpoch, CheckpointHead: sa.CheckpointHead[:]}
	em, _ := cbor.CoreDetEncOptions().EncMode()
	if want, _ := em.Marshal(w); !bytes.Equal(body, want) {
		t.Fatalf("hand encoding %x, canonical %x", body, want)
	}
	back, err := ParseSignedHoldAck(raw)
	if err != nil || back != sa {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	if err := back.Verify(receiverKey.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
}

func TestHoldAckVerifyRefuses(t *testing.T) {
	pub := receiverKey.Public().(ed25519.PublicKey)
	sa, _ := SignHoldAck(receiverKey, testHoldAck())
	for name, mutate := range map[string]func(*SignedHoldAck){
		"scope":          func(s *SignedHoldAck) { s.Scope = "other" },
		"epoch":          func(s *SignedHoldAck) { s.PreviousEpoch, s.Epoch = 9, 10 },
		"hold id":        func(s *SignedHoldAck) { s.HoldID = "contain-2" },
		"receiver":       func(s *SignedHoldAck) { s.Receiver = "recv-2" },
		"checkpoint":     func(s *SignedHoldAck) { s.CheckpointHead[0] ^= 1 },
		"signature":      func(s *SignedHoldAck) { s.Signature[0] ^= 1 },
		"committed time": func(s *SignedHoldAck) { s.At++ },
	} {
		t.Run(name, func(t *testing.T) {
			s := sa
			mutate(&s)
			if err := s.Verify(pub); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("got %v, want ErrBadSignature", err)
			}
		})
	}
	// A checkpoint signature over the same key must not pass for an
	// acknowledgment: the domain prefixes differ.
	cp, _ := Sign(receiverKey, testCheckpoint())
	forged := sa
	forged.Signature = cp.Signature
	if err := forged.Verify(pub); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("checkpoint signature taken for an acknowledgment: %v", err)
	}
}

func TestHoldAckChecks(t *testing.T) {
	for name, mutate := range map[string]func(*HoldAck){
		"not a hold":          func(a *HoldAck) { a.Epoch = a.PreviousEpoch + 2 },
		"uncovered":           func(a *HoldAck) { a.CheckpointSeq = a.AuditSeq - 1 },
		"no entry":            func(a *HoldAck) { a.AuditSeq, a.CheckpointSeq = 0, 0 },
		"empty scope":         func(a *HoldAck) { a.Scope = "" },
		"empty receiver":      func(a *HoldAck) { a.Receiver = "" },
		"long hold id":        func(a *HoldAck) { a.HoldID = string(bytes.Repeat([]byte{'a'}, MaxHoldIDLen+1)) },
		"epoch wraps to zero": func(a *HoldAck) { a.PreviousEpoch, a.Epoch = ^uint64(0), 0 },
	} {
		t.Run(name, func(t *testing.T) {
			a := testHoldAck()
			mutate(&a)
			if _, err := SignHoldAck(receiverKey, a); !errors.Is(err, ErrBadHoldAck) {
				t.Fatalf("signed a bad acknowledgment: %v", err)
			}
		})
	}
}

func TestHoldAckCoveredBy(t *testing.T) {
	a := testHoldAck()
	cp := Checkpoint{Root: testRoot, Receiver: a.Receiver, Seq: a.CheckpointSeq, Head: a.CheckpointHead, EpochHighWater: a.Epoch}
	if err := a.CoveredBy(cp); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Checkpoint){
		"receiver":   func(c *Checkpoint) { c.Receiver = "recv-2" },
		"seq":        func(c *Checkpoint) { c.Seq++ },
		"head":       func(c *Checkpoint) { c.Head[31] ^= 1 },
		"high water": func(c *Checkpoint) { c.EpochHighWater = a.Epoch - 1 },
	} {
		t.Run(name, func(t *testing.T) {
			c := cp
			mutate(&c)
			if err := a.CoveredBy(c); !errors.Is(err, ErrHoldAckMismatch) {
				t.Fatalf("got %v, want ErrHoldAckMismatch", err)
			}
		})
	}
}

func FuzzParseSignedHoldAck(f *testing.F) {
	sa, _ := SignHoldAck(receiverKey, testHoldAck())
	raw, _ := sa.Marshal()
	f.Add(raw)
	f.Add(raw[:len(raw)-1])
	f.Add(append(bytes.Clone(raw), 0))
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		sa, err := ParseSignedHoldAck(raw)
		if err != nil {
			if !errors.Is(err, ErrBadHoldAck) {
				t.Fatalf("error %v does not wrap ErrBadHoldAck", err)
			}
			return
		}
		if again, err := sa.Marshal(); err != nil || !bytes.Equal(again, raw) {
			t.Fatalf("accepted %x, re-encodes to %x, %v", raw, again, err)
		}
	})
}
