package kvfence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
)

// KindGrantExtended is the entry kind of a grant extension
// (audit.KindGrantExtended).
const KindGrantExtended = audit.KindGrantExtended

// ErrGrantNotActive means an extension named a grant that is not its
// scope's active grant: unknown, revoked, superseded by a hold, a recovery
// or a later activation, or in a scope that is held.
var ErrGrantNotActive = errors.New("kvfence: the grant is not its scope's active grant")

// ErrGrantExpired means an extension named a grant whose validity window
// was already over: an expired grant stays expired.
var ErrGrantExpired = errors.New("kvfence: the grant has expired")

// ExtendRequest names an active grant and how long it should stay valid
// from now.
type ExtendRequest struct {
	// Grant is the id of the grant to extend; it must be its scope's
	// active grant, not expired and not revoked.
	Grant string
	// TTL sets the grant's new end of validity to the receiver's now plus
	// TTL. It must be positive, the new end must be later than the
	// current one, and it may not be later than the grant's activation
	// time plus its scope's maximum grant lifetime.
	TTL time.Duration
}

// ExtendGrant moves an active grant's end of validity (Grant.NotAfter) to
// the receiver's now plus req.TTL, in one write transaction with an audit
// entry of kind grant_extended, and returns the grant as it now stands.
//
// The new end is set, not added to: repeating an extension with the same
// TTL moves the end to the same distance from now, never further. It may
// not be later than the grant's CreatedAt plus its scope's maximum grant
// lifetime (ErrTTLTooLong), the same bound Activate holds a new grant to,
// so that no number of extensions keeps one approval usable for longer
// than the maximum allows; a longer task is re-approved and activated
// anew. An end that would not be later than the current one is
// ErrInvalidWindow.
//
// Only the scope's active grant is extended, and only while the scope is
// open at the grant's epoch, the grant is not revoked and its window is
// not over (ErrGrantNotActive, ErrGrantExpired). The checks and the write
// are one transaction, ordered with every hold, activation and recovery:
// an extension that commits after a hold finds the scope held and changes
// nothing, and a hold after an extension supersedes the extended grant as
// it would any other, so an extension never revives what a hold fenced.
func (a *Admin) ExtendGrant(ctx context.Context, req ExtendRequest) (Grant, error) {
	if err := a.checkActor(); err != nil {
		return Grant{}, err
	}
	if err := checkName("grant", req.Grant); err != nil {
		return Grant{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if req.TTL <= 0 {
		return Grant{}, fmt.Errorf("%w: the ttl of an extension must be positive, got %s", ErrInvalidWindow, req.TTL)
	}
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	return adminUpdate(a.r, len(req.Grant), func(w *wtx) (Grant, error) {
		g, err := w.grant(req.Grant)
		if err != nil {
			return Grant{}, err
		}
		if g == nil {
			return Grant{}, fmt.Errorf("%w: no grant %s", ErrGrantNotActive, req.Grant)
		}
		c, err := w.control(g.Scope)
		if err != nil {
			return Grant{}, err
		}
		switch {
		case c == nil:
			// A grant names a scope that exists; a store without it is
			// not one this receiver wrote.
			return Grant{}, fmt.Errorf("%w: grant %s names scope %s, which does not exist", ErrGrantNotActive, req.Grant, g.Scope)
		case g.RevokedSeq != 0:
			return Grant{}, fmt.Errorf("%w: grant %s was revoked by the recovery at audit seq %d", ErrGrantNotActive, req.Grant, g.RevokedSeq)
		case c.ActiveGrant != g.ID || c.Epoch != g.Epoch:
			// A hold clears the active grant, so this refuses a held scope
			// too; the message says which it was.
			if c.Mode != ModeOpen {
				return Grant{}, fmt.Errorf("%w: scope %s is held at epoch %d", ErrGrantNotActive, g.Scope, c.Epoch)
			}
			return Grant{}, fmt.Errorf("%w: scope %s is open at epoch %d with grant %s; grant %s was minted at epoch %d",
				ErrGrantNotActive, g.Scope, c.Epoch, c.ActiveGrant, req.Grant, g.Epoch)
		}
		now := w.now.UnixNano()
		if now >= g.NotAfter {
			return Grant{}, fmt.Errorf("%w: grant %s expired at %s", ErrGrantExpired, req.Grant,
				fromNanos(g.NotAfter).Format(time.RFC3339Nano))
		}
		na := w.now.Add(req.TTL)
		// The cap counts from the activation, not from now: counted from
		// now, each extension would move it, and one approval could be
		// kept usable forever.
		limit := c.maxGrantTTL()
		latest := fromNanos(g.CreatedAt).Add(limit)
		if g.CreatedAt <= 0 || na.After(latest) {
			return Grant{}, fmt.Errorf("%w: grant %s would stay valid until %s, past %s, its activation at %s plus scope %s's maximum of %s",
				ErrTTLTooLong, req.Grant, na.UTC().Format(time.RFC3339Nano), latest.UTC().Format(time.RFC3339Nano),
				fromNanos(g.CreatedAt).Format(time.RFC3339Nano), g.Scope, limit)
		}
		if na.UnixNano() <= g.NotAfter {
			return Grant{}, fmt.Errorf("%w: now plus %s (%s) is not later than grant %s's end of validity %s",
				ErrInvalidWindow, req.TTL, na.UTC().Format(time.RFC3339Nano), req.Grant, fromNanos(g.NotAfter).Format(time.RFC3339Nano))
		}
		was := g.NotAfter
		g.NotAfter = na.UnixNano()
		if err := w.put(bucketGrants, []byte(g.ID), g); err != nil {
			return Grant{}, err
		}
		_, err = w.appendAudit(&audit.Entry{Kind: KindGrantExtended, Scope: g.Scope, Epoch: g.Epoch, Grant: g.ID,
			Executor: g.Executor, Action: g.Action,
			Note: fmt.Sprintf("not after %s; was %s; ttl %s", fromNanos(g.NotAfter).Format(time.RFC3339Nano),
				fromNanos(was).Format(time.RFC3339Nano), req.TTL), Actor: a.actor})
		if err != nil {
			return Grant{}, err
		}
		return g.public(), nil
	})
}
