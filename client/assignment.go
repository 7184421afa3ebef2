package client

import (
	"crypto/sha256"
	"fmt"

	"github.com/kvfence/kvfence/kvfence"
)

// Assignment is what a worker is handed when a grant is activated for it:
// everything its envelope must carry, so that it never copies the five
// values by hand. It is JSON-serialisable, so that an operator can pass it
// to a worker as a file; the request is then in "request_b64".
//
// An assignment is not authority. The receiver decides each envelope by
// its current state: after a hold, the same assignment is denied.
type Assignment struct {
	// Scope is the scope the grant opens.
	Scope string `json:"scope"`
	// Epoch is the scope epoch the grant was minted at.
	Epoch uint64 `json:"epoch"`
	// Grant is the grant's id.
	Grant string `json:"grant"`
	// Executor is the identity the grant names, which the worker's
	// certificate must carry.
	Executor string `json:"executor"`
	// Claim is the ledger claim ref the grant binds.
	Claim string `json:"claim"`
	// Request is the exact approved request bytes the grant binds.
	Request []byte `json:"request_b64"`
}

// NewAssignment returns the assignment for grant g and the request bytes it
// binds, refusing bytes that are not the ones the grant binds: a worker
// handed them would only ever be denied request_mismatch.
func NewAssignment(g kvfence.Grant, request []byte) (Assignment, error) {
	if sha256.Sum256(request) != g.RequestSHA256 {
		return Assignment{}, fmt.Errorf("%w: the request bytes are not the ones grant %s binds", kvfence.ErrInvalidArgument, g.ID)
	}
	return Activation{Grant: g, Request: request}.Assignment(), nil
}

// Envelope returns the canonical envelope of the assignment (docs/design.md §5),
// the bytes a worker submits.
func (a Assignment) Envelope() ([]byte, error) {
	return kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: a.Scope, Epoch: a.Epoch,
		Grant: a.Grant, Executor: a.Executor, Claim: a.Claim, Request: a.Request})
}
