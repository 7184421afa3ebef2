package client

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kvfence/kvfence/internal/api"
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

// MaxAssignmentSize bounds the assignment file LoadAssignment reads: an
// envelope's request is at most kvfence.DefaultMaxEnvelopeSize, and its
// base64 and the other members take less than twice that.
const MaxAssignmentSize = 2*kvfence.DefaultMaxEnvelopeSize + 4096

// ErrAssignment means an assignment file is not a complete Assignment.
var ErrAssignment = errors.New("client: invalid assignment")

// LoadAssignment reads the Assignment JSON at path, as "kvfence activate
// --assignment-out" writes it. It is read strictly (a member unknown,
// given twice or in another case is refused) and every member must be
// present, so that a truncated or hand-edited file fails here rather than
// as a denial at the receiver.
func LoadAssignment(path string) (Assignment, error) {
	f, err := os.Open(path)
	if err != nil {
		return Assignment{}, fmt.Errorf("client: assignment file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxAssignmentSize+1))
	if err != nil {
		return Assignment{}, fmt.Errorf("client: assignment file %s: %w", path, err)
	}
	if len(b) > MaxAssignmentSize {
		return Assignment{}, fmt.Errorf("%w: %s is over %d bytes", ErrAssignment, path, MaxAssignmentSize)
	}
	a, err := DecodeAssignment(b)
	if err != nil {
		return Assignment{}, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// DecodeAssignment decodes Assignment JSON strictly and checks that every
// member is present (a zero epoch never matches: epochs start at 1).
func DecodeAssignment(b []byte) (Assignment, error) {
	var a Assignment
	if err := api.DecodeStrict(b, &a); err != nil {
		return Assignment{}, fmt.Errorf("%w: %w", ErrAssignment, err)
	}
	switch {
	case a.Scope == "":
		return Assignment{}, fmt.Errorf("%w: no scope", ErrAssignment)
	case a.Epoch == 0:
		return Assignment{}, fmt.Errorf("%w: no epoch", ErrAssignment)
	case a.Grant == "":
		return Assignment{}, fmt.Errorf("%w: no grant", ErrAssignment)
	case a.Executor == "":
		return Assignment{}, fmt.Errorf("%w: no executor", ErrAssignment)
	case a.Claim == "":
		return Assignment{}, fmt.Errorf("%w: no claim", ErrAssignment)
	case len(a.Request) == 0:
		return Assignment{}, fmt.Errorf("%w: no request_b64", ErrAssignment)
	}
	return a, nil
}
