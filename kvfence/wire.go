package kvfence

import (
	"bytes"
	"crypto/sha256"
	"fmt"

	"github.com/fxamacker/cbor/v2"
	"github.com/kvfence/kvfence/internal/ident"
)

// WireVersion is the only envelope and request version this package speaks.
const WireVersion = 1

// DefaultMaxEnvelopeSize is the size limit for an envelope, and for the
// request it carries, when Options.MaxEnvelopeSize is zero.
const DefaultMaxEnvelopeSize = 64 << 10

// MaxTargetValueSize bounds a target's value, whether set, patched or
// created.
const MaxTargetValueSize = 1 << 20

// Envelope is what a worker submits: the authority it claims to hold and the
// exact approved request bytes. The caller's identity is never taken from
// the envelope; Submit compares Executor with the authenticated caller.
type Envelope struct {
	// V is the wire version; it must be WireVersion.
	V uint64 `cbor:"v"`
	// Scope names the protected scope the request is for.
	Scope string `cbor:"scope"`
	// Epoch is the scope epoch the grant was minted at; it must equal the
	// scope's current epoch (check 3).
	Epoch uint64 `cbor:"epoch"`
	// Grant is the id of the grant the worker was given (check 4).
	Grant string `cbor:"grant"`
	// Executor is the identity the worker claims to be; it must equal both
	// the authenticated caller and the grant's executor (check 6).
	Executor string `cbor:"executor"`
	// Claim is the ledger claim ref the grant binds (check 7).
	Claim string `cbor:"claim"`
	// Request is the exact approved request bytes, hashed as carried and
	// never re-encoded (check 8).
	Request []byte `cbor:"request"`
}

// Request is the approved change: the logical action, the target, its
// preconditions and exactly one mutation (Set or Patch).
type Request struct {
	// V is the wire version; it must be WireVersion.
	V uint64 `cbor:"v"`
	// Action is the logical action id: a scope applies it at most once.
	Action string `cbor:"action"`
	// Target is the target the request changes.
	Target string `cbor:"target"`
	// ExpectRevision, if set, is the revision the target must be at; nil
	// means no such precondition.
	ExpectRevision *uint64 `cbor:"expect_revision,omitempty"`
	// ExpectValue, if set, is the exact value the target must hold; nil means
	// no such precondition.
	ExpectValue *[]byte `cbor:"expect_value,omitempty"`
	// Set, if set, is the target's new value. A request has exactly one of
	// Set and Patch.
	Set *[]byte `cbor:"set,omitempty"`
	// Patch, if not empty, is an RFC 6902 JSON Patch to apply to the target's
	// JSON value (see Patches in the package documentation).
	Patch []byte `cbor:"patch,omitempty"`

	// patch is Patch parsed by check, so Submit does not parse it twice.
	patch []patchOp
}

var (
	wireEnc cbor.EncMode
	wireDec cbor.DecMode
)

