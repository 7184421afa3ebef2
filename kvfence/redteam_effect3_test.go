package kvfence

import (
	"crypto/ed25519"
	"errors"
	"testing"
)

// Attack: records edited or added in the store under the running
// receiver, which an effect then overwrites or deletes without reading
// (a blind write), or reads and ignores the error of. Each must be a
// fault with nothing written: a blind write would otherwise take the
// edited bytes' term out of the state digest, or keep a decision made on
// bytes the receiver never wrote.
func TestRedteamEffect_BlindWriteOverEdit(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		for _, tc := range []struct {
			name string
			// edit is the record put under the receiver (nil value: deleted).
			key   string
			value []byte
			op    func(tx EffectTx) error
		}{
			{"put over edited", "count", []byte("100"), func(tx EffectTx) error { return tx.Put(effBucket, []byte("count"), []byte("7")) }},
			{"delete edited", "count", []byte("100"), func(tx EffectTx) error { return tx.Delete(effBucket, []byte("count")) }},
			{"put over added", "added", []byte("x"), func(tx EffectTx) error { return tx.Put(effBucket, []byte("added"), []byte("7")) }},
			{"delete added", "added", []byte("x"), func(tx EffectTx) error { return tx.Delete(effBucket, []byte("added")) }},
			{"put over deleted", "count", nil, func(tx EffectTx) error { return tx.Put(effBucket, []byte("count"), []byte("7")) }},
			{"get edited, error ignored", "count", []byte("100"), func(tx EffectTx) error {
				tx.Get(effBucket, []byte("count"))
				return tx.Put(effBucket, []byte("other"), []byte("7"))
			}},
			{"scan edited, error ignored", "count", []byte("100"), func(tx EffectTx) error {
				tx.Scan(effBucket, nil, func(k, v []byte) error { return nil })
				return tx.Put(effBucket, []byte("other"), []byte("7"))
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var second bool
				f := rtFixture(t, s, []string{effBucket}, func(tx EffectTx, in EffectInput) error {
					if !second {
						return tx.Put(effBucket, []byte("count"), []byte("1"))
					}
					return tc.op(tx)
				})
				a := f.effWorker("worker-a", "a1", `{"v":1}`)
				if res := f.submit(a.name, a.envelope); res.Outcome != Applied {
					t.Fatalf("submit = %+v", res)
				}
				storePut(t, f, bucketApp, string(appKey(effBucket, []byte(tc.key))), tc.value)
				second = true
				b := f.effWorker("worker-b", "b1", `{"v":2}`)
				head := f.r.Head()
				res, err := f.r.Submit(f.ctx, b.name, b.envelope)
				if !errors.Is(err, ErrStateMismatch) {
					t.Errorf("Submit = %+v, %v; want ErrStateMismatch", res, err)
				}
				if f.r.Head() != head {
					t.Errorf("something was written")
				}
				// Put the store back as the receiver knows it.
				switch {
				case tc.key == "count":
					storePut(t, f, bucketApp, string(appKey(effBucket, []byte("count"))), []byte("1"))
				default:
					storePut(t, f, bucketApp, string(appKey(effBucket, []byte(tc.key))), nil)
				}
			})
		}
	})
}

// Attack: an app record edited in a stopped receiver's store, which
// verify-chain must refuse (§4.1: "is ErrStateMismatch at open and in
// verify-chain").
func TestRedteamEffect_VerifyChainCatchesAppEdit(t *testing.T) {
	f := rtFixture(t, engines[0].new(t), []string{effBucket}, rtCounter)
	a := f.effWorker("worker-a", "a1", `{"v":1}`)
	if res := f.submit(a.name, a.envelope); res.Outcome != Applied {
		t.Fatalf("submit = %+v", res)
	}
	f.r.Close()
	key := string(appKey(effBucket, []byte("count")))
	storePutClosed(t, f, bucketApp, key, []byte("100"))
	rep, err := f.store.verify(t, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err == nil && rep.OK() {
		t.Errorf("verify-chain passed a store whose app record was edited: %+v", rep)
	}
	storePutClosed(t, f, bucketApp, key, []byte("1"))
	f.reopen()
}
