package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/kvfence"
)

// grantTTL is the validity of the grants the setup activates: long enough
// that none expires during a run.
const grantTTL = 24 * time.Hour

// submitCell submits distinct fenced writes that all apply. A grant
// authorises one request, and a scope has one active grant, so each
// operation needs a scope of its own, activated beforehand: prepare holds
// the scopes of the previous round in bulk and activates one grant per
// operation, creating scopes only when the pool is too small.
type submitCell struct {
	f *receiver
	// scopes is the number of scopes created; the first active of them are
	// open with grants of the previous preparation.
	scopes, active int
	// base is the number of the operation envs[0] is for.
	base int64
	// executor is the grants' executor; empty means benchExecutor.
	executor string
	envs     [][]byte
}

func openSubmit(_ context.Context, dir string, _ int) (cell, error) {
	f, err := newReceiver(dir)
	if err != nil {
		return nil, err
	}
	return &submitCell{f: f}, nil
}

func (c *submitCell) prepare(ctx context.Context, from, n int64) error {
	envs := make([][]byte, n)
	err := c.f.setup(func(_ *kvfence.Receiver, a *kvfence.Admin) error {
		if err := holdScopes(ctx, a, 0, c.active); err != nil {
			return err
		}
		c.active = 0
		if need := int(n); need > c.scopes {
			if err := createScopes(ctx, a, c.scopes, need); err != nil {
				return err
			}
			c.scopes = need
		}
		for k := range envs {
			op := from + int64(k)
			executor := c.executor
			if executor == "" {
				executor = benchExecutor
			}
			env, err := activateWrite(ctx, a, k, fmt.Sprintf("op-%d", op), executor, op)
			if err != nil {
				return err
			}
			envs[k] = env
			c.active = k + 1
		}
		return nil
	})
	c.base, c.envs = from, envs
	return err
}

func (c *submitCell) op(ctx context.Context, _ int, i int64) error {
	k := i - c.base
	env := c.envs[k]
	c.envs[k] = nil
	res, err := c.f.r.Submit(ctx, benchExecutor, env)
	if err != nil {
		return err
	}
	if res.Outcome != kvfence.Applied {
		return fmt.Errorf("operation %d: %s %s: %s", i, res.Outcome, res.Reason, res.Detail)
	}
	return nil
}

func (c *submitCell) syncs() (float64, error) { return c.f.syncs() }
func (c *submitCell) close() error            { return c.f.close() }

// deniedCell floods the receiver with stale envelopes: each writer has a
// scope whose grant was superseded (held, then activated for another
// worker at the next epoch), and submits its old envelope over and over.
// Each denial commits an audit entry and the scope's denial counters.
type deniedCell struct {
	f    *receiver
	envs [][]byte
}

func openDenied(ctx context.Context, dir string, writers int) (cell, error) {
	f, err := newReceiver(dir)
	if err != nil {
		return nil, err
	}
	c := &deniedCell{f: f, envs: make([][]byte, writers)}
	err = f.setup(func(_ *kvfence.Receiver, a *kvfence.Admin) error {
		if err := createScopes(ctx, a, 0, writers); err != nil {
			return err
		}
		for w := range writers {
			if c.envs[w], err = activateWrite(ctx, a, w, "stale", benchExecutor, int64(w)); err != nil {
				return err
			}
		}
		if err := holdScopes(ctx, a, 0, writers); err != nil {
			return err
		}
		for w := range writers {
			if _, err := activateWrite(ctx, a, w, "current", "bench-replacement", int64(w)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		f.close()
		return nil, err
	}
	return c, nil
}

func (c *deniedCell) op(ctx context.Context, w int, i int64) error {
	res, err := c.f.r.Submit(ctx, benchExecutor, c.envs[w])
	if err != nil {
		return err
	}
	if res.Outcome != kvfence.Denied || res.Reason != kvfence.ReasonStaleEpoch {
		return fmt.Errorf("operation %d: %s %s, want denied %s", i, res.Outcome, res.Reason, kvfence.ReasonStaleEpoch)
	}
	return nil
}

func (c *deniedCell) syncs() (float64, error) { return c.f.syncs() }
func (c *deniedCell) close() error            { return c.f.close() }

// lifecycleCell runs one action's whole life per operation, as an
// administrator and a worker would: activate a grant, submit the worker's
// envelope, hold the scope. Each writer has its own scope.
type lifecycleCell struct {
	f *receiver
}

func openLifecycle(ctx context.Context, dir string, writers int) (cell, error) {
	f, err := newReceiver(dir)
	if err != nil {
		return nil, err
	}
	err = f.setup(func(_ *kvfence.Receiver, a *kvfence.Admin) error {
		return createScopes(ctx, a, 0, writers)
	})
	if err != nil {
		f.close()
		return nil, err
	}
	return &lifecycleCell{f: f}, nil
}

func (c *lifecycleCell) op(ctx context.Context, w int, i int64) error {
	r := c.f.r
	a := r.Admin()
	env, err := activateWrite(ctx, a, w, fmt.Sprintf("op-%d", i), benchExecutor, i)
	if err != nil {
		return err
	}
	res, err := r.Submit(ctx, benchExecutor, env)
	if err != nil {
		return err
	}
	if res.Outcome != kvfence.Applied {
		return fmt.Errorf("operation %d: %s %s: %s", i, res.Outcome, res.Reason, res.Detail)
	}
	_, err = a.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scopeName(w)}, Reason: "action done"})
	return err
}

func (c *lifecycleCell) syncs() (float64, error) { return c.f.syncs() }
func (c *lifecycleCell) close() error            { return c.f.close() }
