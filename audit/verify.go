package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"
)

// Problem is a stable code for the first integrity problem Verify found.
// The codes are part of the CLI's JSON output; they are never renamed.
type Problem string

// The problem codes, in the order in which Verify reports them: first the
// anchor, then the chain entry by entry (where a fork is found at the
// anchored seq), then the chain's end (where a damaged anchor slot is
// judged too); then a fence violation found by the replay, and last the
// anchor's age. ProblemAnchorDamaged is an anchor store that holds no
// readable anchor: for a FileAnchor, a file without a valid slot, with two
// slots of one generation, or of the wrong size.
const (
	ProblemOK               Problem = "ok"
	ProblemAnchorMissing    Problem = "anchor_missing"
	ProblemAnchorDamaged    Problem = "anchor_damaged"
	ProblemBadSignature     Problem = "bad_signature"
	ProblemReceiverMismatch Problem = "receiver_mismatch"
	ProblemBadEntry         Problem = "bad_entry"
	ProblemSeqGap           Problem = "seq_gap"
	ProblemBrokenLink       Problem = "broken_link"
	ProblemForkDetected     Problem = "fork_detected"
	ProblemRollbackDetected Problem = "rollback_detected"
	ProblemFenceViolation   Problem = "fence_violation"
	ProblemAnchorStale      Problem = "anchor_stale"
	ProblemStateMismatch    Problem = "state_mismatch"
	// ProblemBadArchive is an archive file that is not well-formed, is
	// cut short, or holds other entries than its signed statement names.
	ProblemBadArchive Problem = "bad_archive"
	// ProblemBaseMismatch is a stored chain whose base disagrees with the
	// archive entries in it or with the archives given: archived entries
	// put back, a base record edited, archives out of order or with a gap.
	ProblemBaseMismatch Problem = "base_mismatch"
	// ProblemTreeMismatch is a stored Merkle tree that is not the one the
	// audit entries make, or whose root is not the one the anchor or the
	// database's newest checkpoint signs (ErrTreeMismatch). Verify does
	// not read the tree; the store's own verification reports it.
	ProblemTreeMismatch Problem = "tree_mismatch"
)

// VerifyOptions says what Verify checks and against what.
type VerifyOptions struct {
	// Entries yields the stored chain in key order, as a bbolt cursor over
	// the audit bucket does: key SeqKey(seq), value the encoded entry.
	// Verify does not keep either slice past the yield, so they may point
	// into a read transaction's memory.
	Entries iter.Seq2[[]byte, []byte]
	// Anchor holds the signed head that the chain must contain.
	Anchor AnchorStore
	// PublicKey is the receiver's key, which must have signed the anchor.
	PublicKey ed25519.PublicKey
	// Receiver is the receiver id that the anchor must name.
	Receiver string
	// MaxAge, if positive, makes an anchor older than MaxAge a problem
	// (anchor_stale). A valid but stale anchor is what an attacker who
	// restores the database together with an old anchor presents; only a
	// bound on age tells it apart, and only if the receiver writes often.
	MaxAge time.Duration
	// Now is the clock for MaxAge. Nil means time.Now.
	Now func() time.Time
	// NoFenceReplay turns off the replay of each scope's control state
	// (see Verify). It is for chains that are not a receiver's, such as
	// the execution ledger's, whose entries do not record scopes, holds
	// and grants.
	NoFenceReplay bool
	// BaseRecord is the encoded base record (MarshalBase) of a chain whose
	// older entries were archived: Entries then begin right after its seq,
	// and the fence replay goes on from its scopes. Nil means a chain that
	// was never archived, which begins at seq 1. It is read from the
	// database and trusted only as far as the chain confirms it: the
	// newest archive entry must record exactly this base.
	BaseRecord []byte
	// Archives are archive files holding the entries before the base,
	// oldest first. With them Verify checks the whole history: the first
	// must begin at seq 1, each must begin where the one before ends, and
	// the last must end exactly at the base.
	Archives []ArchiveSource
}

// ArchiveSource is an archive file to verify, with a name for messages.
type ArchiveSource struct {
	// Name names the archive in messages, e.g. its path.
	Name string
	// Reader yields the archive's bytes; Verify reads it to its end once.
	Reader io.Reader
}

