package audit

import (
	"crypto/ed25519"
	"fmt"
)

// SlotProblem says why a slot of an anchor file is damaged. The values are
// stable: the CLI prints them in its JSON output.
type SlotProblem string

// The ways a slot can be damaged, in the order in which a slot is checked.
const (
	// SlotErased means the slot is all zero bytes although the current
	// generation shows that it was written.
	SlotErased SlotProblem = "erased"
	// SlotMalformedHeader means the header is not as written for any
	// generation and length.
	SlotMalformedHeader SlotProblem = "malformed header"
	// SlotChecksumMismatch means the header is well-formed but its SHA-256
	// does not match its generation, length and anchor text.
	SlotChecksumMismatch SlotProblem = "checksum mismatch"
	// SlotNonZeroPadding means the bytes after the anchor text are not all
	// zero.
	SlotNonZeroPadding SlotProblem = "non-zero padding"
	// SlotBadAnchorText means the checksum matches but the anchor text is
	// not a canonical anchor.
	SlotBadAnchorText SlotProblem = "bad anchor text"
)

// SlotDamage describes the slot of an anchor file that is not current and
// is damaged: the slot Load skips. A crash during an anchor write leaves
// it, and so does anyone who damages the newest slot on purpose; the
// receiver tells the two apart with Check.
type SlotDamage struct {
	// Slot is the damaged slot's index, 0 or 1.
	Slot int
	// Problem says why the slot is damaged.
	Problem SlotProblem
	// Detail describes the damage as the slot was read.
	Detail string
	// ClaimedGeneration is the generation the slot was written at: the one
	// its header names or, if the header is damaged, the one under which
	// the slot's checksum still matches it. It is 0 when neither tells.
	ClaimedGeneration uint64
	// CurrentGeneration is the generation of the current slot, the one
	// Load returns.
	CurrentGeneration uint64
	// Anchor is the checkpoint the slot's anchor text still holds, if the
	// text parses; nil otherwise. It is not verified: only a signature
	// under the receiver's key makes it evidence.
	Anchor *SignedCheckpoint
}

// Next reports whether the damaged slot claims the generation after the
// current one: it is the newest write, and the anchor Load returns is one
// write behind it.
func (d *SlotDamage) Next() bool {
	return d.ClaimedGeneration != 0 && d.ClaimedGeneration == d.CurrentGeneration+1
}

// String describes the damage in one line for warnings and reports.
func (d *SlotDamage) String() string {
	s := fmt.Sprintf("anchor slot %d is damaged: %s", d.Slot, d.Detail)
	switch {
	case d.ClaimedGeneration == 0:
		return s + fmt.Sprintf("; its generation cannot be read; the current slot holds generation %d", d.CurrentGeneration)
	case d.Next():
		return s + fmt.Sprintf("; it was written as generation %d, the write after the current slot's generation %d",
			d.ClaimedGeneration, d.CurrentGeneration)
	}
	return s + fmt.Sprintf("; it was written as generation %d, beside the current slot's generation %d",
		d.ClaimedGeneration, d.CurrentGeneration)
}

// Check applies the anchor rule for a damaged slot (see Anchor Rules in
// the package documentation) to a database whose chain ends at head and
// which has passed CheckAnchor against cur, the current slot's anchor.
// hashAt returns the hash of the stored entry at a seq below head.Seq. A
// nil d, or damage that a crash can explain, is no error.
//
// The receiver commits to its database before it writes the anchor, so an
// anchor write of the generation after the current one began only once the
// database had committed past cur.Seq. If the damaged slot holds that
// generation and its checkpoint still verifies under pub for receiver, the
// database must contain that checkpoint: a chain that ends before it is a
// *RollbackError, one with another hash at its seq a *ForkError, each
// wrapped with the slot's description. If the checkpoint cannot be read or
// does not verify, a chain that ends exactly at cur.Seq is a
// *SuspectedRollbackError; a chain past cur.Seq is the crash window, which
// the caller should only report.
func (d *SlotDamage) Check(cur Checkpoint, pub ed25519.PublicKey, receiver string, head Head, hashAt func(seq uint64) (Hash, error)) error {
	if d == nil || !d.Next() {
		return nil
	}
	if d.Anchor != nil && checkTrusted(*d.Anchor, pub, receiver) == nil {
		if err := d.Anchor.CheckHead(head, hashAt); err != nil {
			return fmt.Errorf("%v, and the checkpoint it holds is signed by the receiver: %w", d, err)
		}
		return nil
	}
	if head.Seq == cur.Seq {
		return &SuspectedRollbackError{Damage: *d, Anchor: cur, Head: head}
	}
	return nil
}

// SuspectedRollbackError reports a database that ends exactly at the anchor
// in the current slot while the other slot, damaged, holds the generation
// after it: the write that damaged it was covering a commit the database
// does not have. It matches ErrRollbackDetected.
type SuspectedRollbackError struct {
	Damage SlotDamage // the damaged slot
	Anchor Checkpoint // the current slot's anchor, verified
	Head   Head       // the database's newest entry
}

// Error names the database head, the current anchor and the damaged slot,
// and says why together they point to a restored copy.
func (e *SuspectedRollbackError) Error() string {
	return fmt.Sprintf("%v: database head is seq %d (%x), exactly the seq receiver %q anchored at %s in the current slot, "+
		"but %v; the receiver writes an anchor only after it has committed past the anchored seq, so the database is "+
		"older than that interrupted write: a copy restored to the previous write is suspected",
		ErrRollbackDetected, e.Head.Seq, e.Head.Hash[:], e.Anchor.Receiver, formatTime(e.Anchor.At), &e.Damage)
}

// Unwrap returns ErrRollbackDetected.
func (e *SuspectedRollbackError) Unwrap() error { return ErrRollbackDetected }

// AnchorFileReport is a full account of an anchor file's two slots.
type AnchorFileReport struct {
	// Current is the anchor in the current slot: what Load returns.
	Current SignedCheckpoint
	// Slot is the current slot's index, 0 or 1.
	Slot int
	// Generation is the current slot's generation.
	Generation uint64
	// Damage describes the other slot if it is damaged; it is nil if that
	// slot is valid, or empty beside generation 1 as in a new file.
	Damage *SlotDamage
}

// DamageReporter is implemented by anchor stores that can account for
// what Load skips, as FileAnchor does. Callers that decide whether to
// trust a database use it, through LoadWithDamage, so that damage is
// reported before a Store overwrites it.
type DamageReporter interface {
	// Inspect reads the anchor as Load does, with the same errors, and
	// also describes a damaged slot.
	Inspect() (AnchorFileReport, error)
}

// LoadWithDamage loads s's anchor and, if s is a DamageReporter, the
// damage its Load skips; for other stores the damage is nil.
func LoadWithDamage(s AnchorStore) (SignedCheckpoint, *SlotDamage, error) {
	if dr, ok := s.(DamageReporter); ok {
		rep, err := dr.Inspect()
		if err != nil {
			return SignedCheckpoint{}, nil, err
		}
		return rep.Current, rep.Damage, nil
	}
	sc, err := s.Load()
	return sc, nil, err
}
