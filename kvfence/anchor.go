package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
)

// Integrity errors. They are the audit package's sentinels, so errors.Is
// works with either name.
var (
	// ErrRollbackDetected means the database's chain ends before its anchor: an older copy was restored.
	ErrRollbackDetected = audit.ErrRollbackDetected
	// ErrForkDetected means the database's chain has another hash at the anchor's seq.
	ErrForkDetected = audit.ErrForkDetected
	// ErrAnchorMissing means there is no anchor; it is never recreated implicitly.
	ErrAnchorMissing = audit.ErrAnchorMissing
	// ErrBadSignature means the anchor is not signed by the receiver's key.
	ErrBadSignature = audit.ErrBadSignature
	// ErrReceiverMismatch means the anchor names another receiver.
	ErrReceiverMismatch = audit.ErrReceiverMismatch
	// ErrStateMismatch means the state records are not the ones the receiver's checkpoints and writes describe.
	ErrStateMismatch = audit.ErrStateMismatch
	// ErrFenceViolation means the chain records a mutation applied under a superseded grant.
	ErrFenceViolation = audit.ErrFenceViolation
)

var (
	// ErrKeyMismatch means the signing key given does not belong to this receiver.
	ErrKeyMismatch = errors.New("kvfence: signing key does not match the receiver's recorded key")
	// ErrNoAnchor means a receiver was opened for writing without an anchor store or signing key.
	ErrNoAnchor = errors.New("kvfence: a writable receiver needs an anchor store and its signing key")
)

var metaEpochHighWater = []byte("epoch_high_water")

// IsIntegrityError reports whether err says the database, its chain or its
// anchor cannot be trusted: a rollback, fork, bad signature, missing anchor,
// another receiver's anchor, or a chain that records a mutation under a
// superseded grant (a fence violation). The CLI maps these to exit code 4.
func IsIntegrityError(err error) bool {
	for _, target := range []error{audit.ErrRollbackDetected, audit.ErrForkDetected, audit.ErrBadSignature,
		audit.ErrReceiverMismatch, audit.ErrAnchorMissing, audit.ErrBadAnchor, audit.ErrBadCheckpoint,
		audit.ErrBrokenLink, audit.ErrSeqGap, audit.ErrBadEntry, audit.ErrAnchorStale, audit.ErrAnchorNotRegular,
		audit.ErrAnchorPermissions, audit.ErrAnchorRegression, audit.ErrBadAdmission, audit.ErrAdmissionMismatch,
		audit.ErrStateMismatch, audit.ErrFenceViolation, audit.ErrBadArchive, audit.ErrBaseMismatch,
		audit.ErrAdmissionExpired, audit.ErrAdmissionNotYetValid, audit.ErrAdmissionReplayed, audit.ErrTreeMismatch,
		ErrAnchorClusterChanged} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

func epochHighWater(tx engine.Tx) (uint64, error) {
	v, err := tx.Get(bucketMeta, metaEpochHighWater)
	if err != nil || len(v) != 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}

// highWater reads the epoch high-water for a write. Every checkpoint
// signs it and the anchor keeps it (only ever higher), and a recovery
// holds every scope above it: a writable receiver takes it only as it
// verified or wrote it, like the state records (knownrecords.go), never
// as edited in the store under it.
func (w *wtx) highWater() (uint64, error) {
	hw, err := epochHighWater(w.tx)
	if err != nil || w.recs == nil || hw == w.hw {
		return hw, err
	}
	return 0, fmt.Errorf("%w: the epoch high-water is %d in the store, but %d as this receiver verified or wrote it: "+
		"it was changed under the running receiver; nothing was decided on it", audit.ErrStateMismatch, hw, w.hw)
}

// raiseEpochHighWater records that some scope reached epoch e.
func (w *wtx) raiseEpochHighWater(e uint64) error {
	hw, err := w.highWater()
	if err != nil || e <= hw {
		return err
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], e)
	if err := w.tx.Put(bucketMeta, metaEpochHighWater, b[:]); err != nil {
		return err
	}
	w.hw = e
	return nil
}

