package api

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// holdFixture is a signed hold of two scopes: the checkpoint at seq 12
// covers both entries (10 and 11), each acknowledged under key.
type holdFixture struct {
	key, other ed25519.PrivateKey
	res        kvfence.HoldResult
}

func newHoldFixture(t testing.TB) holdFixture {
	t.Helper()
	f := holdFixture{key: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32)),
		other: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))}
	req := time.Date(2026, 12, 3, 17, 0, 0, 123456789, time.UTC)
	at := req.Add(1500 * time.Microsecond)
	cp := audit.Checkpoint{Receiver: "r1", Seq: 12, Root: audit.Hash{0x7e}, EpochHighWater: 9, At: at.Add(time.Millisecond).UnixNano()}
	cp.Head[0], cp.State[0] = 0xab, 0xcd
	sc, err := audit.Sign(f.key, cp)
	if err != nil {
		t.Fatal(err)
	}
	f.res = kvfence.HoldResult{HoldRequestedAt: req, HoldCommittedAt: at, AuditSeq: 11, Checkpoint: sc}
	for i, s := range []string{"s1", "s2"} {
		f.res.Scopes = append(f.res.Scopes, kvfence.HeldScope{Scope: s, PreviousEpoch: uint64(3 + i), Epoch: uint64(4 + i),
			Ack: f.ack(t, f.key, audit.HoldAck{Receiver: "r1", Scope: s, HoldID: "incident-7", PreviousEpoch: uint64(3 + i),
				Epoch: uint64(4 + i), AuditSeq: uint64(10 + i), RequestedAt: req.UnixNano(), At: at.UnixNano(),
				CheckpointSeq: 12, CheckpointHead: cp.Head})})
	}
	return f
}

func (f holdFixture) ack(t testing.TB, key ed25519.PrivateKey, a audit.HoldAck) audit.SignedHoldAck {
	t.Helper()
	sa, err := audit.SignHoldAck(key, a)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// Ensure that a hold with its signed checkpoint and acknowledgments
// crosses the wire unchanged, repeated or not, and that a hold without
// them (a recovery's scopes) still does.
func TestHold_RoundTrip(t *testing.T) {
	f := newHoldFixture(t)
	repeated := f.res
	repeated.Repeated = true
	bare := kvfence.HoldResult{HoldRequestedAt: f.res.HoldRequestedAt, HoldCommittedAt: f.res.HoldCommittedAt, AuditSeq: 4,
		Scopes: []kvfence.HeldScope{{Scope: "s", PreviousEpoch: 1, Epoch: 2}}}
	for _, res := range []kvfence.HoldResult{f.res, repeated, bare} {
		raw, err := json.Marshal(HoldOf(res))
		if err != nil {
			t.Fatal(err)
		}
		var back Hold
		if err := DecodeAnswer(raw, &back); err != nil {
			t.Fatal(err)
		}
		got, err := back.Result()
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if !reflect.DeepEqual(got, res) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, res)
		}
	}
	raw, _ := json.Marshal(HoldOf(bare))
	if !bytes.Contains(raw, []byte(`"checkpoint":null`)) || bytes.Contains(raw, []byte(`"ack"`)) {
		t.Fatalf("a hold without evidence: %s; want checkpoint null and no ack", raw)
	}
}

// mutateHold encodes res, applies mut to the JSON as a generic value and
// decodes it back as an answer.
func mutateHold(t *testing.T, res kvfence.HoldResult, mut func(m map[string]any)) (kvfence.HoldResult, error) {
	t.Helper()
	raw, err := json.Marshal(HoldOf(res))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	mut(m)
	if raw, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	var h Hold
	if err := DecodeAnswer(raw, &h); err != nil {
		return kvfence.HoldResult{}, err
	}
	return h.Result()
}

func checkpointOf(m map[string]any) map[string]any { return m["checkpoint"].(map[string]any) }
func ackOf(m map[string]any, i int) map[string]any {
	return m["scopes"].([]any)[i].(map[string]any)["ack"].(map[string]any)
}

