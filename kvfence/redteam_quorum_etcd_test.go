package kvfence

import (
	"crypto/ed25519"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/witnesstest"
	"github.com/kvfence/kvfence/witness"
)

// failOnceAnchor is an anchor store whose next Store fails, as a lost
// anchor write does.
type failOnceAnchor struct {
	*audit.MemAnchor
	fail atomic.Bool
}

func (a *failOnceAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	if a.fail.CompareAndSwap(true, false) {
		return errors.New("anchor write lost")
	}
	return a.MemAnchor.Store(old, next)
}

// hookTransport runs hook once, before the first latest question it
// carries.
type hookTransport struct {
	once sync.Once
	hook func()
}

func (h *hookTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, witness.LatestPath) {
		h.once.Do(h.hook)
	}
	return witnesstest.Transport().RoundTrip(r)
}

// Ensure that a process opening a witnessed receiver on etcd while the
// anchor is behind the head (another process's anchor write was lost)
// and that other process commits meanwhile opens: every process is
// honest. Scenario: process A's anchor write fails (database ahead of
// the anchor by one commit); process B opens; while B's question to the
// witnesses is on its way, A commits and has it cosigned; B's
// checkWitnesses asks again from the newer checkpoint (as designed) and
// passes, then refreshWitnessed compares that newer checkpoint with the
// head B read before and refuses the database as ErrBadFormat ("not its
// head's"): a healthy shared receiver is reported as a damaged one.
func TestRedteamQ_EtcdRefreshRefusesOnConcurrentCommit(t *testing.T) {
	skipShort(t)
	s := engines[1].new(t)
	anchor := &failOnceAnchor{MemAnchor: &audit.MemAnchor{}}
	clock := newClock()
	if err := s.init(t, &InitOptions{ReceiverID: "rtq-etcd", Key: testKey, Anchor: anchor, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	set, err := witnesstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if err := set.TrustReceiver("rtq-etcd", testKey.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	options := func(httpClient *http.Client) *Options {
		ms, err := set.Members(httpClient)
		if err != nil {
			t.Fatal(err)
		}
		return &Options{Key: testKey, Anchor: anchor, Now: clock.Now, Witnesses: ms, WitnessQuorum: 2,
			WitnessTimeout: 5 * time.Second, Warn: func(string) {}}
	}
	a, err := s.open(t, options(nil), defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Admin().CreateScope(t.Context(), "scope-0"); err != nil {
		t.Fatal(err)
	}
	anchor.fail.Store(true)
	if _, err := a.Admin().CreateScope(t.Context(), "scope-1"); !errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("write with the anchor write lost: %v, want ErrNotAcknowledged", err)
	}
	var hookErr error
	ht := &hookTransport{hook: func() {
		_, hookErr = a.Admin().CreateScope(t.Context(), "scope-2")
	}}
	b, err := s.open(t, options(&http.Client{Transport: ht}), defect.Variant{})
	if hookErr != nil {
		t.Fatalf("process A's write during B's open: %v", hookErr)
	}
	if err != nil {
		t.Fatalf("process B's open beside A's commit: %v", err)
	}
	b.Close()
}

// addHookTransport runs hook once, before the first add-checkpoint it
// carries.
type addHookTransport struct {
	once sync.Once
	hook func()
}

func (h *addHookTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, witness.AddCheckpointPath) {
		h.once.Do(h.hook)
	}
	return witnesstest.Transport().RoundTrip(r)
}

// Ensure that the anchor refresh of an Open on etcd tolerates another
// process's newer checkpoint reaching the witnesses first, as a write's
// round does (cosignCovering). Scenario: A's anchor write is lost; B
// opens, moves the anchor up to the database's checkpoint and asks the
// witnesses to cosign it; A commits meanwhile and its round reaches them
// first; every witness answers B with a 409 above B's size, and
// refreshWitnessed, which does not look at the anchor again, fails the
// open with ErrNotAcknowledged: two honest processes, one refused.
func TestRedteamQ_EtcdRefreshRoundOvertakenFailsOpen(t *testing.T) {
	skipShort(t)
	s := engines[1].new(t)
	anchor := &failOnceAnchor{MemAnchor: &audit.MemAnchor{}}
	clock := newClock()
	if err := s.init(t, &InitOptions{ReceiverID: "rtq-etcd2", Key: testKey, Anchor: anchor, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	set, err := witnesstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if err := set.TrustReceiver("rtq-etcd2", testKey.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	options := func(httpClient *http.Client) *Options {
		ms, err := set.Members(httpClient)
		if err != nil {
			t.Fatal(err)
		}
		return &Options{Key: testKey, Anchor: anchor, Now: clock.Now, Witnesses: ms, WitnessQuorum: 2,
			WitnessTimeout: 5 * time.Second, Warn: func(string) {}}
	}
	a, err := s.open(t, options(nil), defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Admin().CreateScope(t.Context(), "scope-0"); err != nil {
		t.Fatal(err)
	}
	anchor.fail.Store(true)
	if _, err := a.Admin().CreateScope(t.Context(), "scope-1"); !errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("write with the anchor write lost: %v, want ErrNotAcknowledged", err)
	}
	var hookErr error
	ht := &addHookTransport{hook: func() {
		_, hookErr = a.Admin().CreateScope(t.Context(), "scope-2")
	}}
	b, err := s.open(t, options(&http.Client{Transport: ht}), defect.Variant{})
	if hookErr != nil {
		t.Fatalf("process A's write during B's refresh: %v", hookErr)
	}
	if err != nil {
		t.Fatalf("process B's open, its refresh overtaken by A's round: %v", err)
	}
	b.Close()
}