// Report is the outcome of Verify.
type Report struct {
	// Problem is ProblemOK or the first problem found.
	Problem Problem
	// Detail describes the problem so that it stands on its own as
	// evidence: for a rollback or fork, both seqs, both hashes in hex and
	// the anchor's time. It is empty when Problem is ok.
	Detail string
	// Entries and Head describe the part of the chain that verified: all
	// of it, or the entries before the one with a problem (for a fork, up
	// to and including the anchored seq).
	Entries uint64
	Head    Head // the newest entry that verified
	// Anchor is the anchor's position as read from the anchor, verified or
	// not; zero if there is no readable anchor.
	Anchor Head
	// AnchorDamage describes a damaged slot beside the anchor, when the
	// anchor store is a DamageReporter that found one; nil otherwise. It
	// is set whatever the problem, and with ProblemOK too: damage that a
	// crash can explain is not a problem, but it is never left unsaid.
	AnchorDamage *SlotDamage
	// Base is where the stored chain begins: the newest archived entry,
	// or the zero Head for a chain that was never archived. Entries counts
	// from there.
	Base Head
	// Archived counts the entries verified in archives.
	Archived uint64
	// Archives counts the archives that verified.
	Archives int

	err error
}

// OK reports whether Verify found no problem.
func (r Report) OK() bool { return r.Problem == ProblemOK }

// Err returns nil if r is ok, and otherwise an error that wraps the
// sentinel for r.Problem (ErrRollbackDetected, ErrBrokenLink, …;
// ErrBadAnchor for anchor_damaged); a rollback or fork is, or wraps, a
// *RollbackError or *ForkError, or is a *SuspectedRollbackError.
func (r Report) Err() error { return r.err }

