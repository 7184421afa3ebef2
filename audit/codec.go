package audit

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
)

// MaxEntrySize bounds the encoded size of one entry. EncodeEntry refuses to
// produce a larger entry, so that everything it writes DecodeEntry accepts.
const MaxEntrySize = 64 << 10

// decMode only parses; canonical form is then enforced by re-encoding with
// this package's own encoder and comparing bytes, so the decoder's options
// are a first filter, not the definition of canonical.
var decMode cbor.DecMode

func init() {
	var err error
	decMode, err = cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
		UTF8:              cbor.UTF8RejectInvalid,
		MaxNestedLevels:   4,
		MaxArrayElements:  16,
		MaxMapPairs:       32,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// Entry map keys, each with its CBOR text-string head, in canonical order:
// shorter keys first, then bytewise (RFC 8949 §4.2.1).
const (
	keyAt            = "\x62at"
	keySeq           = "\x63seq"
	keyKind          = "\x64kind"
	keyNote          = "\x64note"
	keyPrev          = "\x64prev"
	keyActor         = "\x65actor"
	keyEpoch         = "\x65epoch"
	keyGrant         = "\x65grant"
	keyScope         = "\x65scope"
	keyAction        = "\x66action"
	keyReason        = "\x66reason"
	keyTarget        = "\x66target"
	keyOutcome       = "\x67outcome"
	keyDecision      = "\x68decision"
	keyExecutor      = "\x68executor"
	keyRevAfter      = "\x69rev_after"
	keyRevBefore     = "\x6arev_before"
	keyValueSHA256   = "\x6cvalue_sha256"
	keyRequestSHA256 = "\x6erequest_sha256"
	keyBaseSeq       = "\x68base_seq"
	keyBaseHash      = "\x69base_hash"
	keyBaseFence     = "\x6abase_fence"
)

// EncodeEntry returns the canonical CBOR encoding of e.
func EncodeEntry(e *Entry) ([]byte, error) {
	n, err := checkEntry(e)
	if err != nil {
		return nil, err
	}
	return appendEntry(make([]byte, 0, n), e), nil
}

// checkEntry enforces the field rules that the CBOR types alone do not, so
// that an entry that encodes is one that decodes. It returns the size of
// the encoding, so that the caller allocates exactly once.
func checkEntry(e *Entry) (int, error) {
	switch {
	case e.Seq == 0:
		return 0, fmt.Errorf("%w: seq is 0", ErrBadEntry)
	case e.Kind == "":
		return 0, fmt.Errorf("%w: kind is empty", ErrBadEntry)
	case len(e.Prev) != HashSize:
		return 0, fmt.Errorf("%w: prev is %d bytes, want %d", ErrBadEntry, len(e.Prev), HashSize)
	case len(e.RequestSHA256) != 0 && len(e.RequestSHA256) != HashSize:
		return 0, fmt.Errorf("%w: request_sha256 is %d bytes, want %d", ErrBadEntry, len(e.RequestSHA256), HashSize)
	case len(e.ValueSHA256) != 0 && len(e.ValueSHA256) != HashSize:
		return 0, fmt.Errorf("%w: value_sha256 is %d bytes, want %d", ErrBadEntry, len(e.ValueSHA256), HashSize)
	case len(e.BaseHash) != 0 && len(e.BaseHash) != HashSize:
		return 0, fmt.Errorf("%w: base_hash is %d bytes, want %d", ErrBadEntry, len(e.BaseHash), HashSize)
	case len(e.BaseFence) != 0 && len(e.BaseFence) != HashSize:
		return 0, fmt.Errorf("%w: base_fence is %d bytes, want %d", ErrBadEntry, len(e.BaseFence), HashSize)
	}
	for i, s := range [...]string{e.Kind, e.Scope, e.Grant, e.Executor, e.Action, e.Outcome,
		e.Reason, e.Target, e.Decision, e.Note, e.Actor} {
		if !utf8.ValidString(s) {
			return 0, fmt.Errorf("%w: %s is not valid UTF-8", ErrBadEntry, textFields[i])
		}
	}
	n := entrySize(e)
	if n > MaxEntrySize {
		return 0, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrBadEntry, n, MaxEntrySize)
	}
	return n, nil
}

// entrySize is the length of appendEntry's output, field by field.
func entrySize(e *Entry) int {
	at := uint64(e.At)
	if e.At < 0 {
		at = ^at
	}
	return 1 + len(keyAt) + headSize(at) + len(keySeq) + headSize(e.Seq) +
		optSize(keyKind, len(e.Kind)) + optSize(keyNote, len(e.Note)) + optSize(keyPrev, len(e.Prev)) +
		optSize(keyActor, len(e.Actor)) +
		optUintSize(keyEpoch, e.Epoch) + optSize(keyGrant, len(e.Grant)) + optSize(keyScope, len(e.Scope)) +
		optSize(keyAction, len(e.Action)) + optSize(keyReason, len(e.Reason)) + optSize(keyTarget, len(e.Target)) +
		optSize(keyOutcome, len(e.Outcome)) + optSize(keyDecision, len(e.Decision)) +
		optSize(keyExecutor, len(e.Executor)) + optUintSize(keyRevAfter, e.RevAfter) +
		optUintSize(keyRevBefore, e.RevBefore) + optSize(keyValueSHA256, len(e.ValueSHA256)) +
		optSize(keyRequestSHA256, len(e.RequestSHA256)) +
		optUintSize(keyBaseSeq, e.BaseSeq) + optSize(keyBaseHash, len(e.BaseHash)) + optSize(keyBaseFence, len(e.BaseFence))
}

