package kvfence_test

import (
	"bytes"
	"crypto/ed25519"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/etcdtest"
	"github.com/kvfence/kvfence/internal/fencecheck"
	"github.com/kvfence/kvfence/kvfence"
)

// leaderStopAfter is how many audit entries past its setup a history's
// receiver writes before the leader is stopped: about a quarter of a
// focused history's.
const leaderStopAfter = 50

// clusterKey signs the checkpoints of the cluster history's receiver.
var clusterKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{13}, ed25519.SeedSize))

// Ensure that histories recorded on a 3-member etcd cluster (members that
// sync to disk) whose leader is hard-stopped mid-history are linearizable,
// with the calls whose outcome the stop left unknown modelled as such; and
// that the checker calls the same history illegal once one of its applied
// submits is recorded as applied a second time.
//
// The held commit's fate depends on timing: etcd may refuse it outright
// (leader changed, server stopped) before it is proposed, and then the
// engine retries it and the stop leaves nothing unknown. Such a history is
// checked all the same, and another is recorded on a fresh cluster, up to
// three in all; histories with unknown outcomes are always produced by
// TestRun_UnknownOutcomesLinearizable and TestClusterHoldRace.
func TestLinearizable_EtcdClusterLeaderStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("long: runs in the full test command (go test without -short)")
	}
	// It waits on elections and its members' fsyncs, beside the other
	// parallel tests; its clusters and receivers are its own.
	t.Parallel()
	for attempt := 1; attempt <= 3; attempt++ {
		if leaderStoppedHistory(t) > 0 {
			return
		}
		t.Logf("history %d: the stop left no call of unknown outcome", attempt)
	}
}

// leaderStoppedHistory records and checks one history of
// TestLinearizable_EtcdClusterLeaderStopped and returns how many of its
// calls had an unknown outcome.
func leaderStoppedHistory(t *testing.T) int {
	c := etcdtest.NewCluster(t, etcdtest.Config{Members: 3, Gates: true, Fsync: true})
	t.Logf("3 members (fsync) ready in %v", c.Ready.Round(time.Millisecond))
	gate := &etcdtest.TxnGate{}
	var opened atomic.Pointer[kvfence.Receiver]
	open := func(tb testing.TB) *kvfence.Receiver {
		tb.Helper()
		anchor := &audit.MemAnchor{}
		const prefix = "/fencecheck-cluster/"
		newEngine := func() *etcdengine.Engine {
			e, err := etcdengine.New(c.GatedClient(tb, gate), &etcdengine.Options{Prefix: prefix})
			if err != nil {
				tb.Fatal(err)
			}
			return e
		}
		if err := kvfence.InitEngine(newEngine(), &kvfence.InitOptions{ReceiverID: "fencecheck", Key: clusterKey, Anchor: anchor}); err != nil {
			tb.Fatal(err)
		}
		r, err := kvfence.OpenEngine(newEngine(), &kvfence.Options{Key: clusterKey, Anchor: anchor})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { r.Close() })
		opened.Store(r)
		return r
	}
	// The stopper waits for the history to be under way and holds the next
	// commit on its way. It cuts the leader off from its peers and lets the
	// commit go before the others can elect a new leader, so that the
	// commit reaches a leader that cannot replicate it (or a follower that
	// forwards it there), then hard-stops that leader: the commit's outcome
	// is unknown to the receiver.
	type stop struct {
		leader int
		at     time.Duration
		held   error
		err    string
	}
	stopped := make(chan stop, 1)
	quit := make(chan struct{})
	start := time.Now()
	go func() {
		var base uint64
		var r *kvfence.Receiver
		for r == nil || base == 0 {
			select {
			case <-quit:
				stopped <- stop{err: "the history ended before it began"}
				return
			case <-time.After(time.Millisecond):
			}
			if r = opened.Load(); r != nil {
				base = r.Head().Seq
			}
		}
		for r.Head().Seq < base+leaderStopAfter {
			select {
			case <-quit:
				stopped <- stop{err: "the history ended before the leader was stopped"}
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
		var held <-chan struct{} = gate.Arm(nil)
		select {
		case <-held:
		case <-quit:
			stopped <- stop{err: "the history ended before a commit could be held"}
			return
		}
		leader := leaderOf(c)
		if leader < 0 {
			gate.Release()
			stopped <- stop{err: "no leader to stop"}
			return
		}
		at := time.Since(start)
		c.Partition(leader)
		answer := gate.Release()
		c.HardStop(leader)
		stopped <- stop{leader: leader, at: at, held: <-answer}
	}()
	h := fencecheck.Run(t, fencecheck.Config{Open: open, Seed: 13, Scopes: 1, Targets: 1, Calls: 300,
		AdminPause: 3 * time.Millisecond})
	close(quit)
	st := <-stopped
	if st.err != "" {
		t.Fatal(st.err)
	}
	t.Logf("leader m%d cut off and hard-stopped %v after the open, with a commit on its way; the commit's answer: %v",
		st.leader, st.at.Round(time.Millisecond), st.held)
	rep, err := h.Check(fencecheck.CheckOptions{Dir: linearizeDir(t), Name: "etcd-cluster"})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, op := range h.Ops {
		if !op.Output.(fencecheck.Output).Unknown {
			last = max(last, op.Return)
		}
	}
	t.Logf("history: %s; recorded over %v", rep, time.Duration(last).Round(time.Millisecond))
	if rep.Result != porcupine.Ok {
		t.Fatalf("history: %s", rep)
	}
	// Doctored: an applied submit (or, in a history that applied none, an
	// acknowledged hold) recorded a second time, after it returned, with
	// the same answer. The model answers already_applied or a denial to
	// the submit there, and a hold to a newer epoch.
	doctored := append([]porcupine.Operation(nil), h.Ops...)
	pick := slices.IndexFunc(h.Ops, func(op porcupine.Operation) bool {
		in, out := op.Input.(fencecheck.Input), op.Output.(fencecheck.Output)
		return in.Kind == fencecheck.Submit && !out.Unknown && out.Outcome == kvfence.Applied
	})
	if pick < 0 {
		pick = slices.IndexFunc(h.Ops, func(op porcupine.Operation) bool {
			in, out := op.Input.(fencecheck.Input), op.Output.(fencecheck.Output)
			return in.Kind == fencecheck.Hold && !out.Unknown && out.Err == ""
		})
	}
	if pick < 0 {
		t.Fatal("the history has neither an applied submit nor an acknowledged hold")
	}
	again := h.Ops[pick]
	again.ClientId, again.Call, again.Return = 1<<30, again.Return+1, again.Return+2
	doctored = append(doctored, again)
	drep, err := fencecheck.Check(fencecheck.Model(h.Setup), doctored, fencecheck.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("doctored history (%s call %d recorded twice): %s", kindName(again.Input.(fencecheck.Input).Kind), pick, drep)
	if drep.Result != porcupine.Illegal {
		t.Fatalf("a history with a submit applied twice: %s, want Illegal", drep)
	}
	return rep.Unknown
}

// leaderOf is the index of the running member that sees itself as leader,
// waiting up to etcdtest.ReadyTimeout, or -1. Unlike Cluster.Leader it may
// run outside the test's goroutine.
func leaderOf(c *etcdtest.Cluster) int {
	deadline := time.Now().Add(etcdtest.ReadyTimeout)
	for time.Now().Before(deadline) {
		for i, m := range c.Members {
			if m.IsLeader() {
				return i
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return -1
}

// kindName names the calls a doctored history repeats.
func kindName(k fencecheck.Kind) string {
	if k == fencecheck.Submit {
		return "submit"
	}
	return "hold"
}
