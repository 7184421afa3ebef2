package kvfence_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/etcdtest"
	"github.com/kvfence/kvfence/internal/fencecheck"
	"github.com/kvfence/kvfence/kvfence"
)

// etcdPrefixes numbers the prefixes of etcdOpener's receivers.
var etcdPrefixes atomic.Uint64

// etcdOpener opens fresh receivers of variant v for fencecheck.Run, each
// under a prefix of its own on the one-member cluster c (without fsync:
// the histories are about the fence's order, not etcd's durability).
func etcdOpener(c *etcdtest.Cluster, v defect.Variant) func(testing.TB) *kvfence.Receiver {
	return func(tb testing.TB) *kvfence.Receiver {
		tb.Helper()
		prefix := fmt.Sprintf("/fencecheck-%d/", etcdPrefixes.Add(1))
		anchor := &audit.MemAnchor{}
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		newEngine := func() *etcdengine.Engine {
			e, err := etcdengine.New(c.Client(tb), &etcdengine.Options{Prefix: prefix})
			if err != nil {
				tb.Fatal(err)
			}
			return e
		}
		if err := kvfence.InitEngine(newEngine(), &kvfence.InitOptions{ReceiverID: "fencecheck", Key: key, Anchor: anchor}); err != nil {
			tb.Fatal(err)
		}
		r, err := kvfence.OpenEngineDefective(newEngine(), &kvfence.Options{Key: key, Anchor: anchor}, v)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { r.Close() })
		return r
	}
}

// Ensure that the checker finds histories of the receiver on etcd
// linearizable, and calls the check-then-act receiver on etcd illegal:
// the fence holds on the optimistic engine for the same reason as on
// bbolt, the check inside the transaction that commits the write.
func TestLinearizable_Etcd(t *testing.T) {
	c := etcdtest.Start(t)
	t.Run("receiver", func(t *testing.T) {
		open := etcdOpener(c, defect.Variant{})
		for seed := uint64(1); seed <= 2; seed++ {
			h := fencecheck.Run(t, focused(open, seed))
			rep, err := h.Check(fencecheck.CheckOptions{Dir: linearizeDir(t), Name: "etcd"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("history %d: %s", seed, rep)
			if rep.Result != porcupine.Ok {
				t.Fatalf("history %d: %s", seed, rep)
			}
		}
	})
	t.Run("check-then-act", func(t *testing.T) {
		open := etcdOpener(c, defect.CheckThenAct)
		deadline := time.Now().Add(60 * time.Second)
		for seed := uint64(1); seed <= 20 && time.Now().Before(deadline); seed++ {
			h := fencecheck.Run(t, focused(open, seed))
			rep, err := h.Check(fencecheck.CheckOptions{Dir: linearizeDir(t), Name: "etcd-check-then-act"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("history %d: %s", seed, rep)
			if rep.Result == porcupine.Illegal {
				if lateWrites(h.Ops) == 0 {
					t.Fatalf("history %d is illegal without a write applied after its hold returned", seed)
				}
				return
			}
		}
		t.Fatal("the checker found no illegal history of the check-then-act receiver on etcd")
	})
}
