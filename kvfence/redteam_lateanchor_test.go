package kvfence

import (
	"errors"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// lateStore is an anchor store whose armed write reports an unknown
// outcome and takes effect only after the receiver's next Load, as a
// compare-and-swap still in flight inside an etcd cluster can
// (etcdanchor.ErrOutcomeUnknown: "a write still in flight inside the
// cluster may yet land").
type lateStore struct {
	audit.AnchorStore
	mu      sync.Mutex
	armed   bool
	pending func() error
}

var errLostAnswer = errors.New("outcome unknown: the answer was lost")

func (s *lateStore) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed {
		s.armed = false
		s.pending = func() error { return s.AnchorStore.Store(old, next) }
		return errLostAnswer
	}
	return s.AnchorStore.Store(old, next)
}

func (s *lateStore) Load() (audit.SignedCheckpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, err := s.AnchorStore.Load()
	if s.pending != nil {
		// The write lands just after the read that was to settle it.
		if perr := s.pending(); perr != nil {
			return sc, perr
		}
		s.pending = nil
	}
	return sc, err
}

// Ensure that a receiver whose anchor write of unknown outcome landed
// after the receiver looked does not refuse every later write: the anchor
// it finds is its own, on its own chain, and the next writes are
// acknowledged again.
func TestRedteam_LateAnchorWriteDoesNotWedge(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.r.Close()
	ls := &lateStore{AnchorStore: f.anchor}
	opts := f.opts()
	opts.Anchor = ls
	r, err := Open(f.path, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	a := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
	ls.mu.Lock()
	ls.armed = true
	ls.mu.Unlock()
	if _, err := f.r.Submit(f.ctx, "worker-a", a.envelope); !errors.Is(err, ErrNotAcknowledged) {
		t.Fatalf("submit with a lost anchor answer: %v, want ErrNotAcknowledged", err)
	}
	var last error
	for i := range 3 {
		_, last = f.r.Submit(f.ctx, "worker-a", a.envelope)
		if last == nil {
			t.Logf("acknowledged again at retry %d", i+1)
			return
		}
	}
	t.Fatalf("every write after the late anchor write fails: %v", last)
}
