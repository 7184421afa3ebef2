package audit

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// anchorLabels are the anchor file's lines in order; each line is a label,
// one space and a value. The two admission lines are present exactly when
// the checkpoint names a consumed admission (anchorOptional).
var anchorLabels = [...]string{"receiver", "seq", "head", "root", "state", "epoch_high_water", "admission_sha256", "admission_at",
	"at", "key", "sig"}

// anchorOptional is the index in anchorLabels of the first optional line,
// and anchorOptionalN how many lines are optional together.
const anchorOptional, anchorOptionalN = 6, 2

// anchorMagic is the anchor file's first line, naming format and version.
const anchorMagic = "kvfence checkpoint v3"

// anchorMagicV2 is the first line of the format before checkpoints
// committed to the tree root; such an anchor is refused with a message
// that says so.
const anchorMagicV2 = "kvfence checkpoint v2"

// anchorMagicV1 is the first line of the format before checkpoints
// committed to the state; such an anchor is refused with a message that
// says so.
const anchorMagicV1 = "kvfence checkpoint v1"

// MarshalAnchor returns sc in the anchor file format: short lines an
// operator can read and compare with "verify-chain" output and with
// "ssh-keygen -l". The format is specified in the package documentation.
func (sc SignedCheckpoint) MarshalAnchor() ([]byte, error) {
	if err := checkCheckpoint(&sc.Checkpoint); err != nil {
		return nil, err
	}
	return appendAnchor(make([]byte, 0, 656+len(sc.Receiver)), &sc), nil
}

func appendAnchor(b []byte, sc *SignedCheckpoint) []byte {
	b = append(b, anchorMagic+"\nreceiver "...)
	b = append(b, sc.Receiver...)
	b = strconv.AppendUint(append(b, "\nseq "...), sc.Seq, 10)
	b = hex.AppendEncode(append(b, "\nhead "...), sc.Head[:])
	b = hex.AppendEncode(append(b, "\nroot "...), sc.Root[:])
	b = hex.AppendEncode(append(b, "\nstate "...), sc.State[:])
	b = strconv.AppendUint(append(b, "\nepoch_high_water "...), sc.EpochHighWater, 10)
	if !sc.Admission.IsZero() {
		b = hex.AppendEncode(append(b, "\nadmission_sha256 "...), sc.Admission.SHA256[:])
		b = time.Unix(0, sc.Admission.At).UTC().AppendFormat(append(b, "\nadmission_at "...), time.RFC3339Nano)
	}
	b = time.Unix(0, sc.At).UTC().AppendFormat(append(b, "\nat "...), time.RFC3339Nano)
	b = base64.RawStdEncoding.AppendEncode(append(b, "\nkey SHA256:"...), sc.Key[:])
	b = base64.StdEncoding.AppendEncode(append(b, "\nsig "...), sc.Signature[:])
	return append(b, '\n')
}