// checkpoint signs the chain's head as of this transaction and stores it in
// the checkpoints bucket, so the database carries its own latest signed
// statement; the anchor gets the same checkpoint after the commit.
func (w *wtx) checkpoint(receiver string, key ed25519.PrivateKey) (audit.SignedCheckpoint, error) {
	state, err := w.storeState()
	if err != nil {
		return audit.SignedCheckpoint{}, err
	}
	hw, err := w.highWater()
	if err != nil {
		return audit.SignedCheckpoint{}, err
	}
	return w.chain.Checkpoint(key, audit.Checkpoint{Receiver: receiver, State: state, EpochHighWater: hw, At: w.now.UnixNano()})
}

// finishInit writes the first anchor of a receiver whose Init committed the
// database but did not live to write it (chain.Layout.InitCheckpoint).
func (r *Receiver) finishInit() (sc audit.SignedCheckpoint, err error) {
	var recorded []byte
	err = r.view(func(tx engine.Tx) error {
		sc, err = auditChain.InitCheckpoint(tx, r.pub, r.id, r.head)
		if err != nil {
			return err
		}
		recorded, err = tx.Get(bucketMeta, metaAnchorLocation)
		recorded = bytes.Clone(recorded)
		return err
	})
	if err != nil {
		return sc, err
	}
	if err := sameAnchorLocation(r.opts.Anchor, recorded); err != nil {
		return sc, err
	}
	return sc, r.opts.Anchor.Store(nil, sc)
}

// metaAnchorLocation keeps the location (audit.Locator) of the anchor
// given to Init. The meta bucket is outside the state digest; the value
// only decides where finishInit may write a first anchor, and a false one
// makes it refuse, never write elsewhere than the operator's own --anchor.
var metaAnchorLocation = []byte("anchor_location")

// sameAnchorLocation lets finishInit write a first anchor only to the
// store Init was given: a mistyped anchor path holds no anchor either, and
// writing one there would make the mistake look like a working receiver.
func sameAnchorLocation(store audit.AnchorStore, recorded []byte) error {
	l, ok := store.(audit.Locator)
	switch {
	case len(recorded) == 0:
		return fmt.Errorf("%w: the database records no anchor location, so its first anchor is not written at an unverified place",
			audit.ErrAnchorMissing)
	case !ok:
		return fmt.Errorf("%w: the anchor store cannot say where it is, so the first anchor recorded for %s is not written to it",
			audit.ErrAnchorMissing, recorded)
	case l.Location() != string(recorded):
		return fmt.Errorf("%w: no anchor at %s, and init put this receiver's anchor at %s: check the anchor path",
			audit.ErrAnchorMissing, l.Location(), recorded)
	}
	return nil
}

// hashAt returns the hash of the stored entry at seq or, for the newest
// archived entry, the base's hash. An anchor names an archived entry only
// if it is older than the archive (a receiver archives only what its
// anchor covers), which is ErrAnchorStale.
func hashAt(tx engine.Tx, seq uint64) (audit.Hash, error) {
	raw, err := tx.Get(bucketAudit, audit.SeqKey(seq))
	if err != nil {
		return audit.Hash{}, err
	}
	if raw != nil {
		return audit.HashEntry(raw), nil
	}
	_, base, err := readBase(tx)
	switch {
	case err != nil:
		return audit.Hash{}, err
	case seq == base.Seq && seq > 0:
		return base.Hash, nil
	case seq < base.Seq:
		return audit.Hash{}, fmt.Errorf("%w: seq %d was archived (the database's chain continues from seq %d); the receiver archives only "+
			"entries its anchor covers, so an anchor that names it is older than the archive: an old copy of the anchor was put back",
			audit.ErrAnchorArchived, seq, base.Seq)
	}
	return audit.Hash{}, fmt.Errorf("%w: no entry %d", audit.ErrSeqGap, seq)
}