// Verify checks a whole chain against its anchor, streaming. It checks the
// anchor's signature and receiver; that every entry decodes canonically, is
// stored under its own seq, and links to the previous entry by hash; that
// seqs run from 1 with no gap; that the chain's hash at the anchored seq is
// the anchored head; and that the chain reaches the anchored seq. If the
// anchor store is a DamageReporter, a damaged slot is reported in the
// Report and judged by SlotDamage.Check against the whole chain.
//
// Unless opts.NoFenceReplay is set, it also replays each scope's control
// state from the receiver's entries (scope_created, activate, hold,
// recovered) and reports an applied submit entry whose scope, epoch and
// grant were not the scope's active grant at that point, or whose scope was
// held (fence_violation): the evidence of a receiver that skipped checks
// 2-4, in its own chain. Entries whose outcome is already_applied or denied
// change nothing and are not checked. A fence violation is reported only
// when the chain itself verifies, since only an intact chain is evidence;
// Entries and Head then cover the whole chain, and the error is a
// *FenceViolationError.
//
// Memory does not grow with the chain's length: the walk keeps only the
// previous entry's position, and the replay one small record per scope, so
// it grows with the number of scopes, not of entries. It reports the first
// problem in the Report. The error is only for faults that prevent
// verifying: bad options, or an anchor store that cannot be read, which for
// a FileAnchor includes a path that is not a regular file or is writable by
// others.
func Verify(opts VerifyOptions) (Report, error) {
	switch {
	case opts.Entries == nil || opts.Anchor == nil:
		return Report{}, errors.New("audit: verify: Entries and Anchor are required")
	case opts.Receiver == "":
		return Report{}, errors.New("audit: verify: Receiver is required")
	case len(opts.PublicKey) != ed25519.PublicKeySize:
		return Report{}, fmt.Errorf("%w: public key is %d bytes, want %d", ErrBadKey, len(opts.PublicKey), ed25519.PublicKeySize)
	}
	var r Report
	var ap Problem // the anchor's problem, if any, with its error in aerr
	anchor, damage, aerr := LoadWithDamage(opts.Anchor)
	r.AnchorDamage = damage
	switch {
	case errors.Is(aerr, ErrAnchorMissing):
		ap = ProblemAnchorMissing
	case errors.Is(aerr, ErrBadAnchor), errors.Is(aerr, ErrBadCheckpoint):
		// There is an anchor, but nothing in it can be read: that is
		// damage to the store, not a signature that failed.
		ap = ProblemAnchorDamaged
	case aerr != nil:
		return Report{}, aerr
	default:
		r.Anchor = Head{Seq: anchor.Seq, Hash: anchor.Head}
		if aerr = checkTrusted(anchor, opts.PublicKey, opts.Receiver); errors.Is(aerr, ErrReceiverMismatch) {
			ap = ProblemReceiverMismatch
		} else if aerr != nil {
			ap = ProblemBadSignature
		}
	}
	// The chain is walked even when the anchor is unusable, so that the
	// report still says how much of it verifies; the anchor's problem is
	// the one reported, since without a trusted anchor no chain is evidence.
	var trusted, next *Checkpoint
	if aerr == nil {
		trusted = &anchor.Checkpoint
		if damage != nil && damage.Next() && damage.Anchor != nil {
			// The damaged slot's checkpoint, if it verifies, is compared
			// with the chain too; the walker keeps the hash at its seq.
			next = &damage.Anchor.Checkpoint
		}
	}
	base, bp, berr := parseBaseOption(opts.BaseRecord)
	r.Base = base.Head()
	if berr == nil && len(opts.Archives) > 0 {
		bp, berr = r.verifyArchives(&opts, &base, trusted)
	}
	var fence *fenceReplay
	if !opts.NoFenceReplay {
		fence = newFenceReplayAt(&base)
	}
	w := &walker{anchor: trusted, next: next, fence: fence, head: base.Head(), start: base.Head()}
	if opts.BaseRecord != nil {
		w.startFence = BaseDigest(opts.BaseRecord)
	}
	if berr == nil {
		w.walk(opts.Entries)
	}
	r.Entries, r.Head = w.head.Seq-base.Seq, w.head
	var derr error
	if aerr == nil && berr == nil && w.err == nil {
		derr = damage.Check(anchor.Checkpoint, opts.PublicKey, opts.Receiver, w.head, w.hashAt)
	}
	switch {
	case aerr != nil:
		r.fail(ap, aerr)
	case berr != nil:
		r.fail(bp, berr)
	case w.err != nil:
		r.fail(w.problem, w.err)
	case errors.Is(derr, ErrAnchorStale):
		r.fail(ProblemAnchorStale, derr)
	case errors.Is(derr, ErrForkDetected):
		r.fail(ProblemForkDetected, derr)
	case errors.Is(derr, ErrRollbackDetected):
		r.fail(ProblemRollbackDetected, derr)
	case derr != nil:
		return Report{}, derr
	case fence != nil && fence.violation != nil:
		r.fail(ProblemFenceViolation, fence.violation)
	case opts.MaxAge > 0:
		now := time.Now
		if opts.Now != nil {
			now = opts.Now
		}
		if age := now().Sub(time.Unix(0, anchor.At)); age > opts.MaxAge {
			r.fail(ProblemAnchorStale, fmt.Errorf("%w: anchor seq %d (%x) was signed at %s, %v ago, over the maximum age %v",
				ErrAnchorStale, anchor.Seq, anchor.Head[:], formatTime(anchor.At), age.Round(time.Second), opts.MaxAge))
		}
	}
	if r.Problem == "" {
		r.Problem = ProblemOK
	}
	return r, nil
}

// Fail records a problem found beside the chain, such as a state that is
// not the one the head's checkpoint commits to, unless a problem was
// already found: the report names the first.
func (r *Report) Fail(p Problem, err error) {
	if r.Problem == "" || r.Problem == ProblemOK {
		r.fail(p, err)
	}
}

// Reattribute records p in place of the problem already found. It is for
// a caller with evidence that the first problem names the wrong culprit:
// an anchor blamed as stale by a database whose own newest checkpoint does
// not cover its chain, which is the database's change, not the anchor's.
func (r *Report) Reattribute(p Problem, err error) {
	r.fail(p, err)
}

func (r *Report) fail(p Problem, err error) {
	r.Problem, r.Detail, r.err = p, err.Error(), err
}

// checkChain walks entries against a trusted anchor (nil if there is
// none) and stops at the first problem, including a chain that ends before
// the anchor. Each entry that verifies is replayed into fence, if it is not
// nil.
func checkChain(entries iter.Seq2[[]byte, []byte], anchor *Checkpoint, fence *fenceReplay) *walker {
	return walkChain(entries, anchor, nil, fence)
}

