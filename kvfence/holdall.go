package kvfence

import (
	"context"
	"fmt"
)

// HoldAllResult reports a committed HoldAll.
type HoldAllResult struct {
	// HoldResult lists the scopes this call held (each was open), with
	// their epochs before and after, and the seq of the last hold entry.
	// Its Scopes is empty when no scope was open.
	HoldResult
	// AlreadyHeld names, in order, the scopes that were held when the
	// transaction ran; they were left as they were.
	AlreadyHeld []string
}

// HoldAll holds every open scope of the receiver in one write transaction:
// the incident button. Each open scope's epoch advances and its grant is
// cleared as Hold does, with one audit entry per scope, and the whole set is
// anchored once. Because the scopes are chosen inside the transaction, a
// scope activated just before it is held too, and no submit can be decided
// between the hold of one scope and that of another. Scopes already held are
// reported in AlreadyHeld, not advanced: nothing is authorised in them, and
// an approver's pending compare-and-swap activation (ActivateRequest.Epoch)
// stays valid. A receiver without open scopes commits nothing. As with Hold,
// every open scope is held or, on any error, none is: an open scope at the
// largest epoch makes the whole call fail with ErrEpochExhausted. As with
// Hold, the result carries the anchored checkpoint and each held scope's
// signed acknowledgment.
func (a *Admin) HoldAll(ctx context.Context, reason string) (HoldAllResult, error) {
	requested := a.r.opts.Now()
	if err := a.checkActor(); err != nil {
		return HoldAllResult{}, err
	}
	if err := checkName("reason", reason); err != nil {
		return HoldAllResult{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if err := ctx.Err(); err != nil {
		return HoldAllResult{}, err
	}
	// The epochs of the scopes found held: a write decided before the
	// hold that held them may still be unsettled (an earlier HoldAll that
	// returned ErrHoldNotSettled), and this call finishes that wait.
	var already []HeldScope
	res, anchored, err := adminUpdateAnchored(a.r, len(reason), func(w *wtx) (HoldAllResult, error) {
		already = already[:0]
		res := HoldAllResult{HoldResult: HoldResult{HoldRequestedAt: requested.UTC(), HoldCommittedAt: w.now.UTC()}}
		// Scope names are collected first: a cursor must not walk a
		// bucket that the loop below writes to.
		var scopes []string
		if err := w.tx.Scan(bucketControl, nil, func(k, _ []byte) error {
			scopes = append(scopes, string(k))
			return nil
		}); err != nil {
			return HoldAllResult{}, err
		}
		// A known scope whose record was deleted would not be found, and
		// would stay open under a hold that reported success.
		if err := w.checkScan(0, len(scopes)); err != nil {
			return HoldAllResult{}, fmt.Errorf("%w; hold the scopes one by one", err)
		}
		for _, s := range scopes {
			c, err := w.control(s)
			if err != nil {
				return HoldAllResult{}, err
			}
			if c.Mode != ModeOpen {
				res.AlreadyHeld = append(res.AlreadyHeld, s)
				already = append(already, HeldScope{Scope: s, Epoch: c.Epoch})
				continue
			}
			if err := a.holdScope(w, &res.HoldResult, s, c, requested, reason, ""); err != nil {
				return HoldAllResult{}, err
			}
		}
		if len(res.Scopes) == 0 {
			res.AuditSeq = w.chain.Head().Seq
		}
		a.r.gate.holdAll(res.Scopes)
		return res, nil
	})
	if err != nil {
		return HoldAllResult{}, err
	}
	if anchored != nil {
		res.Checkpoint = *anchored
	}
	if res.Outstanding, err = a.r.settleBeforeAck(ctx, append(already, res.Scopes...)); err != nil {
		return HoldAllResult{}, err
	}
	if err := a.r.signHoldAcks(&res.HoldResult); err != nil {
		return HoldAllResult{}, err
	}
	return res, nil
}
