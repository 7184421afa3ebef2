package kvfence

import (
	"fmt"
	"slices"
	"testing"
)

// Attack: known records across a batch that deletes a known app record,
// puts it back, deletes it again and reads it, then, in a later
// transaction, reads and rewrites it: the fingerprint tables' removal
// (backward shift) and reinsertion must leave every later read passing,
// and the reopen's digest must agree.
func TestRedteamEffect_BatchDeletePutDelete(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		script := map[string]func(tx EffectTx) error{
			"act-s1": func(tx EffectTx) error { return tx.Delete(effBucket, []byte("k")) },
			"act-s2": func(tx EffectTx) error { return tx.Put(effBucket, []byte("k"), []byte("2")) },
			"act-s3": func(tx EffectTx) error { return tx.Delete(effBucket, []byte("k")) },
			"act-s4": func(tx EffectTx) error {
				v, err := tx.Get(effBucket, []byte("k"))
				if err != nil {
					return err
				}
				return tx.Put(effBucket, []byte("seen4"), fmt.Appendf(nil, "%q", v))
			},
			"act-s5": func(tx EffectTx) error { return tx.Put(effBucket, []byte("k"), []byte("5")) },
			"later": func(tx EffectTx) error {
				v, err := tx.Get(effBucket, []byte("k"))
				if err != nil {
					return err
				}
				if err := tx.Put(effBucket, []byte("seenlater"), v); err != nil {
					return err
				}
				for i := range 60 { // records enough to make the table grow (etcd takes about 100 writes a transaction)
					if err := tx.Put(effBucket, fmt.Appendf(nil, "fill%03d", i), []byte("x")); err != nil {
						return err
					}
				}
				return tx.Delete(effBucket, []byte("k"))
			},
			"first": func(tx EffectTx) error { return tx.Put(effBucket, []byte("k"), []byte("0")) },
		}
		apply := func(tx EffectTx, in EffectInput) error { return script[in.Action](tx) }
		setup := func() (*fixture, []*gcCall) {
			f := rtFixture(t, s, []string{effBucket}, apply)
			w := f.effWorker("w0", "first", `{}`)
			if res := f.submit(w.name, w.envelope); res.Outcome != Applied {
				t.Fatalf("first = %+v", res)
			}
			var calls []*gcCall
			for _, sc := range []string{"s1", "s2", "s3", "s4", "s5"} {
				tg := "t-" + sc
				if _, err := f.admin.CreateScope(f.ctx, sc); err != nil {
					t.Fatal(err)
				}
				if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: sc, Name: tg, Value: []byte("{}"), Kind: TargetFunc, Effect: "rt"}); err != nil {
					t.Fatal(err)
				}
				req := f.request(&Request{V: 1, Action: "act-" + sc, Target: tg, Set: ptr([]byte(`{}`))})
				g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: sc, Executor: "w", Claim: "c", Request: req})
				if err != nil {
					t.Fatal(err)
				}
				calls = append(calls, &gcCall{caller: "w", envelope: f.envelope(&Envelope{V: 1, Scope: sc, Epoch: g.Epoch, Grant: g.ID, Executor: "w", Claim: "c", Request: req})})
			}
			return f, calls
		}
		batched, bcalls := setup()
		if n := inOneBatch(t, batched, bcalls); n != 1 {
			t.Errorf("%d commits", n)
		}
		alone, acalls := setup()
		for _, c := range acalls {
			c.run(alone.ctx, alone.r)
		}
		for i := range bcalls {
			if got, want := outcome(bcalls[i]), outcome(acalls[i]); got != want || got != "applied/" {
				t.Errorf("call %d: batched %s (%v), alone %s (%v)", i, got, bcalls[i].err, want, acalls[i].err)
			}
		}
		for _, f := range []*fixture{batched, alone} {
			w := f.effWorker("wl", "later", `{}`)
			res, err := f.r.Submit(f.ctx, w.name, w.envelope)
			if err != nil || res.Outcome != Applied {
				t.Errorf("later = %+v, %v", res, err)
			}
			if got := appValue(t, f, "seen4"); got != `""` {
				t.Errorf("seen4 = %s", got)
			}
			if got := appValue(t, f, "seenlater"); got != "5" {
				t.Errorf("seenlater = %q", got)
			}
			f.reopen()
		}
		if got, want := appRecords(t, batched), appRecords(t, alone); !slices.Equal(got, want) {
			t.Errorf("app records differ")
		}
	})
}