// ParseAnchor decodes an anchor file strictly: exactly the lines that
// MarshalAnchor writes, byte for byte, and nothing else. It does not verify
// the signature.
func ParseAnchor(data []byte) (SignedCheckpoint, error) {
	if len(data) > MaxCheckpointSize {
		return SignedCheckpoint{}, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrBadAnchor, len(data), MaxCheckpointSize)
	}
	rest, ok := bytes.CutPrefix(data, []byte(anchorMagic+"\n"))
	if !ok && bytes.HasPrefix(data, []byte(anchorMagicV1+"\n")) {
		return SignedCheckpoint{}, fmt.Errorf("%w: %w", ErrBadAnchor, ErrAnchorV1)
	}
	if !ok && bytes.HasPrefix(data, []byte(anchorMagicV2+"\n")) {
		return SignedCheckpoint{}, fmt.Errorf("%w: %w", ErrBadAnchor, ErrAnchorV2)
	}
	if !ok {
		return SignedCheckpoint{}, fmt.Errorf("%w: first line is not %q", ErrBadAnchor, anchorMagic)
	}
	var v [len(anchorLabels)]string
	rec := false
	for i, n := 0, 2; i < len(anchorLabels); i++ {
		label := anchorLabels[i]
		if i == anchorOptional {
			if rec = bytes.HasPrefix(rest, []byte(label+" ")); !rec {
				i += anchorOptionalN - 1
				continue
			}
		}
		line, after, ok := bytes.Cut(rest, []byte{'\n'})
		if !ok {
			return SignedCheckpoint{}, fmt.Errorf("%w: line %d: missing or unterminated %q line", ErrBadAnchor, n, label)
		}
		val, ok := bytes.CutPrefix(line, []byte(label+" "))
		if !ok {
			return SignedCheckpoint{}, fmt.Errorf("%w: line %d: want %q line", ErrBadAnchor, n, label)
		}
		v[i], rest, n = string(val), after, n+1
	}
	if len(rest) != 0 {
		return SignedCheckpoint{}, fmt.Errorf("%w: %d bytes after the last line", ErrBadAnchor, len(rest))
	}
	var sc SignedCheckpoint
	var err error
	sc.Receiver = v[0]
	if sc.Seq, err = strconv.ParseUint(v[1], 10, 64); err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: seq: %w", ErrBadAnchor, err)
	}
	if err := decodeFixed(sc.Head[:], v[2], hex.DecodeString); err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: head: %w", ErrBadAnchor, err)
	}
	if err := decodeFixed(sc.Root[:], v[3], hex.DecodeString); err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: root: %w", ErrBadAnchor, err)
	}
	if err := decodeFixed(sc.State[:], v[4], hex.DecodeString); err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: state: %w", ErrBadAnchor, err)
	}
	if sc.EpochHighWater, err = strconv.ParseUint(v[5], 10, 64); err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: epoch_high_water: %w", ErrBadAnchor, err)
	}
	if rec {
		if err := decodeFixed(sc.Admission.SHA256[:], v[6], hex.DecodeString); err != nil {
			return SignedCheckpoint{}, fmt.Errorf("%w: admission_sha256: %w", ErrBadAnchor, err)
		}
		t, err := time.Parse(time.RFC3339Nano, v[7])
		if err != nil {
			return SignedCheckpoint{}, fmt.Errorf("%w: admission_at: %w", ErrBadAnchor, err)
		}
		sc.Admission.At = t.UnixNano()
	}
	t, err := time.Parse(time.RFC3339Nano, v[8])
	if err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: at: %w", ErrBadAnchor, err)
	}
	sc.At = t.UnixNano()
	fp, ok := strings.CutPrefix(v[9], "SHA256:")
	if !ok {
		return SignedCheckpoint{}, fmt.Errorf("%w: key: not a SHA256: fingerprint", ErrBadAnchor)
	}
	if err := decodeFixed(sc.Key[:], fp, base64.RawStdEncoding.Strict().DecodeString); err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: key: %w", ErrBadAnchor, err)
	}
	if err := decodeFixed(sc.Signature[:], v[10], base64.StdEncoding.Strict().DecodeString); err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: sig: %w", ErrBadAnchor, err)
	}
	if err := checkCheckpoint(&sc.Checkpoint); err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%w: %w", ErrBadAnchor, err)
	}
	// One checkpoint has one spelling: this refuses leading zeros, upper-case
	// hex, another time zone or precision, and times outside int64 nanoseconds.
	if !bytes.Equal(appendAnchor(nil, &sc), data) {
		return SignedCheckpoint{}, fmt.Errorf("%w: not in canonical form", ErrBadAnchor)
	}
	return sc, nil
}

func decodeFixed(dst []byte, s string, decode func(string) ([]byte, error)) error {
	b, err := decode(s)
	if err != nil {
		return err
	}
	if len(b) != len(dst) {
		return fmt.Errorf("%d bytes, want %d", len(b), len(dst))
	}
	copy(dst, b)
	return nil
}

// AnchorStore keeps a receiver's anchor: the latest signed checkpoint, in a
// place administered apart from the database. Writes are compare-and-swap,
// so two writers, or a writer that holds a stale view, cannot silently
// overwrite each other.
type AnchorStore interface {
	// Load returns the stored anchor. If there is none, the error wraps
	// ErrAnchorMissing, and Load creates nothing. What Load returns is
	// durable, since another writer of the same chain may take it as
	// cover for its own commits: never a checkpoint that a crash could
	// still take back (a Store that took effect and whose answer was
	// lost may be returned; so may one whose writer died after making it
	// durable, or whose durability the reader itself completed).
	Load() (SignedCheckpoint, error)
	// Store replaces the anchor old by next; a nil old means that there is
	// no anchor yet. If the stored anchor is not old the error wraps
	// ErrWriteConflict. It refuses to move back (ErrAnchorRegression) or
	// to another receiver (ErrReceiverMismatch). Store does not verify
	// signatures; the caller signed next.
	Store(old *SignedCheckpoint, next SignedCheckpoint) error
	// Supersede is Store without the regression check, for recovery only:
	// the caller must first have verified a recovery admission that names
	// old. It still refuses another receiver. Retried after next became
	// the anchor, it succeeds, and finishes what the first call left
	// undone.
	Supersede(old, next SignedCheckpoint) error
}