// Ensure that Result refuses an answer whose JSON disagrees with its
// signed bytes, whose acknowledgment is not of its scope's hold or names
// another checkpoint, whose checkpoint does not cover the hold, and
// base64 that is not.
func TestHold_Refusals(t *testing.T) {
	f := newHoldFixture(t)
	resign := func(i int, edit func(a *audit.HoldAck), key ed25519.PrivateKey) kvfence.HoldResult {
		res := f.res
		res.Scopes = append([]kvfence.HeldScope(nil), f.res.Scopes...)
		a := res.Scopes[i].Ack.HoldAck
		edit(&a)
		res.Scopes[i].Ack = f.ack(t, key, a)
		return res
	}
	otherHead := f.res.Checkpoint.Head
	otherHead[1] = 1
	laterCheckpoint := f.res
	laterCheckpoint.AuditSeq = 13
	// says is what an error must say where another check would refuse the
	// answer too, but say less.
	says := map[string]string{"ack without a checkpoint": "without the checkpoint"}
	for _, c := range []struct {
		name string
		res  kvfence.HoldResult
		mut  func(m map[string]any)
		want error
	}{
		{"checkpoint head", f.res, func(m map[string]any) { checkpointOf(m)["head"] = strings.Repeat("00", 32) }, ErrHoldMismatch},
		{"checkpoint root", f.res, func(m map[string]any) { checkpointOf(m)["root"] = strings.Repeat("00", 32) }, ErrHoldMismatch},
		{"checkpoint head in upper case", f.res, func(m map[string]any) {
			checkpointOf(m)["head"] = strings.ToUpper(checkpointOf(m)["head"].(string))
		}, ErrHoldMismatch},
		{"checkpoint state", f.res, func(m map[string]any) { checkpointOf(m)["state"] = strings.Repeat("11", 32) }, ErrHoldMismatch},
		{"checkpoint seq", f.res, func(m map[string]any) { checkpointOf(m)["seq"] = 13 }, ErrHoldMismatch},
		{"checkpoint receiver", f.res, func(m map[string]any) { checkpointOf(m)["receiver"] = "r2" }, ErrHoldMismatch},
		{"checkpoint high-water", f.res, func(m map[string]any) { checkpointOf(m)["epoch_high_water"] = 99 }, ErrHoldMismatch},
		{"checkpoint at", f.res, func(m map[string]any) { checkpointOf(m)["at"] = "2026-12-03T17:00:00Z" }, ErrHoldMismatch},
		{"checkpoint at missing", f.res, func(m map[string]any) { checkpointOf(m)["at"] = nil }, ErrHoldMismatch},
		{"checkpoint key", f.res, func(m map[string]any) {
			checkpointOf(m)["key_fingerprint"] = audit.KeyFingerprint(f.other.Public().(ed25519.PublicKey)).String()
		}, ErrHoldMismatch},
		{"checkpoint signature", f.res, func(m map[string]any) { checkpointOf(m)["signature_b64"] = "AAAA" }, ErrHoldMismatch},
		{"checkpoint signed bytes bad base64", f.res, func(m map[string]any) { checkpointOf(m)["signed_b64"] = "!!!" }, ErrJSON},
		{"checkpoint signed bytes not a checkpoint", f.res, func(m map[string]any) { checkpointOf(m)["signed_b64"] = "oA==" },
			audit.ErrBadCheckpoint},
		{"checkpoint signed bytes are an ack", f.res, func(m map[string]any) {
			checkpointOf(m)["signed_b64"] = ackOf(m, 0)["signed_b64"]
		}, audit.ErrBadCheckpoint},
		{"ack hold id", f.res, func(m map[string]any) { ackOf(m, 0)["hold_id"] = "incident-8" }, ErrHoldMismatch},
		{"ack previous epoch", f.res, func(m map[string]any) { ackOf(m, 0)["previous_epoch"] = 2 }, ErrHoldMismatch},
		{"ack epoch", f.res, func(m map[string]any) { ackOf(m, 1)["epoch"] = 6 }, ErrHoldMismatch},
		{"ack audit seq", f.res, func(m map[string]any) { ackOf(m, 0)["audit_seq"] = 11 }, ErrHoldMismatch},
		{"ack requested at", f.res, func(m map[string]any) { ackOf(m, 0)["requested_at"] = "2026-12-03T17:00:00Z" }, ErrHoldMismatch},
		{"ack committed at", f.res, func(m map[string]any) { ackOf(m, 0)["committed_at"] = nil }, ErrHoldMismatch},
		{"ack checkpoint seq", f.res, func(m map[string]any) { ackOf(m, 0)["checkpoint_seq"] = 13 }, ErrHoldMismatch},
		{"ack signed bytes bad base64", f.res, func(m map[string]any) { ackOf(m, 0)["signed_b64"] = "a" }, ErrJSON},
		{"ack signed bytes are a checkpoint", f.res, func(m map[string]any) {
			ackOf(m, 0)["signed_b64"] = checkpointOf(m)["signed_b64"]
		}, audit.ErrBadHoldAck},
		{"ack of another scope's hold", f.res, func(m map[string]any) {
			ackOf(m, 0)["signed_b64"], ackOf(m, 0)["epoch"] = ackOf(m, 1)["signed_b64"], ackOf(m, 1)["epoch"]
			ackOf(m, 0)["previous_epoch"], ackOf(m, 0)["audit_seq"] = ackOf(m, 1)["previous_epoch"], ackOf(m, 1)["audit_seq"]
		}, ErrHoldMismatch},
		{"scope's epochs not the ack's", f.res, func(m map[string]any) {
			s := m["scopes"].([]any)[0].(map[string]any)
			s["previous_epoch"], s["epoch"] = 7, 8
		}, ErrHoldMismatch},
		{"scope renamed", f.res, func(m map[string]any) { m["scopes"].([]any)[0].(map[string]any)["scope"] = "s3" }, ErrHoldMismatch},
		{"hold times not the ack's", f.res, func(m map[string]any) { m["hold_committed_at"] = "2026-12-03T17:00:01Z" }, ErrHoldMismatch},
		{"ack without a checkpoint", f.res, func(m map[string]any) { m["checkpoint"] = nil }, ErrHoldMismatch},
		{"checkpoint before the hold's entry", laterCheckpoint, func(map[string]any) {}, ErrHoldMismatch},
		{"ack names another checkpoint", resign(0, func(a *audit.HoldAck) { a.CheckpointHead = otherHead }, f.key),
			func(map[string]any) {}, audit.ErrHoldAckMismatch},
		{"ack from another receiver", resign(0, func(a *audit.HoldAck) { a.Receiver = "r2" }, f.key),
			func(map[string]any) {}, audit.ErrHoldAckMismatch},
		{"ack signed by another key", resign(1, func(*audit.HoldAck) {}, f.other), func(map[string]any) {}, ErrHoldMismatch},
		{"ack of an entry after the hold's", resign(1, func(a *audit.HoldAck) { a.AuditSeq = 12 }, f.key),
			func(m map[string]any) { ackOf(m, 1)["audit_seq"] = 12 }, ErrHoldMismatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := mutateHold(t, c.res, c.mut)
			if !errors.Is(err, c.want) || !strings.Contains(fmt.Sprint(err), says[c.name]) {
				t.Fatalf("got %v, want %v saying %q", err, c.want, says[c.name])
			}
		})
	}
}

