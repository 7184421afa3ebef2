// Package reqwire reads the action that an approved request names, from
// the request's exact bytes, for the execution ledger: the ledger must
// check an approval against the request it binds, and it must not import
// the receiver package (a claim never reaches a receiver grant).
//
// The request's wire form is the receiver's (package kvfence, Request):
// canonical CBOR, text keys, core deterministic encoding. Action decodes it
// as strictly as the receiver does, with the same decoder options and the
// same re-encoding comparison, so that bytes which the receiver would read
// as one action are never read here as another; its tests hold the two
// decoders to the same answers. It does not judge a JSON Patch: the
// receiver refuses a bad one before any grant binds it.
package reqwire

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/fxamacker/cbor/v2"
	"github.com/kvfence/kvfence/internal/ident"
)

// Version is the only request version the receiver speaks.
const Version = 1

// MaxSize bounds the request bytes Action reads. It is above any envelope
// size a receiver is configured with in practice, and it keeps a hostile
// file from costing more than a few megabytes.
const MaxSize = 4 << 20

// ErrMalformed means the bytes are not the canonical encoding of a request.
var ErrMalformed = errors.New("not a well-formed kvfence request")

// request mirrors kvfence.Request field for field, with the same keys.
type request struct {
	// V is the wire version.
	V uint64 `cbor:"v"`
	// Action is the logical action the request names.
	Action string `cbor:"action"`
	// Target is the target it changes.
	Target string `cbor:"target"`
	// ExpectRevision is the revision precondition, if any.
	ExpectRevision *uint64 `cbor:"expect_revision,omitempty"`
	// ExpectValue is the value precondition, if any.
	ExpectValue *[]byte `cbor:"expect_value,omitempty"`
	// Set is the new value, for a set request.
	Set *[]byte `cbor:"set,omitempty"`
	// Patch is the JSON Patch, for a patch request, carried unjudged.
	Patch []byte `cbor:"patch,omitempty"`
}

var (
	enc cbor.EncMode
	dec cbor.DecMode
)

func init() {
	var err error
	if enc, err = cbor.CoreDetEncOptions().EncMode(); err != nil {
		panic(err)
	}
	// The receiver's options (kvfence/wire.go): duplicates, unknown keys,
	// indefinite lengths and tags are refused.
	dec, err = cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
		MaxNestedLevels:   4,
		MaxArrayElements:  16,
		MaxMapPairs:       16,
		UTF8:              cbor.UTF8RejectInvalid,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// Action returns the action named by the request encoded in b. Errors wrap
// ErrMalformed and say what is wrong.
func Action(b []byte) (string, error) {
	switch {
	case len(b) == 0:
		return "", fmt.Errorf("%w: empty input", ErrMalformed)
	case len(b) > MaxSize:
		return "", fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrMalformed, len(b), MaxSize)
	case b[0]&0xe0 != 0xa0:
		return "", fmt.Errorf("%w: not a CBOR map", ErrMalformed)
	}
	var r request
	if err := dec.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	again, err := enc.Marshal(&r)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !bytes.Equal(again, b) {
		return "", fmt.Errorf("%w: not in canonical form (a required field is missing, an integer or length is not shortest, "+
			"keys are out of order, or an optional field is encoded empty)", ErrMalformed)
	}
	switch {
	case r.V != Version:
		return "", fmt.Errorf("%w: version %d, want %d", ErrMalformed, r.V, Version)
	case (r.Set == nil) == (r.Patch == nil):
		return "", fmt.Errorf("%w: exactly one of set or patch is required", ErrMalformed)
	case r.ExpectRevision != nil && *r.ExpectRevision == 0:
		return "", fmt.Errorf("%w: expect_revision 0 never matches", ErrMalformed)
	}
	for _, f := range [][2]string{{"action", r.Action}, {"target", r.Target}} {
		if err := ident.Check(f[0], f[1]); err != nil {
			return "", fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	return r.Action, nil
}