// walkChain is checkChain that also keeps the hash at next.Seq, if next is
// not nil, for SlotDamage.Check.
func walkChain(entries iter.Seq2[[]byte, []byte], anchor, next *Checkpoint, fence *fenceReplay) *walker {
	w := &walker{anchor: anchor, next: next, fence: fence}
	w.walk(entries)
	return w
}

// walk checks the stored chain from w's start: the anchor against the
// start, every entry, and then that the chain reaches the anchor and, if it
// starts at a base, that an archive entry in it records that base.
func (w *walker) walk(entries iter.Seq2[[]byte, []byte]) {
	// An anchor behind the base is an old anchor put back only if the
	// base is the receiver's: until an archive entry in the chain records
	// it, the base is the database's word alone, and whoever can write
	// the database can put it past a current anchor. So the chain is
	// walked first, and a base it does not confirm is the problem.
	stale := false
	if w.anchor != nil && w.anchor.Seq <= w.start.Seq && w.start.Seq > 0 {
		if w.anchor.Seq == w.start.Seq && w.anchor.Head != w.start.Hash {
			w.fail(ProblemForkDetected, &ForkError{Anchor: *w.anchor, Hash: w.start.Hash})
			return
		}
		stale = w.anchor.Seq < w.start.Seq
	}
	if w.next != nil && w.next.Seq == w.start.Seq {
		w.nextAt = w.start.Hash
	}
	for k, v := range entries {
		if !w.step(k, v) {
			return
		}
	}
	switch {
	case w.anchor != nil && w.head.Seq < w.anchor.Seq:
		w.fail(ProblemRollbackDetected, &RollbackError{Anchor: *w.anchor, Head: w.head})
	case w.start.Seq > 0 && !w.sawStart:
		w.fail(ProblemBaseMismatch, fmt.Errorf("%w: the base record says the entries up to %d were archived, but no archive entry in the chain records it",
			ErrBaseMismatch, w.start.Seq))
	case stale:
		w.fail(ProblemAnchorStale, beforeBase(w.anchor.Seq, w.start.Seq))
	}
}

// beforeBase is the error for an anchor whose seq was archived: a receiver
// archives only entries its anchor already covers, so an anchor behind the
// base is an older anchor put back.
func beforeBase(anchored, base uint64) error {
	return fmt.Errorf("%w: the anchor names seq %d, but the database archived the entries up to %d; the receiver archives only "+
		"entries its anchor covers, so this anchor is older than the archive: an old copy of the anchor was put back",
		ErrAnchorArchived, anchored, base)
}

// walker checks one entry at a time and keeps only the previous entry's
// position, which is what keeps Verify's memory flat.
type walker struct {
	head Head
	// start is where the walk began: a base, or the zero Head; startFence
	// the digest of its base record, and sawStart whether an archive entry
	// recorded it.
	start      Head
	startFence Hash
	sawStart   bool
	anchor     *Checkpoint  // nil: no trusted anchor to compare with
	next       *Checkpoint  // nil, or a checkpoint whose seq's hash to keep
	nextAt     Hash         // the hash at next.Seq, once walked
	fence      *fenceReplay // nil: no replay
	e          Entry
	scratch    []byte // re-encoding buffer, reused across entries
	problem    Problem
	err        error
}