func init() {
	var err error
	// Core deterministic encoding (RFC 8949 §4.2.1): shortest integers,
	// definite lengths, map keys sorted bytewise.
	wireEnc, err = cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	wireDec, err = cbor.DecOptions{
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

// EncodeEnvelope returns the canonical encoding of e after checking its
// fields. The request bytes are carried unchanged.
func EncodeEnvelope(e *Envelope) ([]byte, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return encodeCanonical(e)
}

// EncodeRequest returns the canonical encoding of r after checking its
// fields. These are the bytes an approver reviews and a grant binds.
func EncodeRequest(r *Request) ([]byte, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	return encodeCanonical(r)
}

// DecodeEnvelope decodes b strictly: it must be the canonical encoding of an
// envelope no larger than limit bytes (DefaultMaxEnvelopeSize if limit <= 0),
// with every field present and no other. Errors wrap ErrMalformedEnvelope.
func DecodeEnvelope(b []byte, limit int) (*Envelope, error) {
	var e Envelope
	if err := decodeCanonical(b, limit, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedEnvelope, err)
	}
	if err := e.check(); err != nil {
		return nil, err
	}
	return &e, nil
}

// DecodeRequest decodes b strictly, as DecodeEnvelope does, into a request.
// Errors wrap ErrMalformedRequest.
func DecodeRequest(b []byte, limit int) (*Request, error) {
	var r Request
	if err := decodeCanonical(b, limit, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedRequest, err)
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return &r, nil
}

// RequestDigest returns the SHA-256 of the exact request bytes, the value a
// grant binds.
func RequestDigest(request []byte) [32]byte { return sha256.Sum256(request) }

// decodeCanonical decodes into v and then requires that re-encoding v gives
// back exactly b. That one comparison rejects non-shortest integers, unsorted
// keys, missing required fields, and explicitly encoded empty optionals;
// the decoder options reject the rest (duplicates, unknown keys, indefinite
// lengths, tags, trailing bytes, floats by type mismatch).
func decodeCanonical(b []byte, limit int, v any) error {
	if limit <= 0 {
		limit = DefaultMaxEnvelopeSize
	}
	if len(b) == 0 {
		return fmt.Errorf("empty input")
	}
	if len(b) > limit {
		return fmt.Errorf("%d bytes exceeds the %d-byte limit", len(b), limit)
	}
	if b[0]&0xe0 != 0xa0 {
		return fmt.Errorf("not a CBOR map")
	}
	// The fast path accepts only an input that is the canonical encoding
	// of the value it returns, which the reflection path below accepts
	// with the same value; all else, every refusal included, is decided
	// there.
	if decodeWireFast(b, v) {
		return nil
	}
	return decodeCanonicalReflect(b, v)
}

// decodeCanonicalReflect is decodeCanonical's reflection path, after the
// size and type checks.
func decodeCanonicalReflect(b []byte, v any) error {
	if err := wireDec.Unmarshal(b, v); err != nil {
		return err
	}
	again, err := wireEnc.Marshal(v)
	if err != nil {
		return err
	}
	if !bytes.Equal(again, b) {
		return fmt.Errorf("not in canonical form (a required field is missing, an integer or length is not shortest, keys are out of order, or an optional field is encoded empty)")
	}
	return nil
}

func (e *Envelope) check() error {
	if e.V != WireVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrMalformedEnvelope, e.V, WireVersion)
	}
	for _, f := range []struct{ name, val string }{
		{"scope", e.Scope}, {"grant", e.Grant}, {"executor", e.Executor}, {"claim", e.Claim},
	} {
		if err := checkName(f.name, f.val); err != nil {
			return fmt.Errorf("%w: %v", ErrMalformedEnvelope, err)
		}
	}
	if len(e.Request) == 0 {
		return fmt.Errorf("%w: request is empty", ErrMalformedEnvelope)
	}
	return nil
}

func (r *Request) check() error {
	if r.V != WireVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrMalformedRequest, r.V, WireVersion)
	}
	if err := checkName("action", r.Action); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedRequest, err)
	}
	if err := checkName("target", r.Target); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedRequest, err)
	}
	switch {
	case r.Set != nil && r.Patch != nil:
		return fmt.Errorf("%w: set and patch are mutually exclusive", ErrMalformedRequest)
	case r.Set == nil && r.Patch == nil:
		return fmt.Errorf("%w: one of set or patch is required", ErrMalformedRequest)
	case r.Patch != nil:
		// Every path to a grant or a mutation decodes the request here
		// (EncodeRequest, Activate and Submit through DecodeRequest), so
		// no patch the validator refuses is approved or applied.
		p, err := parsePatch(r.Patch)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrMalformedRequest, err)
		}
		r.patch = p
	}
	if r.ExpectRevision != nil && *r.ExpectRevision == 0 {
		return fmt.Errorf("%w: expect_revision 0 never matches (revisions start at 1)", ErrMalformedRequest)
	}
	return nil
}

// checkName enforces the rules shared by every identifier on the wire and in
// the administrative API (package ident).
func checkName(field, s string) error { return ident.Check(field, s) }
