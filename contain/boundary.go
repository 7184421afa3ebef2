package contain

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

// Boundary is one receiver, as the coordinator uses it. Every answer is
// checked by the coordinator before anything is recorded: a Boundary
// reports what its receiver said, and is not trusted to have checked it.
type Boundary interface {
	// Hold holds scopes at the receiver (kvfence.Admin.Hold).
	Hold(ctx context.Context, req kvfence.HoldRequest) (kvfence.HoldResult, error)
	// ReceiptsByClaim returns the receipts of scope applied under grants
	// that carried claim.
	ReceiptsByClaim(ctx context.Context, scope, claim string) ([]kvfence.Receipt, error)
	// Status returns scope's control state: its current epoch and its
	// latest stale-authority denial.
	Status(ctx context.Context, scope string) (kvfence.ScopeStatus, error)
	// Activate activates a grant at the receiver (kvfence.Admin.Activate).
	Activate(ctx context.Context, req kvfence.ActivateRequest) (kvfence.Grant, error)
}

// Served returns the Boundary of a served receiver reached through c. The
// caller keeps c and closes it.
func Served(c *client.Client) Boundary { return served{c} }

type served struct{ c *client.Client }

func (s served) Hold(ctx context.Context, req kvfence.HoldRequest) (kvfence.HoldResult, error) {
	return s.c.Hold(ctx, req)
}

func (s served) ReceiptsByClaim(ctx context.Context, scope, claim string) ([]kvfence.Receipt, error) {
	return s.c.ReceiptsByClaim(ctx, scope, claim)
}

func (s served) Status(ctx context.Context, scope string) (kvfence.ScopeStatus, error) {
	st, err := s.c.Status(ctx, scope)
	if err != nil {
		return kvfence.ScopeStatus{}, err
	}
	// The receiver was asked for one scope: an answer with any other, or
	// with more than one, is not that scope's status.
	if len(st.Scopes) != 1 || st.Scopes[0].Scope != scope {
		return kvfence.ScopeStatus{}, fmt.Errorf("%w: asked for the status of scope %q, got %d scopes", ErrBadAnswer, scope, len(st.Scopes))
	}
	return st.Scopes[0], nil
}

func (s served) Activate(ctx context.Context, req kvfence.ActivateRequest) (kvfence.Grant, error) {
	a, err := s.c.Activate(ctx, req)
	return a.Grant, err
}

// Embedded returns the Boundary of a receiver this process has open. The
// caller keeps r and closes it.
func Embedded(r *kvfence.Receiver) Boundary { return embedded{r} }

type embedded struct{ r *kvfence.Receiver }

func (e embedded) Hold(ctx context.Context, req kvfence.HoldRequest) (kvfence.HoldResult, error) {
	return e.r.Admin().Hold(ctx, req)
}

func (e embedded) ReceiptsByClaim(ctx context.Context, scope, claim string) ([]kvfence.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return e.r.ReceiptsByClaim(scope, claim)
}

func (e embedded) Status(ctx context.Context, scope string) (kvfence.ScopeStatus, error) {
	if err := ctx.Err(); err != nil {
		return kvfence.ScopeStatus{}, err
	}
	return e.r.Status(scope)
}

func (e embedded) Activate(ctx context.Context, req kvfence.ActivateRequest) (kvfence.Grant, error) {
	return e.r.Admin().Activate(ctx, req)
}

// LocalOptions names a receiver on this host and the key to write to it
// with.
type LocalOptions struct {
	// DB and Anchor are the receiver's database and anchor files, as the
	// ledger registered them.
	DB, Anchor string
	// Key is the receiver's private key, which every write to it needs.
	Key ed25519.PrivateKey
	// LockTimeout bounds the wait for the database's lock on each call;
	// zero means kvfence.DefaultLockTimeout.
	LockTimeout time.Duration
}

// Local returns the Boundary of a receiver on this host that no process
// serves. Each call opens the database, under its file lock, and closes it
// before returning, so that the receiver is never held open between calls
// and a process that holds it (a serve) makes the call fail with
// kvfence.ErrStorageBusy rather than wait. Reads open it read-only.
func Local(opts LocalOptions) (Boundary, error) {
	if opts.DB == "" || opts.Anchor == "" {
		return nil, fmt.Errorf("%w: a local receiver needs its database and its anchor", ErrInvalidArgument)
	}
	if len(opts.Key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: a local receiver needs its %d-byte private key", ErrInvalidArgument, ed25519.PrivateKeySize)
	}
	return local{opts}, nil
}

type local struct{ o LocalOptions }

// with opens the receiver, runs fn on it and closes it, returning the
// close's error when fn succeeded.
func with[T any](ctx context.Context, l local, write bool, fn func(r *kvfence.Receiver) (T, error)) (res T, err error) {
	if err := ctx.Err(); err != nil {
		return res, err
	}
	opts := &kvfence.Options{LockTimeout: l.o.LockTimeout, Anchor: audit.FileAnchor{Path: l.o.Anchor}}
	if write {
		opts.Key = l.o.Key
	} else {
		opts.ReadOnly = true
	}
	r, err := kvfence.Open(l.o.DB, opts)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := r.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	return fn(r)
}

func (l local) Hold(ctx context.Context, req kvfence.HoldRequest) (kvfence.HoldResult, error) {
	return with(ctx, l, true, func(r *kvfence.Receiver) (kvfence.HoldResult, error) { return r.Admin().Hold(ctx, req) })
}

func (l local) ReceiptsByClaim(ctx context.Context, scope, claim string) ([]kvfence.Receipt, error) {
	return with(ctx, l, false, func(r *kvfence.Receiver) ([]kvfence.Receipt, error) { return r.ReceiptsByClaim(scope, claim) })
}

func (l local) Status(ctx context.Context, scope string) (kvfence.ScopeStatus, error) {
	return with(ctx, l, false, func(r *kvfence.Receiver) (kvfence.ScopeStatus, error) { return r.Status(scope) })
}

func (l local) Activate(ctx context.Context, req kvfence.ActivateRequest) (kvfence.Grant, error) {
	return with(ctx, l, true, func(r *kvfence.Receiver) (kvfence.Grant, error) { return r.Admin().Activate(ctx, req) })
}
