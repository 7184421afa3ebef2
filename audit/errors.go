package audit

import (
	"errors"
	"fmt"
	"time"
)

// Errors that decoders return for input that is not a well-formed artefact.
var (
	// ErrBadEntry means an entry does not decode, is not in canonical form,
	// or breaks a field rule.
	ErrBadEntry = errors.New("audit: bad entry")
	// ErrBadCheckpoint means a checkpoint or signed checkpoint does not
	// decode, is not in canonical form, or breaks a field rule.
	ErrBadCheckpoint = errors.New("audit: bad checkpoint")
	// ErrBadAnchor means an anchor is not well-formed and canonical, or an
	// anchor file is damaged: it holds no valid slot, two of one
	// generation, or is not exactly AnchorFileSize bytes. Verify reports
	// it as anchor_damaged.
	ErrBadAnchor = errors.New("audit: bad anchor file")
	// ErrBadAdmission means an admission or signed admission does not
	// decode, is not in canonical form, or breaks a field rule.
	ErrBadAdmission = errors.New("audit: bad admission")
	// ErrBadKey means a public or private key does not have the size of an
	// Ed25519 key.
	ErrBadKey = errors.New("audit: bad key")
)

// Errors that report an integrity problem; each matches a Problem code.
var (
	// ErrBadSignature means a signature does not verify under the expected
	// public key, or the anchor that should carry it cannot be read.
	ErrBadSignature = errors.New("audit: bad signature")
	// ErrReceiverMismatch means a checkpoint, anchor or admission names
	// another receiver than the one it is checked against.
	ErrReceiverMismatch = errors.New("audit: receiver mismatch")
	// ErrRollbackDetected means the chain ends before the anchored seq:
	// the database is older than its anchor.
	ErrRollbackDetected = errors.New("audit: rollback detected")
	// ErrForkDetected means the chain's hash at the anchored seq is not the
	// anchored head: history was rewritten or replaced.
	ErrForkDetected = errors.New("audit: fork detected")
	// ErrBrokenLink means an entry's prev is not the hash of the entry
	// before it.
	ErrBrokenLink = errors.New("audit: broken link")
	// ErrSeqGap means the stored seqs do not run 1, 2, 3, … or an entry is
	// stored under another seq than its own.
	ErrSeqGap = errors.New("audit: seq gap")
	// ErrAnchorStale means the anchor is older than the maximum age the
	// verifier was given, which may be a frozen (stale but valid) anchor.
	ErrAnchorStale = errors.New("audit: anchor stale")
	// ErrStateMismatch means the fence state (control, grant, target and
	// receipt records) is not the state that the signed checkpoint of the
	// chain's head commits to, or the epoch high-water is below the
	// anchor's: state was edited or put back apart from its history.
	ErrStateMismatch = errors.New("audit: state mismatch")
	// ErrFenceViolation means the chain records a mutation applied under a
	// grant that was not its scope's active grant at that point, or while
	// the scope was held: the receiver that wrote it skipped its checks.
	ErrFenceViolation = errors.New("audit: fence violation")
)

