package kvfence

import (
	"fmt"

	"github.com/kvfence/kvfence/engine"
)

// submitCheckedBefore is Submit for the defect.Variant
// CheckOutsideTransaction, which only this package's tests and the lab
// build can open: it checks the fence (checks 2-4) in a read transaction,
// then queues the decision like any Submit. With SkipAuthority the write
// transaction trusts the earlier check, so a hold that commits in between
// does not stop the superseded grant: the check-then-act race that
// deciding in one transaction rules out.
func (r *Receiver) submitCheckedBefore(s *submission, size int) (Result, error) {
	var reason Reason
	var detail string
	if s.env != nil && s.req != nil {
		err := r.view(func(tx engine.Tx) error {
			ctl, err := getControl(tx, s.env.Scope)
			switch {
			case err != nil || ctl == nil:
				return err
			case ctl.Mode != ModeOpen:
				reason, detail = ReasonReceiverHeld, fmt.Sprintf("scope is held at epoch %d", ctl.Epoch)
			case s.env.Epoch != ctl.Epoch:
				reason, detail = ReasonStaleEpoch, fmt.Sprintf("envelope epoch %d, scope epoch %d", s.env.Epoch, ctl.Epoch)
			case s.env.Grant != ctl.ActiveGrant:
				reason, detail = ReasonInactiveGrant, "the grant is not the scope's active grant"
			}
			return nil
		})
		if err != nil {
			return Result{}, err
		}
	}
	if reason == "" {
		res, err := submitCall(r, size, func(w *wtx) (Result, error) { return r.decide(w, s) })
		if err != nil {
			return Result{}, err
		}
		return s.committed(res), nil
	}
	return submitCall(r, size, func(w *wtx) (Result, error) {
		s.grant, s.target, s.scope = nil, false, false
		ctl, err := w.control(s.env.Scope)
		if err != nil || ctl == nil {
			return Result{}, fmt.Errorf("kvfence: internal error: scope %s vanished after its check: %v", s.env.Scope, err)
		}
		return w.denyStale(ctl, s, reason, detail)
	})
}