// Ensure that the hold request and answer are read strictly: a new
// member in another case, given twice, or unknown in a request is
// refused.
func TestHold_StrictDecoding(t *testing.T) {
	for _, b := range []string{
		`{"scopes":["s"],"reason":"r","hold_id":"a","hold_id":"b"}`,
		`{"scopes":["s"],"reason":"r","Hold_ID":"a"}`,
		`{"scopes":["s"],"reason":"r","holdid":"a"}`,
		`{"scopes":["s"],"reason":"r","expect_epoch":-1}`,
		`{"scopes":["s"],"reason":"r","expect_epoch":"3"}`,
	} {
		var req HoldRequest
		if err := DecodeStrict([]byte(b), &req); !errors.Is(err, ErrJSON) {
			t.Errorf("DecodeStrict(%s) = %v, want ErrJSON", b, err)
		}
	}
	var req HoldRequest
	if err := DecodeStrict([]byte(`{"scopes":["s"],"reason":"r","hold_id":"a","expect_epoch":3}`), &req); err != nil ||
		req.HoldID != "a" || req.ExpectEpoch != 3 {
		t.Fatalf("DecodeStrict = %+v, %v", req, err)
	}
	for _, b := range []string{
		`{"scopes":[],"repeated":true,"Repeated":false}`,
		`{"scopes":[],"repeated":true,"repeated":false}`,
		`{"scopes":[],"checkpoint":{"seq":1,"Seq":2}}`,
		`{"scopes":[{"scope":"s","ack":{"epoch":1,"epoch":2}}]}`,
	} {
		var h Hold
		if err := DecodeAnswer([]byte(b), &h); !errors.Is(err, ErrJSON) {
			t.Errorf("DecodeAnswer(%s) = %v, want ErrJSON", b, err)
		}
	}
}

