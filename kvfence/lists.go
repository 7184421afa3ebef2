package kvfence

import (
	"fmt"
	"time"

	"github.com/kvfence/kvfence/engine"
)

// Expired reports whether the grant's validity window is over at now: the
// check Submit makes (a grant is valid up to, not including, NotAfter).
func (g Grant) Expired(now time.Time) bool { return !now.Before(g.NotAfter) }

// scopeStatus is a scope's status with its active grant, read in the same
// transaction as the control record, so that the two describe one moment.
func scopeStatus(tx engine.Tx, scope string, c *controlRecord, now time.Time) (ScopeStatus, error) {
	st := c.public(scope)
	if c.Mode != ModeOpen {
		return st, nil
	}
	g, err := getGrant(tx, c.ActiveGrant)
	if err != nil {
		return st, err
	}
	if g == nil {
		return st, fmt.Errorf("%w: scope %q is open with grant %q, which has no record", ErrBadFormat, scope, c.ActiveGrant)
	}
	pg := g.public()
	st.Grant, st.GrantExpired = &pg, pg.Expired(now)
	return st, nil
}

// Targets returns the targets of scope, or of every scope when scope is "",
// ordered by name. Target names are one namespace across the receiver, so
// a name appears once whatever the filter. A scope that does not exist is
// ErrUnknownScope; one without targets gives an empty list.
func (r *Receiver) Targets(scope string) ([]Target, error) {
	var out []Target
	err := r.view(func(tx engine.Tx) error {
		out = []Target{} // the function may run more than once
		if scope != "" {
			c, err := getControl(tx, scope)
			if err != nil {
				return err
			}
			if c == nil {
				return fmt.Errorf("%w: %s", ErrUnknownScope, scope)
			}
		}
		var etcd []int
		err := tx.Scan(bucketTargets, nil, func(k, v []byte) error {
			t, err := parseTarget(string(k), v)
			if err != nil {
				return err
			}
			if scope == "" || t.Scope == scope {
				pt := Target{Name: string(k), Scope: t.Scope, Revision: t.Revision, Value: t.Value, Kind: t.kind(), Effect: t.Effect, Key: t.Key, UID: t.UID}
				if t.Object != nil {
					// A kubernetes target names its object, as Target does.
					obj := *t.Object
					pt.Object = &obj
				}
				out = append(out, pt)
				if t.Kind == TargetEtcd {
					etcd = append(etcd, len(out)-1)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		// The keys are read after the scan, which allows no other use of
		// the transaction meanwhile.
		for _, i := range etcd {
			rec := &targetRecord{Scope: out[i].Scope, Kind: TargetEtcd, Key: out[i].Key, Revision: out[i].Revision}
			if out[i], err = publicTarget(tx, out[i].Name, rec); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// Now returns the time by the receiver's clock (Options.Now), the clock
// that decides whether a grant has expired.
func (r *Receiver) Now() time.Time { return r.opts.Now() }