// checkSwap decides a compare-and-swap from the current anchor cur (nil if
// none) to next, for every AnchorStore implementation alike. Its messages
// format the heads as arrays, not slices of them, so that cur, old and
// next do not escape and a write that passes allocates nothing here.
func checkSwap(cur, old *SignedCheckpoint, next *SignedCheckpoint, supersede bool) error {
	if err := checkCheckpoint(&next.Checkpoint); err != nil {
		return err
	}
	switch {
	case supersede && cur != nil && *cur == *next:
		// A supersession retried after it wrote next but failed later
		// (a file's copy of it, a lost answer): what it asked for holds,
		// and the store finishes what the first call left undone.
		return nil
	case old == nil && cur != nil:
		return fmt.Errorf("%w: expected no anchor, found seq %d (%x)", ErrWriteConflict, cur.Seq, cur.Head)
	case old != nil && cur == nil:
		return fmt.Errorf("%w: expected anchor seq %d (%x): %w", ErrWriteConflict, old.Seq, old.Head, ErrAnchorMissing)
	case old != nil && *old != *cur:
		return fmt.Errorf("%w: expected anchor seq %d (%x), found seq %d (%x)",
			ErrWriteConflict, old.Seq, old.Head, cur.Seq, cur.Head)
	case cur == nil:
		return nil
	case next.Receiver != cur.Receiver:
		return fmt.Errorf("%w: anchor is for receiver %q, new checkpoint for %q", ErrReceiverMismatch, cur.Receiver, next.Receiver)
	case supersede && !cur.Admission.IsZero() && (next.Admission.IsZero() || next.Admission.At < cur.Admission.At):
		// A recovery consumes an admission signed after the one the
		// anchor names; one that would forget it reopens the replay.
		return fmt.Errorf("%w: anchor records the admission signed at %s, new checkpoint %s",
			ErrAnchorRegression, formatTime(cur.Admission.At), admissionText(next.Admission))
	case supersede:
		return nil
	case next.Admission != cur.Admission:
		// Only a recovery changes the consumed admission, and it
		// supersedes; every other write carries it unchanged.
		return fmt.Errorf("%w: anchor records %s, new checkpoint %s",
			ErrAnchorRegression, admissionText(cur.Admission), admissionText(next.Admission))
	case next.Seq < cur.Seq, next.Seq == cur.Seq && next.Head != cur.Head:
		return fmt.Errorf("%w: anchor is at seq %d (%x), new checkpoint at seq %d (%x)",
			ErrAnchorRegression, cur.Seq, cur.Head, next.Seq, next.Head)
	case next.Seq == cur.Seq && next.Root != cur.Root:
		// Two roots for one tree size is the equivocation a witness
		// would hold against the receiver: never signed into the anchor.
		return fmt.Errorf("%w: anchor has tree root %x at seq %d, new checkpoint %x",
			ErrAnchorRegression, cur.Root, cur.Seq, next.Root)
	case next.EpochHighWater < cur.EpochHighWater:
		return fmt.Errorf("%w: anchor has epoch high-water %d, new checkpoint %d",
			ErrAnchorRegression, cur.EpochHighWater, next.EpochHighWater)
	}
	return nil
}

// admissionText describes a checkpoint's admission record for an error.
func admissionText(r AdmissionRecord) string {
	if r.IsZero() {
		return "no consumed admission"
	}
	return fmt.Sprintf("the admission signed at %s (sha256 %x)", formatTime(r.At), r.SHA256[:])
}

// CheckAdvance reports whether next may replace c as the anchor under the
// rules every AnchorStore applies (a smaller seq, the same seq with another
// head, or a smaller epoch high-water is ErrAnchorRegression; another
// receiver is ErrReceiverMismatch). A receiver runs it before it commits, so
// that a commit the anchor would refuse never happens. The zero Checkpoint
// (no anchor yet) accepts any valid next.
func (c Checkpoint) CheckAdvance(next Checkpoint) error {
	n := SignedCheckpoint{Checkpoint: next}
	if c.Seq == 0 {
		return checkSwap(nil, nil, &n, false)
	}
	cur := SignedCheckpoint{Checkpoint: c}
	return checkSwap(&cur, &cur, &n, false)
}

// CheckSupersede reports whether next may supersede c as the anchor after a
// recovery under the rules every AnchorStore applies: another receiver is
// ErrReceiverMismatch, and a next that forgets the consumed admission c
// names (it names none, or one signed earlier) is ErrAnchorRegression.
// Seq, head and epoch high-water may move back.
func (c Checkpoint) CheckSupersede(next Checkpoint) error {
	n, cur := SignedCheckpoint{Checkpoint: next}, SignedCheckpoint{Checkpoint: c}
	return checkSwap(&cur, &cur, &n, true)
}

// MemAnchor is an AnchorStore in memory, for tests. The zero value holds
// no anchor. It is safe for concurrent use.
type MemAnchor struct {
	mu  sync.Mutex
	cur *SignedCheckpoint
}

// Load returns the anchor, or ErrAnchorMissing.
func (m *MemAnchor) Load() (SignedCheckpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return SignedCheckpoint{}, ErrAnchorMissing
	}
	return *m.cur, nil
}

// Store implements AnchorStore.Store.
func (m *MemAnchor) Store(old *SignedCheckpoint, next SignedCheckpoint) error {
	return m.swap(old, next, false)
}

// Supersede implements AnchorStore.Supersede.
func (m *MemAnchor) Supersede(old, next SignedCheckpoint) error {
	return m.swap(&old, next, true)
}

func (m *MemAnchor) swap(old *SignedCheckpoint, next SignedCheckpoint, supersede bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := checkSwap(m.cur, old, &next, supersede); err != nil {
		return err
	}
	m.cur = &next
	return nil
}

// Locator is an AnchorStore that can say where it keeps the anchor. A
// receiver records the location at init, so that a first anchor that init
// could not write is written later only where init meant it to be, never
// at a mistyped path that happens to hold no anchor either.
type Locator interface {
	// Location names where the store keeps the anchor, the same string
	// for every store of that anchor.
	Location() string
}