// Ensure that the receipts answer is read strictly too.
func TestReceipts_StrictDecoding(t *testing.T) {
	var rs Receipts
	if err := DecodeAnswer([]byte(`{"receipts":[{"scope":"a","Scope":"b"}]}`), &rs); !errors.Is(err, ErrJSON) {
		t.Fatalf("DecodeAnswer = %v, want ErrJSON", err)
	}
	if err := DecodeAnswer([]byte(`{"receipts":null,"receipts":[]}`), &rs); !errors.Is(err, ErrJSON) {
		t.Fatalf("DecodeAnswer = %v, want ErrJSON", err)
	}
}

// Ensure that whatever hold answer Result accepts, it reads back the same
// from the answer HoldOf writes for it: nothing the JSON says beside the
// signed bytes survives into the result.
func FuzzHoldAnswer(f *testing.F) {
	fx := newHoldFixture(f)
	good, _ := json.Marshal(HoldOf(fx.res))
	f.Add(good)
	f.Add([]byte(`{"scopes":[{"scope":"s","previous_epoch":1,"epoch":2,"mode":"held"}],"checkpoint":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Hold
		if err := DecodeAnswer(b, &h); err != nil {
			return
		}
		res, err := h.Result()
		if err != nil {
			return
		}
		raw, err := json.Marshal(HoldOf(res))
		if err != nil {
			t.Fatal(err)
		}
		var back Hold
		if err := DecodeAnswer(raw, &back); err != nil {
			t.Fatalf("HoldOf wrote %s, which does not decode: %v", raw, err)
		}
		again, err := back.Result()
		if err != nil {
			t.Fatalf("HoldOf wrote %s, which Result refuses: %v", raw, err)
		}
		if !reflect.DeepEqual(again, res) {
			t.Fatalf("%s reads back as %+v, not %+v", raw, again, res)
		}
	})
}

// Ensure that a hold request that DecodeStrict accepts encodes back to a
// request that decodes the same.
func FuzzHoldRequest(f *testing.F) {
	f.Add([]byte(`{"scopes":["s"],"reason":"r","hold_id":"incident-7","expect_epoch":3}`))
	f.Add([]byte(`{"reason":"r","all":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req HoldRequest
		if err := DecodeStrict(b, &req); err != nil {
			return
		}
		raw, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var back HoldRequest
		if err := DecodeStrict(raw, &back); err != nil {
			t.Fatalf("%s does not decode: %v", raw, err)
		}
		if !reflect.DeepEqual(back, req) {
			t.Fatalf("%s reads back as %+v, not %+v", raw, back, req)
		}
	})
}

// Ensure that a receipts answer that decodes converts, and that what it
// converts to encodes back the same.
func FuzzReceiptsAnswer(f *testing.F) {
	f.Add([]byte(`{"receipts":[{"scope":"s","action":"a","grant":"g","request_sha256":"` + strings.Repeat("ab", 32) +
		`","target":"t","rev_before":1,"rev_after":2,"audit_seq":7,"at":"2026-12-03T17:00:00.5Z"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var rs Receipts
		if err := DecodeAnswer(b, &rs); err != nil {
			return
		}
		for _, r := range rs.Receipts {
			rc, err := r.ToReceipt()
			if err != nil {
				continue
			}
			back, err := ReceiptOf(rc).ToReceipt()
			if err != nil || !reflect.DeepEqual(back, rc) {
				t.Fatalf("%+v reads back as %+v, %v", rc, back, err)
			}
		}
	})
}
