package kvfence

import "fmt"

// As returns an administrative handle that records actor, the identity of
// the administrator making each change, in the audit entry of every change
// it makes (audit.Entry.Actor): scope and target creation, activation and
// hold. A serving boundary calls it once per request with the identity it
// authenticated on its channel, so that the chain says who held a scope,
// not only that it was held. Reads never write anything, so they record no
// actor. An empty actor records none, as Admin does.
//
// The actor is checked like every other identifier when a change is made;
// one that is not a valid identifier makes that change fail with
// ErrInvalidArgument.
func (a *Admin) As(actor string) *Admin {
	return &Admin{r: a.r, actor: actor}
}

// Actor returns the identity that this handle records on its changes, or
// "" if it records none.
func (a *Admin) Actor() string { return a.actor }

// checkActor validates the handle's actor before a change is queued.
func (a *Admin) checkActor() error {
	if a.actor == "" {
		return nil
	}
	if err := checkName("actor", a.actor); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return nil
}