// checkAnchor compares the database with its anchor (docs/design.md §7.5): a chain
// that ends before the anchor is a rollback, another hash at the anchor's
// seq a fork. A chain ahead of the anchor is the window between a commit
// and its anchor write; a writable receiver then moves the anchor up. A
// damaged anchor slot is judged by audit.SlotDamage.Check, which may refuse
// the database as a rollback, and is otherwise reported through
// Options.Warn before the refresh, the next write, overwrites it.
func (r *Receiver) checkAnchor() error {
	a, damage, err := audit.LoadWithDamage(r.opts.Anchor)
	if errors.Is(err, audit.ErrAnchorMissing) && !r.opts.ReadOnly {
		a, err = r.finishInit()
	}
	if err != nil {
		return fmt.Errorf("kvfence: %s: anchor: %w", r.path, err)
	}
	err = r.view(func(tx engine.Tx) error {
		if !r.file {
			// Another process may have committed and moved the anchor
			// since load read the head (etcd): the head is read again,
			// after the anchor, so that it is at or past it unless the
			// store was rolled back.
			head, mismatch, err := auditChain.LoadHead(tx)
			if err != nil {
				return chainErr(r.path, err)
			}
			r.head, r.headMismatch = head, mismatch
		}
		at := func(seq uint64) (audit.Hash, error) { return hashAt(tx, seq) }
		if err := checkBase(tx); err != nil {
			return err
		}
		if err := audit.CheckAnchor(a, r.pub, r.id, r.head, at); err != nil {
			return err
		}
		return damage.Check(a.Checkpoint, r.pub, r.id, r.head, at)
	})
	if errors.Is(err, audit.ErrAnchorArchived) {
		// See verifyChain: the anchor is blamed only if the database's
		// own newest checkpoint covers its chain.
		if _, serr := r.checkState(nil); errors.Is(serr, audit.ErrStateMismatch) {
			err = serr
		}
	}
	if err != nil {
		return fmt.Errorf("kvfence: %s: %w", r.path, err)
	}
	if _, err := r.checkState(&a); err != nil {
		return fmt.Errorf("kvfence: %s: %w", r.path, err)
	}
	if !r.defect.SkipAuthority || !defectsAllowed.Load() {
		// A receiver without its fence checks (the lab's) replays no
		// fence either: it goes on serving the chain it broke.
		if err := r.replayChain(a); err != nil {
			return err
		}
		r.treeChecked = true
	}
	r.setAnchor(a)
	if damage != nil {
		r.anchorDamage = damage
		r.opts.Warn(fmt.Sprintf("kvfence: %s: %v; %s", r.path, damage, damageVerdict(damage, a, r.head)))
	}
	if r.witnesses != nil {
		// Before the refresh below, which would ask them to cosign: a
		// database behind a witness must not show it a checkpoint.
		res, err := r.checkWitnesses(r.witnesses, r.witnessTimeout(), nil)
		if err != nil {
			return err
		}
		r.keepCosigned(res)
	}
	if r.opts.ReadOnly || a.Seq == r.head.Seq {
		return nil
	}
	// Refresh: the anchor moves up to the database's own newest
	// checkpoint, which this open verified, rather than a new signature
	// of that size: one size, one signed body (witnesses that cosigned
	// it would refuse another account of it for ever).
	return r.refreshStored()
}

// damageVerdict says why a damaged slot that Check let pass is no alarm,
// for the warning.
func damageVerdict(d *audit.SlotDamage, a audit.SignedCheckpoint, head audit.Head) string {
	if !d.Next() {
		return "the current anchor is the newest one written; check who or what damaged the file"
	}
	return fmt.Sprintf("the database (seq %d) is past the current anchor (seq %d), as a crash during the "+
		"anchor write after a commit leaves it; if there was no crash, the file was damaged on purpose", head.Seq, a.Seq)
}

// AnchorDamage returns the damaged anchor slot that Open found beside the
// anchor it checked, or nil if there was none or no anchor was checked.
// Open reported it through Options.Warn; a writable receiver's next write
// overwrites that slot, so this is the record of it.
func (r *Receiver) AnchorDamage() *audit.SlotDamage {
	if r.anchorDamage == nil {
		return nil
	}
	d := *r.anchorDamage
	if d.Anchor != nil {
		sc := *d.Anchor
		d.Anchor = &sc
	}
	return &d
}