// optSize is the size of a text or byte string field of length n, or 0 if
// the field is left out.
func optSize(key string, n int) int {
	if n == 0 {
		return 0
	}
	return len(key) + headSize(uint64(n)) + n
}

func optUintSize(key string, v uint64) int {
	if v == 0 {
		return 0
	}
	return len(key) + headSize(v)
}

var textFields = [...]string{"kind", "scope", "grant", "executor", "action", "outcome",
	"reason", "target", "decision", "note", "actor"}

// appendEntry writes the fields in canonical key order; zero optional fields
// are left out, which is what makes the encoding of an Entry unique.
func appendEntry(b []byte, e *Entry) []byte {
	n := uint64(4)
	for _, s := range [...]string{e.Note, e.Actor, e.Grant, e.Scope, e.Action, e.Reason, e.Target,
		e.Outcome, e.Decision, e.Executor} {
		if s != "" {
			n++
		}
	}
	for _, v := range [...]uint64{e.Epoch, e.RevAfter, e.RevBefore,
		uint64(len(e.ValueSHA256)), uint64(len(e.RequestSHA256)),
		e.BaseSeq, uint64(len(e.BaseHash)), uint64(len(e.BaseFence))} {
		if v != 0 {
			n++
		}
	}
	b = appendHead(b, majorMap, n)
	b = appendInt(append(b, keyAt...), e.At)
	b = appendHead(append(b, keySeq...), majorUint, e.Seq)
	b = appendText(append(b, keyKind...), e.Kind)
	b = optText(b, keyNote, e.Note)
	b = appendBytes(append(b, keyPrev...), e.Prev)
	b = optText(b, keyActor, e.Actor)
	b = optUint(b, keyEpoch, e.Epoch)
	b = optText(b, keyGrant, e.Grant)
	b = optText(b, keyScope, e.Scope)
	b = optText(b, keyAction, e.Action)
	b = optText(b, keyReason, e.Reason)
	b = optText(b, keyTarget, e.Target)
	b = optText(b, keyOutcome, e.Outcome)
	b = optUint(b, keyBaseSeq, e.BaseSeq)
	b = optText(b, keyDecision, e.Decision)
	b = optText(b, keyExecutor, e.Executor)
	b = optBytes(b, keyBaseHash, e.BaseHash)
	b = optUint(b, keyRevAfter, e.RevAfter)
	b = optBytes(b, keyBaseFence, e.BaseFence)
	b = optUint(b, keyRevBefore, e.RevBefore)
	b = optBytes(b, keyValueSHA256, e.ValueSHA256)
	return optBytes(b, keyRequestSHA256, e.RequestSHA256)
}

func optText(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return appendText(append(b, key...), v)
}

func optUint(b []byte, key string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendHead(append(b, key...), majorUint, v)
}

func optBytes(b []byte, key string, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return appendBytes(append(b, key...), v)
}

// DecodeEntry decodes raw strictly: it must be the canonical encoding of an
// Entry with no unknown, duplicate or missing required fields.
func DecodeEntry(raw []byte) (Entry, error) {
	var e Entry
	if err := decodeEntryInto(raw, &e, nil); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// decodeEntryInto decodes raw into *e and checks its canonical form by
// re-encoding into scratch, which a streaming caller reuses across entries.
// It returns the grown scratch buffer through *scratch when it is non-nil.
func decodeEntryInto(raw []byte, e *Entry, scratch *[]byte) error {
	if len(raw) > MaxEntrySize {
		return fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrBadEntry, len(raw), MaxEntrySize)
	}
	*e = Entry{} // the decoder leaves fields that raw lacks untouched
	if err := decMode.Unmarshal(raw, e); err != nil {
		return fmt.Errorf("%w: %w", ErrBadEntry, err)
	}
	if _, err := checkEntry(e); err != nil {
		return err
	}
	var buf []byte
	if scratch != nil {
		buf = (*scratch)[:0]
	}
	buf = appendEntry(buf, e)
	if scratch != nil {
		*scratch = buf
	}
	if !bytes.Equal(buf, raw) {
		return fmt.Errorf("%w: not in canonical form", ErrBadEntry)
	}
	return nil
}

// Chain appends entries to a hash chain. It holds only the head; the caller
// stores the encoded entries. A Chain is not safe for concurrent use.
type Chain struct {
	head Head
}

// NewChain returns a chain whose newest entry is head (the zero Head for an
// empty chain).
func NewChain(head Head) *Chain { return &Chain{head: head} }

// Head returns the newest entry's position.
func (c *Chain) Head() Head { return c.head }

// Append sets e.Seq and e.Prev to continue the chain, encodes e and advances
// the head. It returns the encoded entry and its hash. On error the head
// does not move.
//
// The returned bytes are freshly allocated, so they may be handed to a
// store that keeps them (bbolt's Put does until commit). e.Prev is set to a
// copy of the previous hash that shares that allocation, one per entry.
func (c *Chain) Append(e *Entry) ([]byte, Hash, error) {
	if c.head.Seq == ^uint64(0) {
		return nil, Hash{}, fmt.Errorf("%w: seq would overflow", ErrBadEntry)
	}
	e.Seq = c.head.Seq + 1
	e.Prev = c.head.Hash[:]
	n, err := checkEntry(e)
	if err != nil {
		e.Prev = nil
		return nil, Hash{}, err
	}
	buf := appendEntry(make([]byte, 0, n+HashSize), e)
	raw := buf[:n:n]
	e.Prev = append(buf[n:], c.head.Hash[:]...)
	h := HashEntry(raw)
	c.head = Head{Seq: e.Seq, Hash: h}
	return raw, h, nil
}
