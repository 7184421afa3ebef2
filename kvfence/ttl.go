package kvfence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
)

// ErrTTLTooLong means an activation asked for a grant that would stay valid
// longer after its activation than its scope's maximum allows, or a scope
// was created with a maximum above the receiver's. It is a refusal by the
// receiver's rules: nothing was written.
var ErrTTLTooLong = errors.New("kvfence: grant lifetime over the maximum")

// DefaultMaxGrantTTL is the receiver-wide maximum grant lifetime when
// InitOptions.MaxGrantTTL is zero, and the maximum of every scope of a
// database created before maximums were recorded.
const DefaultMaxGrantTTL = 24 * time.Hour

// metaMaxGrantTTL keeps InitOptions.MaxGrantTTL as 8 big-endian bytes of
// nanoseconds.
//
// The meta bucket is outside the state digest, so this value is not what
// an activation is checked against: CreateScope copies the maximum that
// applies to the new scope into its control record, which the digest and
// every checkpoint cover, and into the scope_created audit entry's note.
// Editing the meta value therefore changes no existing scope, and a scope
// created after such an edit shows its maximum in the signed chain. The
// init entry's note records the value given at Init.
var metaMaxGrantTTL = []byte("max_grant_ttl")

// ScopeOptions configures CreateScopeWith. The zero value gives the
// receiver's defaults.
type ScopeOptions struct {
	// MaxGrantTTL bounds how long after its activation a grant of the
	// scope may stay valid. Zero means the receiver's maximum
	// (InitOptions.MaxGrantTTL); a larger value is refused with
	// ErrTTLTooLong, so that a scope can tighten the receiver's bound but
	// never widen it.
	MaxGrantTTL time.Duration
}

// CreateScopeWith creates a protected scope at epoch 1, held, with no active
// grant, as CreateScope does, with the given options, and returns its
// status as created.
func (a *Admin) CreateScopeWith(ctx context.Context, scope string, opts ScopeOptions) (ScopeStatus, error) {
	if err := a.checkActor(); err != nil {
		return ScopeStatus{}, err
	}
	if err := checkName("scope", scope); err != nil {
		return ScopeStatus{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if opts.MaxGrantTTL < 0 {
		return ScopeStatus{}, fmt.Errorf("%w: negative maximum grant lifetime", ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return ScopeStatus{}, err
	}
	var created ScopeStatus
	err := a.r.adminExec(len(scope), func(w *wtx) error {
		c, err := w.control(scope)
		if err != nil {
			return err
		}
		if c != nil {
			return fmt.Errorf("%w: %s", ErrScopeExists, scope)
		}
		ceiling, err := maxGrantTTL(w.tx)
		if err != nil {
			return err
		}
		limit := opts.MaxGrantTTL
		if limit == 0 {
			limit = ceiling
		}
		if limit > ceiling {
			return fmt.Errorf("%w: a scope's maximum grant lifetime (%s) may not exceed the receiver's (%s)", ErrTTLTooLong, limit, ceiling)
		}
		c = &controlRecord{Epoch: 1, Mode: ModeHeld, CreatedAt: w.now.UnixNano(), MaxGrantTTL: int64(limit)}
		if err := w.putControl(scope, c); err != nil {
			return err
		}
		if err := w.raiseEpochHighWater(1); err != nil {
			return err
		}
		_, err = w.appendAudit(&audit.Entry{Kind: KindScopeCreated, Scope: scope, Epoch: 1,
			Note: "max grant ttl " + limit.String(), Actor: a.actor})
		created = c.public(scope)
		return err
	})
	if err != nil {
		return ScopeStatus{}, err
	}
	return created, nil
}

// maxGrantTTL reads the receiver-wide maximum recorded at Init, or
// DefaultMaxGrantTTL for a database that predates it.
func maxGrantTTL(tx engine.Tx) (time.Duration, error) {
	raw, err := tx.Get(bucketMeta, metaMaxGrantTTL)
	if err != nil {
		return 0, err
	}
	if raw == nil {
		return DefaultMaxGrantTTL, nil
	}
	if len(raw) != 8 || int64(binary.BigEndian.Uint64(raw)) <= 0 {
		return 0, fmt.Errorf("%w: meta %q is %x", ErrBadFormat, metaMaxGrantTTL, raw)
	}
	return time.Duration(binary.BigEndian.Uint64(raw)), nil
}

// encodeMaxGrantTTL is metaMaxGrantTTL's stored form.
func encodeMaxGrantTTL(d time.Duration) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(d))
}

// maxGrantTTL is the scope's maximum grant lifetime: the one recorded at
// its creation, or DefaultMaxGrantTTL for a scope created before maximums
// were recorded.
func (c *controlRecord) maxGrantTTL() time.Duration {
	if c.MaxGrantTTL <= 0 {
		return DefaultMaxGrantTTL
	}
	return time.Duration(c.MaxGrantTTL)
}

// MaxGrantTTL returns the receiver-wide maximum grant lifetime recorded at
// Init (DefaultMaxGrantTTL for a database that predates it): the largest
// maximum a new scope may have.
func (r *Receiver) MaxGrantTTL() (time.Duration, error) {
	var d time.Duration
	err := r.view(func(tx engine.Tx) error {
		var err error
		d, err = maxGrantTTL(tx)
		return err
	})
	return d, err
}
