package kvfence

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/witnesstest"
)

// Ensure that two processes writing one receiver on etcd, each with its
// own quorum of the same three witnesses, get their writes acknowledged:
// a round that finds the witnesses at the other process's newer
// checkpoint is no rollback when that checkpoint, anchored and in this
// chain, covers the write (cosignCovering); and that a third process
// opening meanwhile is not refused for the writers' progress
// (checkWitnesses asks again from the newer checkpoint).
func TestWitnessed_EtcdTwoWriters(t *testing.T) {
	skipShort(t)
	s := engines[1].new(t)
	anchor := &audit.MemAnchor{}
	clock := newClock()
	if err := s.init(t, &InitOptions{ReceiverID: "shared-witnessed", Key: testKey, Anchor: anchor, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	set, err := witnesstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if err := set.TrustReceiver("shared-witnessed", testKey.Public().(ed25519.PublicKey)); err != nil {
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
	var rs []*Receiver
	// The first writer's requests reach the witnesses late, so that the
	// second's rounds overtake them.
	slow := &http.Client{Transport: delayedTransport{10 * time.Millisecond}}
	for i, c := range []*http.Client{slow, nil} {
		r, err := s.open(t, options(c), defect.Variant{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := r.Admin().CreateScope(t.Context(), fmt.Sprintf("scope-%d", i)); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	const perWriter = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*perWriter+8)
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < perWriter; {
				_, err := r.Admin().Hold(t.Context(), HoldRequest{Scopes: []string{fmt.Sprintf("scope-%d", i)}, Reason: fmt.Sprintf("h%d", j)})
				if errors.Is(err, ErrStorageBusy) {
					continue // the other writer's commit moved the store; not this test's subject
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d hold %d: %w", i, j, err)
				}
				j++
			}
		}()
	}
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			o := options(nil)
			o.ReadOnly = true
			r, err := s.open(t, o, defect.Variant{})
			if err != nil && !errors.Is(err, ErrStorageBusy) {
				errs <- fmt.Errorf("reader open: %w", err)
				return
			}
			if err == nil {
				r.Close()
			}
		}
	}()
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// delayedTransport sends each request after a delay.
type delayedTransport struct{ delay time.Duration }

// RoundTrip waits, then sends r.
func (d delayedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case <-time.After(d.delay):
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return witnesstest.Transport().RoundTrip(r)
}