// Errors of an AnchorStore.
var (
	// ErrAnchorMissing means there is no anchor; it is never a reason to
	// create one.
	ErrAnchorMissing = errors.New("audit: anchor missing")
	// ErrAnchorBusy means another holder kept the anchor file's lock past
	// FileAnchor.LockTimeout: a writer on a stalled disk, or anything that
	// can open the file and holds a lock on it.
	ErrAnchorBusy = errors.New("audit: anchor file busy")
	// ErrAnchorV1 means the anchor is in the first format, whose
	// checkpoints did not commit to the fence state. It is refused, never
	// upgraded in place: its state cannot be vouched for after the fact.
	// A lost-anchor recovery admission re-anchors such a receiver.
	ErrAnchorV1 = errors.New("audit: anchor format v1 predates the state digest; re-anchor the receiver with a lost-anchor recovery admission")
	// ErrAnchorV2 means the anchor is in the second format, whose
	// checkpoints did not commit to the root of the tree over the audit
	// entries. It is refused, never upgraded in place: the databases that
	// wrote it are in a format that is refused too.
	ErrAnchorV2 = errors.New("audit: anchor format v2 predates the tree root that checkpoints now commit to; " +
		"initialise a new receiver or ledger, whose anchor is in the current format")
	// ErrTreeMismatch means the stored Merkle tree over the audit entries
	// is not the one the entries make, or its root is not the one the
	// receiver signed in a checkpoint (problem tree_mismatch).
	ErrTreeMismatch = errors.New("audit: the stored Merkle tree disagrees with the audit entries or the signed root")
	// ErrWriteConflict means the stored anchor is not the one the writer
	// expected to replace.
	ErrWriteConflict = errors.New("audit: anchor write conflict")
	// ErrAnchorRegression means a new anchor would move back: a smaller
	// seq, the same seq with another head, or a smaller epoch high-water.
	ErrAnchorRegression = errors.New("audit: anchor regression")
	// ErrAnchorNotRegular means the anchor path names a symbolic link, a
	// directory or another non-regular file.
	ErrAnchorNotRegular = errors.New("audit: anchor is not a regular file")
	// ErrAnchorPermissions means the anchor file may be written by group or
	// others, so an old copy could be put back without the receiver's key.
	ErrAnchorPermissions = errors.New("audit: anchor file is writable by group or others")
)

// ErrAdmissionMismatch means a recovery admission names another receiver,
// another superseded anchor or another admitted head than the one at hand,
// or is of the other kind: a lost-anchor admission where an anchor exists,
// or an ordinary one where there is no anchor to supersede.
var ErrAdmissionMismatch = errors.New("audit: admission does not match")

// Errors of an admission's validity and use.
var (
	// ErrAdmissionV2 means an admission is in the second format, which had
	// no expiry and so could be applied at any time after it was signed.
	// It is refused, never read as an admission that does not expire.
	ErrAdmissionV2 = errors.New("audit: admission format v2 has no expiry; have the recovery key holder sign a new one")
	// ErrAdmissionExpired means an admission is past its expiry by the
	// clock of the machine that applies it.
	ErrAdmissionExpired = errors.New("audit: admission expired")
	// ErrAdmissionNotYetValid means an admission was signed further ahead
	// of the applying machine's clock than MaxAdmissionSkew.
	ErrAdmissionNotYetValid = errors.New("audit: admission signed in the future")
	// ErrAdmissionReplayed means a recovery admission is the one that a
	// signed checkpoint of the receiver records as consumed, or was signed
	// no later than it: it was used already, or is older than one that was.
	ErrAdmissionReplayed = errors.New("audit: admission already consumed")
)

// RollbackError reports a database whose chain ends before its anchor.
// It matches ErrRollbackDetected.
type RollbackError struct {
	Anchor Checkpoint // the verified anchor
	Head   Head       // the database's newest entry
}

// Error names both positions and the anchor's time, so that the message
// alone is evidence.
func (e *RollbackError) Error() string {
	return fmt.Sprintf("%v: database head is seq %d (%x) but receiver %q anchored seq %d (%x) at %s",
		ErrRollbackDetected, e.Head.Seq, e.Head.Hash[:], e.Anchor.Receiver,
		e.Anchor.Seq, e.Anchor.Head[:], formatTime(e.Anchor.At))
}

// Unwrap returns ErrRollbackDetected.
func (e *RollbackError) Unwrap() error { return ErrRollbackDetected }

// ForkError reports a database whose entry at the anchored seq is not the
// anchored one. It matches ErrForkDetected.
type ForkError struct {
	Anchor Checkpoint // the verified anchor
	Hash   Hash       // the database's hash at Anchor.Seq
}

// Error names both hashes at the anchored seq and the anchor's time, so that
// the message alone is evidence.
func (e *ForkError) Error() string {
	return fmt.Sprintf("%v: at seq %d the database has %x but receiver %q anchored %x at %s",
		ErrForkDetected, e.Anchor.Seq, e.Hash[:], e.Anchor.Receiver, e.Anchor.Head[:], formatTime(e.Anchor.At))
}

// Unwrap returns ErrForkDetected.
func (e *ForkError) Unwrap() error { return ErrForkDetected }

// formatTime renders Unix nanoseconds the way the anchor file does.
func formatTime(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }
