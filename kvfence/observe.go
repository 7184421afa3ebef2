package kvfence

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
)

// The observation path reads state in read-only transactions. Nothing here
// authorises anything: a receipt or a status is evidence, not permission.

// Status returns the control state of one scope, or ErrUnknownScope.
func (r *Receiver) Status(scope string) (ScopeStatus, error) {
	var st ScopeStatus
	now := r.opts.Now()
	err := r.view(func(tx engine.Tx) error {
		c, err := getControl(tx, scope)
		if err != nil {
			return err
		}
		if c == nil {
			return fmt.Errorf("%w: %s", ErrUnknownScope, scope)
		}
		st, err = scopeStatus(tx, scope, c, now)
		return err
	})
	return st, err
}

// Scopes returns the control state of every scope, ordered by name.
func (r *Receiver) Scopes() ([]ScopeStatus, error) {
	var out []ScopeStatus
	now := r.opts.Now()
	err := r.view(func(tx engine.Tx) error {
		out = out[:0] // the function may run more than once
		return tx.Scan(bucketControl, nil, func(k, v []byte) error {
			c, err := parseControl(string(k), v)
			if err != nil {
				return err
			}
			st, err := scopeStatus(tx, string(k), c, now)
			out = append(out, st)
			return err
		})
	})
	return out, err
}

// Target returns a target's value and revision, or ErrUnknownTarget.
func (r *Receiver) Target(name string) (Target, error) {
	var out Target
	err := r.view(func(tx engine.Tx) error {
		t, err := getTarget(tx, name)
		if err != nil {
			return err
		}
		if t == nil {
			return fmt.Errorf("%w: %s", ErrUnknownTarget, name)
		}
		out, err = publicTarget(tx, name, t)
		return err
	})
	return out, err
}

// publicTarget is the Target of record t, named name. An etcd target's key
// is read in tx, at the state the record was read at: its live value and
// mod revision. A key that is absent (deleted outside the fence) has a nil
// Value and Revision 0.
func publicTarget(tx engine.Tx, name string, t *targetRecord) (Target, error) {
	out := Target{Name: name, Scope: t.Scope, Revision: t.Revision, Value: t.Value, Kind: t.kind(), Effect: t.Effect, UID: t.UID}
	if t.Object != nil {
		obj := *t.Object
		out.Object = &obj
	}
	if t.Kind != TargetEtcd {
		return out, nil
	}
	v, mod, err := liveKey(tx, t)
	if err != nil {
		return Target{}, err
	}
	out.Key, out.Writes, out.Value, out.Revision = t.Key, t.Revision, v, uint64(mod)
	return out, nil
}

// Receipt returns the receipt of an applied action, or ErrNotFound.
func (r *Receiver) Receipt(scope, action string) (Receipt, error) {
	var out Receipt
	err := r.view(func(tx engine.Tx) error {
		rc, err := appliedReceipt(tx, scope, action)
		if err != nil {
			return err
		}
		out = rc.public(scope, action)
		return nil
	})
	return out, err
}

// appliedReceipt returns the stored receipt of action in scope, or
// ErrNotFound if there is none.
func appliedReceipt(tx engine.Tx, scope, action string) (*receiptRecord, error) {
	rc, err := getReceipt(tx, scope, action)
	if err == nil && rc == nil {
		err = fmt.Errorf("%w: no receipt for action %q in scope %s", ErrNotFound, action, scope)
	}
	return rc, err
}

// Grant returns a grant by id, or ErrNotFound. Grants are kept after a hold
// as evidence; a stored grant is not an active one. Its AuditSeq is the seq
// of the activate entry that created it (0 for a grant activated by a
// version that did not record it).
func (r *Receiver) Grant(id string) (Grant, error) {
	var out Grant
	err := r.view(func(tx engine.Tx) error {
		g, err := getGrant(tx, id)
		if err != nil {
			return err
		}
		if g == nil {
			return fmt.Errorf("%w: no grant %q", ErrNotFound, id)
		}
		out = g.public()
		return nil
	})
	return out, err
}

// Event is one audit entry with its link hash.
type Event struct {
	// Entry is the decoded audit entry.
	audit.Entry
	// Hash is the entry's link hash: the Prev of the entry after it.
	Hash audit.Hash
}