// step checks the entry stored under key k and reports whether to go on.
func (w *walker) step(k, v []byte) bool {
	if len(k) != 8 {
		return w.fail(ProblemBadEntry, fmt.Errorf("%w: after seq %d, key %x is not an 8-byte seq", ErrBadEntry, w.head.Seq, k))
	}
	seq, want := binary.BigEndian.Uint64(k), w.head.Seq+1
	switch {
	case w.start.Seq > 0 && seq <= w.start.Seq:
		return w.fail(ProblemBaseMismatch, fmt.Errorf("%w: the database holds entry %d, but its base record says the entries up to %d were archived",
			ErrBaseMismatch, seq, w.start.Seq))
	case seq == want+1:
		return w.fail(ProblemSeqGap, fmt.Errorf("%w: seq %d follows seq %d; seq %d is missing", ErrSeqGap, seq, w.head.Seq, want))
	case seq > want:
		return w.fail(ProblemSeqGap, fmt.Errorf("%w: seq %d follows seq %d; seqs %d to %d are missing", ErrSeqGap, seq, w.head.Seq, want, seq-1))
	case seq < want:
		return w.fail(ProblemSeqGap, fmt.Errorf("%w: seq %d follows seq %d", ErrSeqGap, seq, w.head.Seq))
	case v == nil:
		return w.fail(ProblemBadEntry, fmt.Errorf("%w: seq %d has no value", ErrBadEntry, seq))
	}
	if err := decodeEntryInto(v, &w.e, &w.scratch); err != nil {
		return w.fail(ProblemBadEntry, fmt.Errorf("%w (stored at seq %d)", err, seq))
	}
	if w.e.Seq != seq {
		return w.fail(ProblemSeqGap, fmt.Errorf("%w: key seq %d holds entry seq %d", ErrSeqGap, seq, w.e.Seq))
	}
	if !bytes.Equal(w.e.Prev, w.head.Hash[:]) {
		if seq == 1 {
			return w.fail(ProblemBrokenLink, fmt.Errorf("%w: entry 1 has prev %x, want 32 zero bytes", ErrBrokenLink, w.e.Prev))
		}
		return w.fail(ProblemBrokenLink, fmt.Errorf("%w: entry %d has prev %x, but entry %d hashes to %x",
			ErrBrokenLink, seq, w.e.Prev, w.head.Seq, w.head.Hash[:]))
	}
	w.head = Head{Seq: seq, Hash: HashEntry(v)}
	if w.next != nil && seq == w.next.Seq {
		w.nextAt = w.head.Hash
	}
	if w.anchor != nil && seq == w.anchor.Seq && w.head.Hash != w.anchor.Head {
		return w.fail(ProblemForkDetected, &ForkError{Anchor: *w.anchor, Hash: w.head.Hash})
	}
	if w.e.Kind == KindArchived {
		if !w.checkArchived() {
			return false
		}
	}
	if w.fence != nil {
		w.fence.observe(&w.e)
	}
	return true
}

// checkArchived checks an archive entry against where the walk began: it
// may record only a base at or before it, and the start itself exactly.
func (w *walker) checkArchived() bool {
	b, err := archivedBase(&w.e)
	if err != nil {
		return w.fail(ProblemBadEntry, err)
	}
	switch {
	case b.seq > w.start.Seq:
		return w.fail(ProblemBaseMismatch, fmt.Errorf("%w: entry %d records that the entries up to %d were archived, but the chain here "+
			"continues from seq %d: archived entries were put back, or the base record was changed", ErrBaseMismatch, w.e.Seq, b.seq, w.start.Seq))
	case b.seq == w.start.Seq && (b.hash != w.start.Hash || b.fence != w.startFence):
		return w.fail(ProblemBaseMismatch, fmt.Errorf("%w: entry %d records base seq %d with hash %x and base record digest %x, "+
			"but the chain begins there with hash %x and base record digest %x", ErrBaseMismatch, w.e.Seq, b.seq, b.hash[:], b.fence[:],
			w.start.Hash[:], w.startFence[:]))
	case b.seq == w.start.Seq:
		w.sawStart = true
	}
	return true
}

// hashAt returns the hash kept at next.Seq; it is what SlotDamage.Check
// asks for, and only for a seq the walk passed.
func (w *walker) hashAt(seq uint64) (Hash, error) {
	if seq < w.start.Seq {
		return Hash{}, beforeBase(seq, w.start.Seq)
	}
	if w.next == nil || seq != w.next.Seq || seq > w.head.Seq {
		return Hash{}, fmt.Errorf("audit: verify: the hash at seq %d was not kept", seq)
	}
	return w.nextAt, nil
}

func (w *walker) fail(p Problem, err error) bool {
	w.problem, w.err = p, err
	return false
}

