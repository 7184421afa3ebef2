// Package receiptproof is the offline proof of a receipt: the receipt, the
// stored bytes of the audit entry that records its decision, the
// receiver's signed checkpoint note, and the RFC 6962 inclusion proof of
// the entry in the note's tree. Parse reads the one JSON form that
// `kvfence observe receipt --proof --json` writes; Verify checks it with
// nothing but the receiver's public key (docs/design.md §7).
package receiptproof

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/api"
)

// Errors of this package. Verify's errors wrap ErrUnproven and one of the
// three that say which part failed.
var (
	// ErrMalformed means the proof file is not in the one form Parse
	// accepts.
	ErrMalformed = errors.New("receipt proof malformed")
	// ErrUnproven means the proof does not prove the receipt.
	ErrUnproven = errors.New("receipt not proven")
	// ErrBadCheckpoint means the checkpoint note is not signed by the
	// given receiver key, or its origin or extension lines are not a
	// receiver's.
	ErrBadCheckpoint = errors.New("the checkpoint note does not verify with the receiver key")
	// ErrBadProof means the inclusion proof does not lead from the
	// entry's leaf hash to the note's root.
	ErrBadProof = errors.New("the inclusion proof does not verify")
	// ErrNotWitnessed means the checkpoint note does not carry valid
	// cosignatures by the quorum of witnesses VerifyWith was given (or the
	// quorum asked for is not one).
	ErrNotWitnessed = errors.New("the checkpoint note is not cosigned by the quorum of witnesses")
	// ErrNotTheDecision means the proven entry is not the applied
	// decision the receipt describes.
	ErrNotTheDecision = errors.New("the audit entry is not the receipt's decision")
)

// MaxSize bounds a proof file in bytes: a receipt, an entry of at most
// audit.MaxEntrySize, a note and 63 hashes fit many times over.
const MaxSize = 1 << 20

// maxProofHashes bounds the inclusion proof: a tree of at most 2^63
// leaves needs at most 63 hashes.
const maxProofHashes = 63

// Proof is a receipt with what proves it offline.
type Proof struct {
	// Receipt is the receipt as observe receipt --json prints it.
	Receipt api.Receipt
	// Entry is the stored bytes of the audit entry at Receipt.AuditSeq.
	Entry []byte
	// Checkpoint is the receiver's signed checkpoint note.
	Checkpoint []byte
	// Inclusion is the proof of leaf AuditSeq-1 in the note's tree.
	Inclusion tlog.RecordProof
}

// proofJSON is the JSON form of a Proof (docs/design.md §9).
type proofJSON struct {
	Receipt    *api.Receipt `json:"receipt"`
	EntryB64   *string      `json:"entry_b64"`
	Checkpoint *string      `json:"checkpoint"`
	Inclusion  []string     `json:"inclusion_b64"`
}

// MarshalJSON returns the JSON form of p, as Marshal does, so that a Proof
// can be part of a larger JSON value.
func (p Proof) MarshalJSON() ([]byte, error) { return p.Marshal() }