// Events calls fn for each audit entry with seq >= since, in order, until fn
// returns false. It holds a read transaction while it runs.
func (r *Receiver) Events(since uint64, fn func(Event) bool) error {
	// A read transaction may run again (on etcd, after a compaction): it
	// goes on after the last entry handed to fn, which sees each once.
	var from []byte
	return r.view(func(tx engine.Tx) error {
		if from == nil {
			from = audit.SeqKey(since)
		}
		return tx.Scan(bucketAudit, from, func(k, v []byte) error {
			e, err := audit.DecodeEntry(v)
			if err != nil {
				return fmt.Errorf("%w: audit entry %x: %v", ErrBadFormat, k, err)
			}
			from = audit.SeqKey(e.Seq + 1)
			if !fn(Event{Entry: e, Hash: audit.HashEntry(v)}) {
				return engine.StopScan
			}
			return nil
		})
	})
}

// Head returns the audit chain's newest entry as of the last committed
// write of this handle.
func (r *Receiver) Head() audit.Head {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return r.head
}

func (c *controlRecord) public(scope string) ScopeStatus {
	st := ScopeStatus{Scope: scope, Epoch: c.Epoch, Mode: c.Mode, ActiveGrant: c.ActiveGrant,
		CreatedAt: fromNanos(c.CreatedAt), HoldRequestedAt: fromNanos(c.HoldRequestedAt),
		HoldCommittedAt: fromNanos(c.HoldCommittedAt), ActivatedAt: fromNanos(c.ActivatedAt),
		LastStaleRejectionAt: fromNanos(c.LastStaleRejectionAt), StaleRejections: c.StaleRejections,
		MaxGrantTTL: c.maxGrantTTL()}
	if len(c.Denials) > 0 {
		st.Denials = make(map[Reason]uint64, len(c.Denials))
		for k, v := range c.Denials {
			st.Denials[k] = v
		}
	}
	return st
}

// ReceiptsByClaim returns the receipts of scope whose grant carried the
// ledger claim ref claim, oldest first (by AuditSeq): the effects that a
// claim's worker applied, which a containment lists as outstanding. A scope
// that does not exist is ErrUnknownScope; one without such receipts gives
// none. It reads in one read transaction.
func (r *Receiver) ReceiptsByClaim(scope, claim string) ([]Receipt, error) {
	if err := checkName("scope", scope); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if err := checkName("claim", claim); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	var out []Receipt
	err := r.view(func(tx engine.Tx) error {
		out = out[:0] // the function may run more than once
		c, err := getControl(tx, scope)
		if err != nil {
			return err
		}
		if c == nil {
			return fmt.Errorf("%w: %s", ErrUnknownScope, scope)
		}
		// Scope names hold no zero byte, so the scope's receipts are
		// exactly the keys under this prefix.
		prefix := receiptKey(scope, "")
		claims := make(map[string]bool)
		return tx.Scan(bucketReceipts, prefix, func(k, v []byte) error {
			if !bytes.HasPrefix(k, prefix) {
				return engine.StopScan
			}
			rc, err := parseReceiptKey(k, v)
			if err != nil {
				return err
			}
			match, seen := claims[rc.Grant]
			if !seen {
				g, err := getGrant(tx, rc.Grant)
				if err != nil {
					return err
				}
				if g == nil {
					return fmt.Errorf("%w: receipt %q names grant %q, which the store does not hold", ErrBadFormat, k, rc.Grant)
				}
				match = g.Claim == claim && g.Scope == scope
				claims[rc.Grant] = match
			}
			if !match {
				return nil
			}
			out = append(out, rc.public(scope, string(k[len(prefix):])))
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Receipt) int { return cmp.Compare(a.AuditSeq, b.AuditSeq) })
	return out, nil
}

// public is the receipt's observable form.
func (rc *receiptRecord) public(scope, action string) Receipt {
	out := Receipt{Scope: scope, Action: action, Grant: rc.Grant, Target: rc.Target,
		RevBefore: rc.RevBefore, RevAfter: rc.RevAfter, AuditSeq: rc.AuditSeq, At: fromNanos(rc.At),
		Dispatch: rc.Dispatch, DispatchID: rc.DispatchID, Precondition: rc.Precondition, UID: rc.UID,
		Deadline: fromNanos(rc.Deadline), Version: rc.Version}
	copy(out.RequestSHA256[:], rc.RequestSHA256)
	return out
}