// parseBaseOption decodes VerifyOptions.BaseRecord; a nil record is the
// start of the chain.
func parseBaseOption(raw []byte) (Base, Problem, error) {
	if raw == nil {
		return Base{}, "", nil
	}
	b, err := ParseBase(raw)
	if err != nil {
		return Base{}, ProblemBaseMismatch, fmt.Errorf("%w: the database's base record: %w", ErrBaseMismatch, err)
	}
	if b.Seq == 0 {
		return Base{}, ProblemBaseMismatch, fmt.Errorf("%w: the database's base record is at seq 0", ErrBaseMismatch)
	}
	return b, "", nil
}

// verifyArchives reads each archive in turn and checks that together they
// run from seq 1 to exactly base, where the stored chain begins. An
// anchor whose seq an archive holds is compared with it.
func (r *Report) verifyArchives(opts *VerifyOptions, base *Base, anchor *Checkpoint) (Problem, error) {
	prev := ArchiveStatement{ToSeq: 0, ToFence: BaseDigest(mustMarshalBase(&Base{}))}
	for i, a := range opts.Archives {
		var fork error
		visit := func(e *Entry, h Hash) {
			if anchor != nil && e.Seq == anchor.Seq && h != anchor.Head && fork == nil {
				fork = &ForkError{Anchor: *anchor, Hash: h}
			}
		}
		info, err := ReadArchive(a.Name, a.Reader, opts.PublicKey, opts.Receiver, visit)
		var ae *ArchiveError
		if errors.As(err, &ae) {
			return ae.Problem, err
		} else if err != nil {
			return ProblemBadArchive, fmt.Errorf("%w: archive %s: %w", ErrBadArchive, a.Name, err)
		}
		st := info.Statement
		if err := chainsTo(a.Name, &st.ArchiveStatement, opts.Archives, i, &prev); err != nil {
			return ProblemBaseMismatch, err
		}
		if fork != nil {
			return ProblemForkDetected, fmt.Errorf("archive %s: %w", a.Name, fork)
		}
		prev = st.ArchiveStatement
		r.Archived += info.Entries
		r.Archives++
	}
	if base.Seq == 0 {
		return ProblemBaseMismatch, fmt.Errorf("%w: archives were given, but the database was never archived: its chain begins at seq 1",
			ErrBaseMismatch)
	}
	if prev.ToSeq != base.Seq || prev.ToHash != base.Hash || prev.ToFence != BaseDigest(opts.BaseRecord) {
		return ProblemBaseMismatch, fmt.Errorf("%w: the last archive ends at entry %d, but the database's chain continues from entry %d (%x): "+
			"an archive is missing or another history's", ErrBaseMismatch, prev.ToSeq, base.Seq, base.Hash[:])
	}
	return "", nil
}

// mustMarshalBase encodes a base that is valid by construction.
func mustMarshalBase(b *Base) []byte {
	raw, err := MarshalBase(b)
	if err != nil {
		panic(err)
	}
	return raw
}

// chainsTo checks that archive i, named name with statement st, begins
// exactly where prev, the end of archive i-1 (or the start of the chain),
// ends, and says how it does not.
func chainsTo(name string, st *ArchiveStatement, all []ArchiveSource, i int, prev *ArchiveStatement) error {
	switch {
	case st.FromSeq == prev.ToSeq && st.FromHash == prev.ToHash && st.FromFence == prev.ToFence:
		return nil
	case i == 0:
		return fmt.Errorf("%w: archive %s begins after entry %d, but the first archive must begin at seq 1: "+
			"an older archive is missing, or the archives are not given oldest first", ErrBaseMismatch, name, st.FromSeq)
	case st.FromSeq < prev.ToSeq:
		return fmt.Errorf("%w: archive %s begins after entry %d, before archive %s ends (entry %d): the archives are "+
			"out of order or overlap", ErrBaseMismatch, name, st.FromSeq, all[i-1].Name, prev.ToSeq)
	case st.FromSeq > prev.ToSeq:
		return fmt.Errorf("%w: archive %s begins after entry %d, but archive %s ends at entry %d: the archives of "+
			"entries %d to %d are missing", ErrBaseMismatch, name, st.FromSeq, all[i-1].Name, prev.ToSeq, prev.ToSeq+1, st.FromSeq)
	}
	return fmt.Errorf("%w: archive %s continues entry %d with another hash or fence state than archive %s ends with: "+
		"they are of different histories", ErrBaseMismatch, name, st.FromSeq, all[i-1].Name)
}
