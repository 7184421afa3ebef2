package kvfence

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// rtScanner is an effect that scans effBucket, records under
// "entry/ACTION" the keys it saw, and deletes the entry of the call
// before it in the plan (act-s1 for act-s2, and so on), so that each call
// reads through the earlier calls' writes and deletions by a scan.
func rtScanner(tx EffectTx, in EffectInput) error {
	var seen []string
	if err := tx.Scan(effBucket, nil, func(k, v []byte) error {
		seen = append(seen, string(k)+"="+string(v))
		return nil
	}); err != nil {
		return err
	}
	if err := tx.Put(effBucket, []byte("entry/"+in.Action), []byte(strings.Join(seen, ","))); err != nil {
		return err
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(in.Action, "act-s"))
	if n%2 == 0 {
		return tx.Delete(effBucket, []byte("entry/act-s"+strconv.Itoa(n-1)))
	}
	return nil
}

// Attack: group commit on each engine where later calls of the batch read
// the earlier calls' app writes and deletions by Scan (not Get): a
// transaction's scan on an engine that buffers writes (etcd) must see
// them as a store committed call by call would.
func TestRedteamEffect_BatchScanSeesEarlierCalls(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		scopes := []string{"s1", "s2", "s3", "s4", "s5"}
		setup := func() (*fixture, []*gcCall) {
			f := rtFixture(t, s, []string{effBucket}, rtScanner)
			var calls []*gcCall
			for _, sc := range scopes {
				tg := "t-" + sc
				if _, err := f.admin.CreateScope(f.ctx, sc); err != nil {
					t.Fatal(err)
				}
				if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: sc, Name: tg, Value: []byte("{}"), Kind: TargetFunc, Effect: "rt"}); err != nil {
					t.Fatal(err)
				}
				req := f.request(&Request{V: 1, Action: "act-" + sc, Target: tg, Set: ptr([]byte(`{"v":1}`))})
				g, err := f.admin.Activate(f.ctx, ActivateRequest{Scope: sc, Executor: "w", Claim: "c", Request: req})
				if err != nil {
					t.Fatal(err)
				}
				env := f.envelope(&Envelope{V: 1, Scope: sc, Epoch: g.Epoch, Grant: g.ID, Executor: "w", Claim: "c", Request: req})
				calls = append(calls, &gcCall{caller: "w", envelope: env})
			}
			return f, calls
		}
		batched, bcalls := setup()
		if n := inOneBatch(t, batched, bcalls); n != 1 {
			t.Logf("%d commits", n)
		}
		alone, acalls := setup()
		for _, c := range acalls {
			c.run(alone.ctx, alone.r)
		}
		for i := range bcalls {
			if got, want := outcome(bcalls[i]), outcome(acalls[i]); got != want {
				t.Errorf("call %d: batched %s (%v), alone %s (%v)", i, got, bcalls[i].err, want, acalls[i].err)
			}
		}
		if got, want := appRecords(t, batched), appRecords(t, alone); !slices.Equal(got, want) {
			t.Errorf("app records batched\n%q\nalone\n%q", got, want)
		}
		batched.reopen()
	})
}
