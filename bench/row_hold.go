package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvfence/kvfence/kvfence"
)

// FloodWriters is the number of workers that submit while the
// kvfence_hold_under_flood row holds: half of them with stale envelopes,
// half with current ones.
const FloodWriters = 64

// holdCell holds one scope over and over, as an operator would during an
// incident: each hold advances the scope's epoch, writes its audit entry
// and is acknowledged only once the anchor covers it. With a flood, workers
// submit on other scopes all the while.
type holdCell struct {
	f *receiver
	// scope is the scope the operations hold.
	scope string
	// flood, when set, is started by the first operation and stopped by
	// close.
	flood *flood
}

// openHold opens kvfence_hold: holds on an idle receiver.
func openHold(ctx context.Context, dir string, _ int) (cell, error) {
	f, err := newReceiver(dir)
	if err != nil {
		return nil, err
	}
	err = f.setup(func(_ *kvfence.Receiver, a *kvfence.Admin) error {
		return createScopes(ctx, a, 0, 1)
	})
	if err != nil {
		f.close()
		return nil, err
	}
	return &holdCell{f: f, scope: scopeName(0)}, nil
}

// openHoldUnderFlood opens kvfence_hold_under_flood: the same holds while
// FloodWriters workers submit. Scopes 0 to FloodWriters/2-1 are the stale
// workers': their grant was superseded (held, then activated for another
// executor), and they submit their old envelope over and over, each
// denied at its epoch (check 3) and recorded. Scopes FloodWriters/2 to
// FloodWriters-1 are the current workers': their grant is active and
// their envelope passes every fence check, then meets a precondition
// that never holds (check 11), so that each submit is also decided and
// recorded without a grant per call. The holds are on scope FloodWriters,
// which no worker writes, so that the flood stays what it is.
func openHoldUnderFlood(ctx context.Context, dir string, _ int) (cell, error) {
	f, err := newReceiver(dir)
	if err != nil {
		return nil, err
	}
	fl := &flood{envs: make([][]byte, FloodWriters), stop: make(chan struct{})}
	stale := FloodWriters / 2
	err = f.setup(func(_ *kvfence.Receiver, a *kvfence.Admin) error {
		if err := createScopes(ctx, a, 0, FloodWriters+1); err != nil {
			return err
		}
		for w := range stale {
			if fl.envs[w], err = activateWrite(ctx, a, w, "stale", benchExecutor, int64(w)); err != nil {
				return err
			}
		}
		if err := holdScopes(ctx, a, 0, stale); err != nil {
			return err
		}
		for w := range stale {
			if _, err := activateWrite(ctx, a, w, "current", "bench-replacement", int64(w)); err != nil {
				return err
			}
		}
		for w := stale; w < FloodWriters; w++ {
			if fl.envs[w], err = activateMissedWrite(ctx, a, w, int64(w)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		f.close()
		return nil, err
	}
	return &holdCell{f: f, scope: scopeName(FloodWriters), flood: fl}, nil
}

// activateMissedWrite is activateWrite for a request whose expected
// revision the target never reaches: every submit of it is denied with
// precondition_failed.
func activateMissedWrite(ctx context.Context, a *kvfence.Admin, i int, seed int64) ([]byte, error) {
	value := record(seed)
	never := uint64(1 << 62)
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: "missed", Target: targetName(i),
		ExpectRevision: &never, Set: &value})
	if err != nil {
		return nil, err
	}
	g, err := a.Activate(ctx, kvfence.ActivateRequest{Scope: scopeName(i), Executor: benchExecutor, Claim: benchClaim,
		Request: req, TTL: grantTTL})
	if err != nil {
		return nil, err
	}
	return kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: g.Scope, Epoch: g.Epoch,
		Grant: g.ID, Executor: benchExecutor, Claim: benchClaim, Request: req})
}

func (c *holdCell) op(ctx context.Context, _ int, i int64) error {
	if c.flood != nil {
		c.flood.start(ctx, c.f.r)
		if err := c.flood.failed(); err != nil {
			return err
		}
	}
	res, err := c.f.r.Admin().Hold(ctx, kvfence.HoldRequest{Scopes: []string{c.scope}, Reason: "bench: hold"})
	if err != nil {
		return err
	}
	if len(res.Scopes) != 1 || res.Scopes[0].Epoch != res.Scopes[0].PreviousEpoch+1 {
		return fmt.Errorf("operation %d: hold answered %+v", i, res.Scopes)
	}
	return nil
}

func (c *holdCell) syncs() (float64, error) { return c.f.syncs() }

func (c *holdCell) close() error {
	var err error
	if c.flood != nil {
		err = c.flood.halt()
	}
	return errors.Join(err, c.f.close())
}

// flood is the workers of kvfence_hold_under_flood, each submitting its
// envelope in a loop until halted.
type flood struct {
	envs [][]byte
	once sync.Once
	stop chan struct{}
	wg   sync.WaitGroup
	// submits counts the flood's decisions.
	submits atomic.Int64
	mu      sync.Mutex
	err     error
}

// start starts the workers on r, once.
func (fl *flood) start(ctx context.Context, r *kvfence.Receiver) {
	fl.once.Do(func() {
		for w, env := range fl.envs {
			want := kvfence.ReasonStaleEpoch
			if w >= len(fl.envs)/2 {
				want = kvfence.ReasonPreconditionFailed
			}
			fl.wg.Add(1)
			go func() {
				defer fl.wg.Done()
				for {
					select {
					case <-fl.stop:
						return
					default:
					}
					res, err := r.Submit(ctx, benchExecutor, env)
					if err == nil && (res.Outcome != kvfence.Denied || res.Reason != want) {
						err = fmt.Errorf("flood worker %d: %s %s, want denied %s", w, res.Outcome, res.Reason, want)
					}
					if err != nil {
						fl.mu.Lock()
						fl.err = errors.Join(fl.err, err)
						fl.mu.Unlock()
						return
					}
					fl.submits.Add(1)
				}
			}()
		}
	})
}

// failed returns the workers' errors so far.
func (fl *flood) failed() error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.err
}

// halt stops the workers and waits for them.
func (fl *flood) halt() error {
	fl.once.Do(func() {})
	close(fl.stop)
	fl.wg.Wait()
	if err := fl.failed(); err != nil && !errors.Is(err, kvfence.ErrClosed) {
		return err
	}
	return nil
}