// UnmarshalJSON reads the JSON form of p as Parse does.
func (p *Proof) UnmarshalJSON(b []byte) error {
	q, err := Parse(b)
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// Marshal returns the JSON form of p, one object and a newline.
func (p Proof) Marshal() ([]byte, error) {
	e := base64.StdEncoding.EncodeToString(p.Entry)
	c := string(p.Checkpoint)
	inc := make([]string, len(p.Inclusion))
	for i, h := range p.Inclusion {
		inc[i] = base64.StdEncoding.EncodeToString(h[:])
	}
	b, err := json.MarshalIndent(proofJSON{Receipt: &p.Receipt, EntryB64: &e, Checkpoint: &c, Inclusion: inc}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Parse reads the JSON form of a proof: one object with exactly the keys
// receipt, entry_b64, checkpoint and inclusion_b64 (the receipt's own keys
// as observe receipt writes them), standard base64 with padding, hashes of
// 32 bytes, nothing after the object. Anything else is ErrMalformed.
func Parse(data []byte) (Proof, error) {
	var p Proof
	if len(data) > MaxSize {
		return p, fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrMalformed, len(data), MaxSize)
	}
	// Strict: a key twice or in another case would let Verify vouch for
	// one spelling while a reader of the file sees another.
	var j proofJSON
	if err := api.DecodeStrict(data, &j); err != nil {
		return p, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if j.Receipt == nil || j.EntryB64 == nil || j.Checkpoint == nil || j.Inclusion == nil {
		return p, fmt.Errorf("%w: receipt, entry_b64, checkpoint and inclusion_b64 are all required", ErrMalformed)
	}
	p.Receipt = *j.Receipt
	entry, err := base64.StdEncoding.Strict().DecodeString(*j.EntryB64)
	if err != nil || len(entry) == 0 {
		return p, fmt.Errorf("%w: entry_b64 is not non-empty standard base64", ErrMalformed)
	}
	p.Entry = entry
	if len(*j.Checkpoint) > checkpoint.MaxNoteSize {
		return p, fmt.Errorf("%w: checkpoint over %d bytes", ErrMalformed, checkpoint.MaxNoteSize)
	}
	p.Checkpoint = []byte(*j.Checkpoint)
	if len(j.Inclusion) > maxProofHashes {
		return p, fmt.Errorf("%w: %d inclusion hashes, at most %d", ErrMalformed, len(j.Inclusion), maxProofHashes)
	}
	p.Inclusion = make(tlog.RecordProof, len(j.Inclusion))
	for i, s := range j.Inclusion {
		h, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil || len(h) != tlog.HashSize {
			return p, fmt.Errorf("%w: inclusion hash %d is not %d bytes in standard base64", ErrMalformed, i+1, tlog.HashSize)
		}
		copy(p.Inclusion[i][:], h)
	}
	return p, nil
}

// Verified is what a proof proved.
type Verified struct {
	// Checkpoint is the note's checkpoint, signed by the receiver key.
	Checkpoint checkpoint.Checkpoint
	// Receiver is the receiver id the note's origin names.
	Receiver string
	// State is the note's receiver extension lines.
	State checkpoint.ReceiverState
	// Entry is the proven audit entry.
	Entry audit.Entry
	// Witnesses are the names of the witnesses whose cosignatures
	// VerifyWith verified, in the order given; nil from Verify.
	Witnesses []string
}

// Verify checks p against the receiver's public key pub: the note is a
// receiver's checkpoint whose origin names pub and which pub signed; the
// entry's leaf hash is leaf AuditSeq-1 of the note's tree by the inclusion
// proof; and the entry is the applied submit decision the receipt
// describes: every field of the receipt is checked against the entry
// (seq, scope, action, grant, request hash, target, revisions before and
// after, and at, spelled as the receiver spells it), and a receipt with
// dispatch fields, which no applied submit entry records, is refused; so
// a receipt that verifies is, field for field, the decision the receiver
// recorded. Its errors wrap ErrUnproven and one of ErrBadCheckpoint,
// ErrBadProof or ErrNotTheDecision.
func Verify(p Proof, pub ed25519.PublicKey) (Verified, error) {
	return VerifyWith(p, pub, VerifyOptions{})
}

// VerifyOptions are what VerifyWith checks beyond Verify.
type VerifyOptions struct {
	// Receiver, if not empty, is the id of the receiver the verifier
	// expects the receipt from: the note's origin must name it. Without
	// it a receipt of any receiver that signs with the same key passes,
	// since the key is all Verify is given.
	Receiver string
	// Witnesses are the cosignature verifiers of the witnesses the
	// verifier trusts, each a distinct key.
	Witnesses []*checkpoint.CosignatureVerifier
	// Quorum is how many of Witnesses must have cosigned the note: 0 when
	// Witnesses is empty, else 1 <= Quorum <= len(Witnesses).
	Quorum int
}

// VerifyWith is Verify that also requires the note to carry valid
// cosignatures by opts.Quorum of opts.Witnesses (a receipt proven to a
// note the witnesses cosigned: the receiver cannot have shown them
// another tree of that size). Too few is ErrNotWitnessed; a line by one
// of them that does not verify is ErrBadCheckpoint.
func VerifyWith(p Proof, pub ed25519.PublicKey, opts VerifyOptions) (Verified, error) {
	v, err := verify(p, pub)
	if err != nil {
		return v, err
	}
	fail := func(which error, format string, args ...any) (Verified, error) {
		return Verified{}, fmt.Errorf("%w: %w: %s", ErrUnproven, which, fmt.Sprintf(format, args...))
	}
	if opts.Receiver != "" && opts.Receiver != v.Receiver {
		return fail(ErrBadCheckpoint, "the checkpoint is receiver %q's, not %q's", v.Receiver, opts.Receiver)
	}
	if len(opts.Witnesses) == 0 && opts.Quorum == 0 {
		return v, nil
	}
	if opts.Quorum < 1 || opts.Quorum > len(opts.Witnesses) {
		return fail(ErrNotWitnessed, "a quorum of %d of %d witnesses", opts.Quorum, len(opts.Witnesses))
	}
	var got []string
	for i, w := range opts.Witnesses {
		for _, o := range opts.Witnesses[:i] {
			if o.PublicKey().Equal(w.PublicKey()) {
				return fail(ErrNotWitnessed, "witnesses %s and %s have the same key", o.Name(), w.Name())
			}
		}
		_, err := note.Open(p.Checkpoint, note.VerifierList(w))
		var unverified *note.UnverifiedNoteError
		switch {
		case err == nil:
			got = append(got, w.Name())
		case errors.As(err, &unverified):
		default:
			return fail(ErrBadCheckpoint, "witness %s: %v", w.Name(), err)
		}
	}
	if len(got) < opts.Quorum {
		return fail(ErrNotWitnessed, "the checkpoint is cosigned by %d of the %d witnesses needed (%s)",
			len(got), opts.Quorum, strings.Join(got, ", "))
	}
	v.Witnesses = got
	return v, nil
}

func verify(p Proof, pub ed25519.PublicKey) (Verified, error) {
	var v Verified
	fail := func(which error, format string, args ...any) (Verified, error) {
		return v, fmt.Errorf("%w: %w: %s", ErrUnproven, which, fmt.Sprintf(format, args...))
	}
	if len(pub) != ed25519.PublicKeySize {
		return fail(ErrBadCheckpoint, "the receiver key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	origin, _, _ := strings.Cut(string(p.Checkpoint), "\n")
	id, err := checkpoint.ReceiverID(origin, pub)
	if err != nil {
		return fail(ErrBadCheckpoint, "origin %q is not a receiver origin naming this key: %v", origin, err)
	}
	v.Receiver = id
	verifier, err := checkpoint.NewVerifier(origin, pub)
	if err != nil {
		return fail(ErrBadCheckpoint, "%v", err)
	}
	cp, _, err := checkpoint.Open(p.Checkpoint, verifier)
	if err != nil {
		return fail(ErrBadCheckpoint, "%v", err)
	}
	v.Checkpoint = cp
	if v.State, err = checkpoint.ParseReceiverState(cp.Extensions); err != nil {
		return fail(ErrBadCheckpoint, "%v", err)
	}
	seq := p.Receipt.AuditSeq
	if seq == 0 || seq > cp.Size {
		return fail(ErrBadProof, "the receipt's audit seq %d is not in the checkpoint's tree of %d entries", seq, cp.Size)
	}
	if err := tlog.CheckRecord(p.Inclusion, int64(cp.Size), cp.Root, int64(seq-1), tlog.RecordHash(p.Entry)); err != nil {
		return fail(ErrBadProof, "entry %d in the tree of %d: %v", seq, cp.Size, err)
	}
	e, err := audit.DecodeEntry(p.Entry)
	if err != nil {
		return fail(ErrNotTheDecision, "the proven entry does not decode: %v", err)
	}
	v.Entry = e
	rc := p.Receipt
	switch {
	case e.Seq != seq:
		return fail(ErrNotTheDecision, "the entry is seq %d, the receipt names %d", e.Seq, seq)
	case e.Kind != audit.KindSubmit || e.Outcome != audit.OutcomeApplied:
		return fail(ErrNotTheDecision, "entry %d is a %q with outcome %q, not an applied submit", e.Seq, e.Kind, e.Outcome)
	case e.Scope != rc.Scope || e.Action != rc.Action || e.Grant != rc.Grant || e.Target != rc.Target:
		return fail(ErrNotTheDecision, "entry %d records scope %q action %q grant %q target %q, the receipt %q %q %q %q",
			e.Seq, e.Scope, e.Action, e.Grant, e.Target, rc.Scope, rc.Action, rc.Grant, rc.Target)
	case hex.EncodeToString(e.RequestSHA256) != rc.RequestSHA256:
		return fail(ErrNotTheDecision, "entry %d records request %x, the receipt %s", e.Seq, e.RequestSHA256, rc.RequestSHA256)
	case e.RevBefore != rc.RevBefore || e.RevAfter != rc.RevAfter:
		return fail(ErrNotTheDecision, "entry %d records revisions %d before and %d after, the receipt %d and %d",
			e.Seq, e.RevBefore, e.RevAfter, rc.RevBefore, rc.RevAfter)
	case rc.At == nil || *rc.At != entryTime(e.At):
		return fail(ErrNotTheDecision, "entry %d records the decision at %s, the receipt %s", e.Seq, entryTime(e.At), orNull(rc.At))
	}
	if f := dispatchFields(rc); len(f) != 0 {
		// An applied submit's receipt is a local target's, which has no
		// dispatch state; the entry records none, so these would print
		// beside "ok" unproven.
		return fail(ErrNotTheDecision, "the receipt has %s, which entry %d, an applied submit, does not record",
			strings.Join(f, ", "), e.Seq)
	}
	return v, nil
}

// entryTime spells an entry's at as a receipt's at is spelled
// (api.Time): RFC 3339 in UTC with as many fractional digits as needed.
func entryTime(at int64) string {
	return time.Unix(0, at).UTC().Format(time.RFC3339Nano)
}

// orNull formats an optional time for a message.
func orNull(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}

// dispatchFields names the receipt's dispatch fields that are set: a
// remote target's dispatch state, which no applied submit entry records.
func dispatchFields(rc api.Receipt) []string {
	var set []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"dispatch", rc.Dispatch != ""}, {"dispatch_id", rc.DispatchID != ""}, {"precondition", rc.Precondition != ""},
		{"uid", rc.UID != ""}, {"deadline", rc.Deadline != nil}, {"version", rc.Version != ""},
	} {
		if f.set {
			set = append(set, f.name)
		}
	}
	return set
}
