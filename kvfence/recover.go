package kvfence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/kvfence/kvfence/internal/defect"
	"iter"
	"math"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/chain"
	"github.com/kvfence/kvfence/witness"
)

// KindRecovered is the audit kind of an ordinary recovery admission's
// entry: a questioned database re-admitted over its anchor.
const KindRecovered = audit.KindRecovered

// KindReanchored is the audit kind of a lost-anchor admission's entry: a
// database whose anchor was missing or damaged, given a new one. It is a
// kind of its own so that the chain says which authority was used.
const KindReanchored = audit.KindReanchored

// Questioned describes a database whose history disagrees with its anchor,
// or whose anchor is lost, as a recovery operator needs to see it before
// signing an admission.
type Questioned struct {
	// Receiver is the receiver id recorded in the database.
	Receiver string
	// Anchor is the anchor's position, zero from InspectDatabase.
	Anchor audit.Head
	// Head is the position of the database's newest entry.
	Head audit.Head
	// EpochHighWater is the highest epoch the anchor vouches for; 0 from
	// InspectDatabase.
	EpochHighWater uint64
	// AnchorDamage describes a damaged slot beside the anchor, if the
	// anchor store reports one (audit.DamageReporter); nil otherwise. A
	// recovery supersedes the anchor above, and its write overwrites the
	// damaged slot.
	AnchorDamage *audit.SlotDamage
	// DatabaseEpochHighWater is the highest epoch the database itself
	// records: its epoch high-water, or a scope's epoch if one is higher.
	// Nothing vouches for it: a restored copy shows what it had when it
	// was copied, which is why a lost-anchor admission carries an epoch
	// floor of its own.
	DatabaseEpochHighWater uint64
	// State is the sum of the database's fence state digest, recomputed
	// from its records: what an admission admits along with Head, so that
	// records changed after the admission was signed are refused.
	State audit.Hash
	// Root is the RFC 6962 root of the database's audit tree at Head's
	// seq: what an admission naming witnesses admits along with Head
	// (audit.Admission.AdmittedRoot), so that a witness moves only to a
	// tree that holds it.
	Root audit.Hash
}

// Inspect reads a receiver's database head and its anchor without checking
// one against the other and without changing either, for preparing a
// recovery admission. It verifies the anchor's signature under the
// receiver's recorded key.
func Inspect(path string, anchor audit.AnchorStore) (Questioned, error) {
	r, err := Open(path, &Options{ReadOnly: true, anchorUnchecked: true})
	if err != nil {
		return Questioned{}, err
	}
	defer r.Close()
	return r.inspectAnchored(path, anchor)
}

// InspectEngine is Inspect for a receiver kept in e (OpenEngine), which it
// closes when it returns.
func InspectEngine(e engine.Engine, anchor audit.AnchorStore) (Questioned, error) {
	r, err := openWith(e, "engine store", false, &Options{ReadOnly: true, anchorUnchecked: true}, defect.Variant{})
	if err != nil {
		return Questioned{}, err
	}
	defer r.Close()
	return r.inspectAnchored(r.path, anchor)
}

// inspectAnchored is Inspect on an open, read-only receiver.
func (r *Receiver) inspectAnchored(path string, anchor audit.AnchorStore) (Questioned, error) {
	q, err := r.inspect()
	if err != nil {
		return Questioned{}, err
	}
	a, damage, err := audit.LoadWithDamage(anchor)
	if err != nil {
		return Questioned{}, fmt.Errorf("kvfence: %s: anchor: %w", path, err)
	}
	if err := a.Verify(r.pub); err != nil {
		return Questioned{}, fmt.Errorf("kvfence: %s: anchor: %w", path, err)
	}
	q.Anchor, q.EpochHighWater, q.AnchorDamage = audit.Head{Seq: a.Seq, Hash: a.Head}, a.EpochHighWater, damage
	return q, nil
}

// InspectDatabase reads a receiver's database head and epoch high-water
// and nothing of its anchor, for preparing a lost-anchor admission when
// the anchor is missing or damaged. It changes nothing. Anchor and
// EpochHighWater are zero.
func InspectDatabase(path string) (Questioned, error) {
	r, err := Open(path, &Options{ReadOnly: true, anchorUnchecked: true})
	if err != nil {
		return Questioned{}, err
	}
	defer r.Close()
	return r.inspect()
}

// inspect reads what the database alone says about a recovery.
func (r *Receiver) inspect() (Questioned, error) {
	q := Questioned{Receiver: r.id, Head: r.head}
	state, err := r.computeState(nil)
	if err != nil {
		return q, err
	}
	q.State = state.Sum()
	err = r.view(func(tx engine.Tx) error {
		var err error
		if q.DatabaseEpochHighWater, err = epochHighWater(tx); err != nil {
			return err
		}
		root, err := auditChain.TreeHash(tx, q.Head.Seq)
		if err != nil {
			return fmt.Errorf("the audit tree at seq %d: %w", q.Head.Seq, err)
		}
		q.Root = audit.Hash(root)
		scopes, err := scopeNames(tx)
		if err != nil {
			return err
		}
		for _, s := range scopes {
			ctl, err := getControl(tx, s)
			if err != nil {
				return err
			}
			q.DatabaseEpochHighWater = max(q.DatabaseEpochHighWater, ctl.Epoch)
		}
		return nil
	})
	return q, err
}

// scopeNames returns every scope's name. They are read before any control
// record is rewritten, because a bbolt cursor may skip or repeat keys when
// its bucket changes under it.
func scopeNames(tx engine.Tx) ([]string, error) {
	var names []string
	err := tx.Scan(bucketControl, nil, func(k, _ []byte) error {
		names = append(names, string(k))
		return nil
	})
	return names, err
}

// RecoverOptions configures Recover.
type RecoverOptions struct {
	// Key is the receiver's signing key, for the new anchor.
	Key ed25519.PrivateKey
	// Anchor is the receiver's anchor store: an ordinary admission
	// supersedes the anchor in it; after a lost-anchor admission a new
	// anchor is stored in it, where there was none.
	Anchor audit.AnchorStore
	// RecoveryKey is the operator's copy of the recovery public key. It
	// must equal the one recorded at Init: a database cannot vouch for
	// its own recovery key.
	RecoveryKey ed25519.PublicKey
	// Now is the receiver's clock, and the one the admission's expiry is
	// checked against. Nil means time.Now.
	Now func() time.Time
	// LockTimeout is as in Options.
	LockTimeout time.Duration
	// Witnesses and WitnessQuorum are the receiver's witnesses, as in
	// Options. With them, Recover asks every witness for its latest
	// checkpoint of the receiver, needs N-K+1 answers (ErrWitnessAnswers),
	// and refuses the admission (audit.ErrAdmissionMismatch, naming the
	// witness) unless it names every witness that answered with a
	// checkpoint at exactly that size and root: the recovery key decided
	// against what the witnesses hold now. An admission that names
	// witnesses is refused without them (ErrInvalidArgument). The
	// admission is kept, so that the receiver can show it to a witness
	// still on the superseded tree (Quorum.SetRecovery).
	Witnesses []witness.Member
	// WitnessQuorum is K, as in Options.
	WitnessQuorum int
	// WitnessFaults is F, as in Options.
	WitnessFaults int
	// WitnessTimeout bounds the question to the witnesses, as in Options.
	WitnessTimeout time.Duration
	// AnchorClusterID is the operator's statement of the anchor's
	// cluster, 0 for none. A recovery on an anchor on another cluster
	// than the one the receiver records moves the record only if this
	// names the cluster that answers: the admission does not name it.
	AnchorClusterID uint64
}

// RecoverResult reports an applied recovery.
type RecoverResult struct {
	// AuditSeq is the seq of the recovery's own entry, recovered or
	// reanchored.
	AuditSeq uint64
	// LostAnchor says that a lost-anchor admission was applied: the
	// anchor was created afresh, not superseded.
	LostAnchor bool
	// Scopes lists every scope's epochs; all are now held.
	Scopes []HeldScope
	// GrantsRevoked counts the grant records this recovery marked revoked;
	// records revoked by an earlier recovery keep their mark.
	GrantsRevoked int
	// Anchor is the position the new anchor covers: the chain's head after
	// the recovery.
	Anchor audit.Head
}

// Recover re-admits a database on the strength of an admission signed by
// the separately held recovery key, of either kind:
//
//   - An ordinary admission re-admits a database whose history was
//     questioned (a rollback or fork); it must name this receiver, its
//     current anchor and its database head, and the anchor is then
//     superseded.
//   - A lost-anchor admission re-anchors a database whose anchor is
//     missing; it must name this receiver and its database head, and a new
//     anchor is then stored where there was none. It is refused while the
//     store holds an anchor that loads (ErrAnchorPresent, which also
//     matches audit.ErrAdmissionMismatch): an ordinary admission is the way
//     to supersede one. An anchor file that is damaged as a whole
//     (audit.ErrBadAnchor) is refused too: it is evidence, and Recover
//     never replaces or moves it; the operator moves it aside first.
//
// In one transaction Recover appends a "recovered" or "reanchored" entry
// naming the admission by its SHA-256, sets every scope's epoch above the
// database's epoch high-water, the scope's own epoch, and the anchor's
// epoch high-water or the admission's epoch floor, holds every scope,
// clears every active grant and marks every grant record revoked; then it
// writes the anchor. A grant minted before the recovery can therefore
// never be used again.
//
// An admission is refused once it has expired by opts.Now, or if it was
// signed more than audit.MaxAdmissionSkew ahead of it
// (audit.ErrAdmissionExpired, audit.ErrAdmissionNotYetValid). The
// recovery's checkpoint names the admission (audit.AdmissionRecord), and
// every later one carries it, so an admission that the anchor, a damaged
// anchor slot that still verifies, or the database's newest checkpoint
// names, or one signed no later, is refused (audit.ErrAdmissionReplayed):
// an admission is used once while the anchor its recovery wrote, or a
// later one, survives.
//
// If the anchor write fails after the commit, the error says so; the
// database is then ahead of the admission, and a new admission for the
// new head is needed. Nothing short of the recovery key adopts an
// anchorless database: a restored copy of a recovered one would otherwise
// slip back in.
func Recover(path string, admission []byte, opts RecoverOptions) (RecoverResult, error) {
	return recoverWith(path, admission, opts, func(o *Options) (*Receiver, error) { return Open(path, o) })
}

// RecoverEngine is Recover for a receiver kept in e (OpenEngine), which it
// closes when it returns.
func RecoverEngine(e engine.Engine, admission []byte, opts RecoverOptions) (RecoverResult, error) {
	return recoverWith("engine store", admission, opts, func(o *Options) (*Receiver, error) {
		return openWith(e, "engine store", false, o, defect.Variant{})
	})
}

// recoverWith runs Recover on the receiver that open opens; path names it
// in messages.
func recoverWith(path string, admission []byte, opts RecoverOptions, open func(*Options) (*Receiver, error)) (RecoverResult, error) {
	if len(opts.RecoveryKey) != ed25519.PublicKeySize {
		return RecoverResult{}, fmt.Errorf("%w: the recovery public key is required", ErrInvalidArgument)
	}
	if len(opts.Key) == ed25519.PrivateKeySize && opts.RecoveryKey.Equal(opts.Key.Public()) {
		// The point of an admission is a second authority, as Init and
		// witness trust --recovery-pub say.
		return RecoverResult{}, ErrRecoveryKeyIsReceiverKey
	}
	if opts.Anchor == nil {
		return RecoverResult{}, fmt.Errorf("%w: an anchor store is required", ErrInvalidArgument)
	}
	sa, err := audit.ParseSignedAdmission(admission)
	if err != nil {
		return RecoverResult{}, err
	}
	if err := sa.Verify(opts.RecoveryKey); err != nil {
		return RecoverResult{}, err
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	if err := sa.CheckTime(now()); err != nil {
		return RecoverResult{}, err
	}
	r, err := open(&Options{Key: opts.Key, Now: opts.Now, LockTimeout: opts.LockTimeout, anchorUnchecked: true})
	if err != nil {
		return RecoverResult{}, err
	}
	defer r.Close()
	if r.recoveryPub == nil || !r.recoveryPub.Equal(opts.RecoveryKey) {
		return RecoverResult{}, fmt.Errorf("%w: the recovery key given is not the one recorded at init", audit.ErrBadSignature)
	}
	if err := r.checkRecoveryCluster(opts.Anchor, opts.AnchorClusterID); err != nil {
		return RecoverResult{}, err
	}
	digest := sha256.Sum256(admission)
	consumed := audit.AdmissionRecord{SHA256: digest, At: sa.At}
	// The database's own newest checkpoint may say that this admission was
	// used; a copy put back from before the recovery does not, which is
	// why the anchor is asked as well, below.
	if latest, err := r.latestSigned(); err == nil {
		if err := r.checkNotConsumed(consumed, "the database's newest checkpoint", latest); err != nil {
			return RecoverResult{}, err
		}
	}
	rc := recovery{consumed: consumed, reason: sa.Reason}
	var old *audit.SignedCheckpoint
	if sa.LostAnchor {
		if err := r.checkAnchorLost(path, opts.Anchor, consumed); err != nil {
			return RecoverResult{}, err
		}
		if err := sa.CheckLostAnchor(r.id, r.head, r.stateSum); err != nil {
			return RecoverResult{}, err
		}
		rc.kind, rc.floor = KindReanchored, sa.EpochFloor
		rc.detail = fmt.Sprintf("lost anchor; admitted head %v; epoch floor %d; admission sha256 %x",
			sa.AdmittedHead, sa.EpochFloor, digest)
	} else {
		a, damage, err := audit.LoadWithDamage(opts.Anchor)
		if err != nil {
			return RecoverResult{}, fmt.Errorf("kvfence: %s: anchor: %w", path, err)
		}
		if err := a.Verify(r.pub); err != nil {
			return RecoverResult{}, fmt.Errorf("kvfence: %s: anchor: %w", path, err)
		}
		if err := r.checkAnchorNotConsumed(path, a, damage, consumed); err != nil {
			return RecoverResult{}, err
		}
		if err := sa.Admission.Check(r.id, audit.Head{Seq: a.Seq, Hash: a.Head}, r.head, r.stateSum); err != nil {
			return RecoverResult{}, err
		}
		old = &a
		rc.kind, rc.floor = KindRecovered, a.EpochHighWater
		rc.detail = fmt.Sprintf("superseded anchor %v; admitted head %v; admission sha256 %x",
			sa.SupersededAnchor, sa.AdmittedHead, digest)
	}
	if err := r.checkRecoveryWitnesses(sa, opts); err != nil {
		return RecoverResult{}, fmt.Errorf("kvfence: %s: %w", path, err)
	}
	rc.admission = admission
	if err := CheckApart(r.eng, opts.Anchor); err != nil {
		return RecoverResult{}, err
	}
	if err := r.checkTreeForRecovery(); err != nil {
		return RecoverResult{}, fmt.Errorf("kvfence: %s: %w: %w", path, ErrBadFormat, err)
	}
	if rc.cluster, err = anchorClusterRecord(opts.Anchor); err != nil {
		return RecoverResult{}, err
	}
	res, sc, err := r.applyRecovery(&rc, opts.Key)
	if err != nil {
		return RecoverResult{}, err
	}
	if old != nil {
		err = opts.Anchor.Supersede(*old, sc)
	} else {
		err = opts.Anchor.Store(nil, sc)
	}
	if err != nil {
		return RecoverResult{}, fmt.Errorf("kvfence: %s: recovered, but the anchor was not written: %w", path, err)
	}
	res.LostAnchor = sa.LostAnchor
	res.Anchor = audit.Head{Seq: sc.Seq, Hash: sc.Head}
	return res, nil
}

// checkNotConsumed refuses the admission that consumed names if sc, when
// it is this receiver's signed checkpoint, records it or a later one as
// consumed; where names sc in the error.
func (r *Receiver) checkNotConsumed(consumed audit.AdmissionRecord, where string, sc audit.SignedCheckpoint) error {
	if sc.Verify(r.pub) != nil || sc.Receiver != r.id {
		// Not signed by this receiver, it says nothing either way; the
		// checks that follow judge the database and the anchor.
		return nil
	}
	if err := sc.Admission.Refuses(consumed.SHA256, consumed.At); err != nil {
		return fmt.Errorf("%w (%s, seq %d)", err, where, sc.Seq)
	}
	return nil
}

// checkTreeForRecovery checks the stored tree before a recovery signs a
// root over it: the recovery opens the database without its anchor, so no
// replay has checked the tree, and its checkpoint takes the root from the
// stored records. The records must be the ones the stored entries make,
// and the root at the database's newest checkpoint, when that verifies
// with the receiver's key, the one it signs (which also covers the
// records of archived leaves that the entries cannot); otherwise the
// error wraps audit.ErrTreeMismatch.
func (r *Receiver) checkTreeForRecovery() error {
	return r.view(func(tx engine.Tx) error {
		if err := auditChain.CheckTree(tx); err != nil {
			return err
		}
		latest, err := auditChain.LatestCheckpoint(tx)
		if err != nil || latest.Receiver != r.id || latest.Verify(r.pub) != nil {
			// No signed root to compare with: the check of the
			// records against the entries above is all there is.
			return nil
		}
		return auditChain.CheckRoot(tx, latest.Checkpoint, "the database's newest checkpoint")
	})
}

// latestSigned returns the database's own newest signed checkpoint.
func (r *Receiver) latestSigned() (sc audit.SignedCheckpoint, err error) {
	err = r.view(func(tx engine.Tx) error {
		sc, err = latestCheckpoint(tx)
		return err
	})
	return sc, err
}

// checkAnchorNotConsumed refuses an admission that the anchor a, or the
// damaged slot beside it if it still holds this receiver's checkpoint,
// records as consumed (or one signed before that).
func (r *Receiver) checkAnchorNotConsumed(path string, a audit.SignedCheckpoint, damage *audit.SlotDamage,
	consumed audit.AdmissionRecord) error {
	if err := r.checkNotConsumed(consumed, "the anchor", a); err != nil {
		return fmt.Errorf("kvfence: %s: %w", path, err)
	}
	if damage != nil && damage.Anchor != nil {
		if err := r.checkNotConsumed(consumed, "the anchor's damaged slot", *damage.Anchor); err != nil {
			return fmt.Errorf("kvfence: %s: %w", path, err)
		}
	}
	return nil
}

// checkAnchorLost returns nil only if anchor holds no anchor at all: the
// one state a lost-anchor admission may be applied in. An anchor that
// records consumed as used is named as such (ErrAdmissionReplayed).
func (r *Receiver) checkAnchorLost(path string, anchor audit.AnchorStore, consumed audit.AdmissionRecord) error {
	a, damage, err := audit.LoadWithDamage(anchor)
	if err == nil {
		if err := r.checkAnchorNotConsumed(path, a, damage, consumed); err != nil {
			return err
		}
	}
	switch {
	case err == nil:
		return fmt.Errorf("%w: the anchor store holds seq %d for receiver %q (%w)", ErrAnchorPresent, a.Seq, a.Receiver,
			audit.ErrAdmissionMismatch)
	case errors.Is(err, audit.ErrAnchorMissing):
		return nil
	case errors.Is(err, audit.ErrBadAnchor):
		// A damaged file is what an attack or a fault left behind; writing
		// over it or renaming it is the operator's decision, not ours.
		return fmt.Errorf("kvfence: %s: anchor: %w; it is kept as evidence and not replaced: move it aside, "+
			"then apply the admission again", path, err)
	default:
		return fmt.Errorf("kvfence: %s: anchor: %w", path, err)
	}
}

// recovery is what an admission of either kind does to the database.
type recovery struct {
	kind   string // KindRecovered or KindReanchored
	floor  uint64 // every scope is held above it
	detail string // what the admission named, for the entry's note
	reason string
	// consumed names the admission, for the checkpoints from this one on.
	consumed audit.AdmissionRecord
	// admission is the signed admission, kept under
	// metaRecoveryAdmission.
	admission []byte
	// cluster is metaAnchorCluster's new value: the anchor's cluster, which
	// the recovery key's authority may have moved, to a cluster the
	// operator stated (checkRecoveryCluster).
	cluster []byte
}

// applyRecovery runs a recovery's one write transaction and returns the
// checkpoint it signed, for the anchor.
func (r *Receiver) applyRecovery(rc *recovery, key ed25519.PrivateKey) (RecoverResult, audit.SignedCheckpoint, error) {
	var res RecoverResult
	var sc audit.SignedCheckpoint
	err := r.eng.Update(context.Background(), func(tx engine.Tx) error {
		w, err := r.newWtx(tx)
		if errors.Is(err, errHeadMoved) {
			return fmt.Errorf("%w: %w", audit.ErrAdmissionMismatch, err)
		}
		if err != nil {
			return err
		}
		// The admission was checked against the head and state that Open
		// read. On a store that other processes write (etcd) another
		// commit may have landed since: the recovery then rests on a
		// database the admission never named, with a state digest taken
		// from the store unchecked, and must not be signed into a
		// checkpoint. The head read here is compared at the commit.
		if got := w.chain.Started(); got != r.head {
			return fmt.Errorf("%w: the database head moved from %v to %v after the admission was checked",
				audit.ErrAdmissionMismatch, r.head, got)
		}
		w.now = r.opts.Now()
		res = RecoverResult{}
		if err := tx.Put(bucketMeta, metaAnchorCluster, rc.cluster); err != nil {
			return err
		}
		if err := tx.Put(bucketMeta, metaRecoveryAdmission, rc.admission); err != nil {
			return err
		}
		// The recovery's entry is the next one; the revoked grants name it.
		seq := w.chain.Head().Seq + 1
		scopes, err := scopeNames(tx)
		if err != nil {
			return err
		}
		hw, err := w.highWater()
		if err != nil {
			return err
		}
		floor := max(rc.floor, hw)
		if err := w.checkScan(0, len(scopes)); err != nil {
			return err
		}
		for _, scope := range scopes {
			ctl, err := w.control(scope)
			if err != nil {
				return err
			}
			base := max(floor, ctl.Epoch)
			if base == math.MaxUint64 {
				return fmt.Errorf("%w: %s", ErrEpochExhausted, scope)
			}
			// No Ack: a recovery may move an epoch by more than one, which
			// no hold acknowledgment states; its admission and the
			// recovered entry are its evidence.
			res.Scopes = append(res.Scopes, HeldScope{Scope: scope, PreviousEpoch: ctl.Epoch, Epoch: base + 1})
			ctl.Epoch, ctl.Mode, ctl.ActiveGrant = base+1, ModeHeld, ""
			ctl.HoldRequestedAt, ctl.HoldCommittedAt = w.now.UnixNano(), w.now.UnixNano()
			if err := w.putControl(scope, ctl); err != nil {
				return err
			}
		}
		// The floor is the highest epoch known to have been used, even with
		// no scope at it now; the high-water keeps it for the checkpoints.
		if err := w.raiseEpochHighWater(rc.floor); err != nil {
			return err
		}
		for _, s := range res.Scopes {
			if err := w.raiseEpochHighWater(s.Epoch); err != nil {
				return err
			}
		}
		if res.GrantsRevoked, err = w.revokeGrants(seq); err != nil {
			return err
		}
		if hw, err = w.highWater(); err != nil {
			return err
		}
		got, err := w.appendAudit(&audit.Entry{Kind: rc.kind, Epoch: hw,
			Note: fmt.Sprintf("%s; scopes held %d, grants revoked %d; reason: %s",
				rc.detail, len(res.Scopes), res.GrantsRevoked, rc.reason)})
		if err != nil {
			return err
		}
		if got != seq {
			return fmt.Errorf("kvfence: recovery entry is seq %d, its grants name %d", got, seq)
		}
		res.AuditSeq = got
		w.chain.Carry(rc.consumed)
		sc, err = w.checkpoint(r.id, key)
		return err
	})
	return res, sc, engineErr(err)
}

// revokeGrants marks every grant record not yet revoked as revoked by the
// entry at seq, and returns how many it marked. The records stay, as the
// history that receipts and audit entries refer to.
func (w *wtx) revokeGrants(seq uint64) (int, error) {
	var ids [][]byte
	if err := w.tx.Scan(bucketGrants, nil, func(k, _ []byte) error {
		ids = append(ids, bytes.Clone(k))
		return nil
	}); err != nil {
		return 0, err
	}
	if err := w.checkScan(1, len(ids)); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		g, err := w.grant(string(id))
		if err != nil {
			return 0, err
		}
		if g == nil {
			return 0, fmt.Errorf("%w: grant %q is a bucket, not a record", ErrBadFormat, id)
		}
		if g.RevokedSeq != 0 {
			continue
		}
		g.RevokedSeq = seq
		if err := w.put(bucketGrants, id, g); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// VerifyOptions configures VerifyChain.
type VerifyOptions struct {
	// Anchor is the anchor store to check against.
	Anchor audit.AnchorStore
	// PublicKey is the receiver's public key, from the operator (not from
	// the database).
	PublicKey ed25519.PublicKey
	// MaxAge, if positive, reports an anchor older than this as stale.
	MaxAge time.Duration
	// LockTimeout is as in Options.
	LockTimeout time.Duration
	// Progress, if set, is called with the number of entries read so far
	// every ProgressEvery entries.
	Progress func(entries uint64)
	// Archives are the archive files that hold the entries the database
	// no longer does, oldest first (Admin.Archive). With them the whole
	// history is verified, from seq 1; without them the chain is verified
	// from its base, the newest archived entry.
	Archives []audit.ArchiveSource
	// AnchorClusterID is as in Options.
	AnchorClusterID uint64
	// AnchorIsCheckpoint says Anchor holds a checkpoint the caller keeps
	// itself (a backup's, package backup), not the receiver's anchor
	// store: the anchor cluster recorded at Init, which says where the
	// live anchor is kept, is then not held against it. Its signature,
	// receiver and position are checked as any anchor's.
	AnchorIsCheckpoint bool
	// Witnesses and WitnessQuorum are as in Options: once the chain,
	// state and tree verified, every witness is asked for its latest
	// cosigned checkpoint, and one ahead of the database is reported as
	// rollback_detected, one beside it as fork_detected. Fewer than N-K+1
	// answers is an error (ErrWitnessAnswers): the check could not be
	// made.
	Witnesses []witness.Member
	// WitnessQuorum is K, as in Options.
	WitnessQuorum int
	// WitnessFaults is F, as in Options.
	WitnessFaults int
	// WitnessTimeout is as in Options.
	WitnessTimeout time.Duration
	// RecoveryKey is the caller's copy of the receiver's recovery public
	// key, if it has one. After a recovery, a witness still on the tree
	// the recovery superseded is reported as diverged unless the
	// admission the database keeps verifies with this key and names the
	// witness at exactly what it holds: VerifyChain holds no key to show
	// the admission to the witnesses (Open does), and the key the
	// database itself records proves nothing (whoever restored the
	// database could have written it). The receiver's own key is refused
	// (ErrRecoveryKeyIsReceiverKey).
	RecoveryKey ed25519.PublicKey
}

// ProgressEvery is how many entries VerifyChain reads between calls of
// VerifyOptions.Progress.
const ProgressEvery = 100_000

// VerifyChain checks every entry of the receiver's audit chain against its
// anchor and reports the first problem; it changes neither. It also
// replays each scope's control state from the chain and reports an applied
// mutation under a grant that was not the scope's active grant as
// audit.ProblemFenceViolation: the evidence of a receiver that skipped
// checks 2-4 (see audit.Verify). It opens the database read-only and
// streams the chain, so memory grows with the number of scopes, not with
// the length of the log. The error is for faults that prevent checking (a
// missing or locked database); problems are in the report.
func VerifyChain(path string, opts VerifyOptions) (audit.Report, error) {
	r, err := Open(path, &Options{ReadOnly: true, LockTimeout: opts.LockTimeout, anchorUnchecked: true})
	if err != nil {
		return audit.Report{}, err
	}
	defer r.Close()
	return r.verifyChain(opts)
}

// VerifyChainEngine is VerifyChain for a receiver kept in e (OpenEngine),
// which it closes when it returns.
func VerifyChainEngine(e engine.Engine, opts VerifyOptions) (audit.Report, error) {
	r, err := openWith(e, "engine store", false, &Options{ReadOnly: true, anchorUnchecked: true}, defect.Variant{})
	if err != nil {
		return audit.Report{}, err
	}
	defer r.Close()
	return r.verifyChain(opts)
}

// verifyChain is VerifyChain on an open, read-only receiver.
func (r *Receiver) verifyChain(opts VerifyOptions) (audit.Report, error) {
	if opts.RecoveryKey != nil && (opts.RecoveryKey.Equal(opts.PublicKey) || opts.RecoveryKey.Equal(r.pub)) {
		// An admission it signed would be the receiver's own word.
		return audit.Report{}, ErrRecoveryKeyIsReceiverKey
	}
	if !opts.AnchorIsCheckpoint {
		if err := r.checkAnchorCluster(opts.Anchor, opts.AnchorClusterID); err != nil {
			return audit.Report{}, err
		}
	}
	return r.verifyChainAgainst(opts)
}

// verifyChainAgainst is verifyChain without the anchor's cluster check:
// VerifyOnline reads the anchor itself, from a store whose cluster the
// running receiver checked when it opened.
func (r *Receiver) verifyChainAgainst(opts VerifyOptions) (audit.Report, error) {
	if _, fixed := opts.Anchor.(*fixedAnchor); !r.file && opts.Anchor != nil && !fixed {
		// Other processes may write a shared store (etcd) meanwhile: the
		// anchor is read once, before the chain, so that the chain read
		// after it is at or past it unless the store was rolled back.
		if a, err := opts.Anchor.Load(); err == nil {
			opts.Anchor = &fixedAnchor{sc: a}
		}
	}
	var rep audit.Report
	var treeErr error
	err := r.view(func(tx engine.Tx) error {
		var scanErr error
		var tree *chain.TreeChecker
		treeErr = nil
		entries := func(yield func(k, v []byte) bool) {
			var n uint64
			scanErr = tx.Scan(bucketAudit, nil, func(k, v []byte) error {
				// The stored tree is checked beside the chain, as open's
				// replay checks it; its first mismatch is reported once
				// the chain itself has verified.
				if len(k) == 8 && treeErr == nil {
					seq := binary.BigEndian.Uint64(k)
					if tree == nil {
						tree, treeErr = auditChain.NewTreeChecker(tx, seq)
					}
					if treeErr == nil {
						treeErr = tree.Add(seq, v)
					}
				}
				if !yield(k, v) {
					return engine.StopScan
				}
				if n++; opts.Progress != nil && n%ProgressEvery == 0 {
					opts.Progress(n)
				}
				return nil
			})
			// Reported only when the chain verified, which means the
			// scan reached the head; records past it are then damage.
			if treeErr == nil && tree != nil {
				treeErr = tree.Finish()
			}
		}
		// The base record is passed as found, decoding included: Verify
		// reports a record the chain does not confirm as base_mismatch.
		base, err := tx.Get(bucketCheckpoints, checkpointBase)
		if err != nil {
			return err
		}
		rep, err = audit.Verify(audit.VerifyOptions{Entries: iter.Seq2[[]byte, []byte](entries), Anchor: opts.Anchor,
			PublicKey: opts.PublicKey, Receiver: r.id, MaxAge: opts.MaxAge, BaseRecord: base, Archives: opts.Archives})
		if err == nil {
			err = scanErr
		}
		return err
	})
	if err == nil && rep.OK() && treeErr != nil {
		if !errors.Is(treeErr, audit.ErrTreeMismatch) {
			return rep, treeErr
		}
		rep.Fail(audit.ProblemTreeMismatch, treeErr)
	}
	if err == nil && errors.Is(rep.Err(), audit.ErrAnchorArchived) {
		// A base past the anchor is an old anchor put back only if the
		// database itself is whole; one whose newest signed checkpoint
		// does not cover its chain was changed by whoever wrote it.
		r.pub = opts.PublicKey
		if _, serr := r.checkState(nil); errors.Is(serr, audit.ErrStateMismatch) {
			rep.Reattribute(audit.ProblemStateMismatch, serr)
		}
	}
	if err != nil || !rep.OK() {
		return rep, err
	}
	// The chain is the anchored one; now the state beside it must be the
	// state that the head's checkpoint commits to. The receiver's key here
	// is the one recorded in the database: the anchor has just verified
	// under the operator's key, so they must agree, or the state check
	// fails on the database's own checkpoint.
	anchor, err := opts.Anchor.Load()
	if err != nil {
		return rep, err
	}
	r.pub = opts.PublicKey
	if _, err := r.checkState(&anchor); errors.Is(err, audit.ErrStateMismatch) {
		rep.Fail(audit.ProblemStateMismatch, err)
		return rep, nil
	} else if err != nil {
		return rep, err
	}
	// The tree's records are the entries' own; its roots must be the
	// ones the anchor and the newest checkpoint sign.
	err = r.view(func(tx engine.Tx) error { return checkSignedRoots(tx, anchor.Checkpoint) })
	if errors.Is(err, audit.ErrTreeMismatch) {
		rep.Fail(audit.ProblemTreeMismatch, err)
		return rep, nil
	} else if err != nil {
		return rep, err
	}
	return r.verifyWitnesses(rep, opts)
}

// verifyWitnesses is VerifyChain's last step: the witnesses' latest
// checkpoints against the database's newest one, whose tree and state
// have verified.
func (r *Receiver) verifyWitnesses(rep audit.Report, opts VerifyOptions) (audit.Report, error) {
	q, err := r.newQuorum(opts.Witnesses, opts.WitnessQuorum, opts.WitnessFaults)
	if err != nil || q == nil {
		return rep, err
	}
	timeout := opts.WitnessTimeout
	if timeout <= 0 {
		timeout = DefaultWitnessTimeout
	}
	_, err = r.checkWitnesses(q, timeout, opts.RecoveryKey)
	switch {
	case err == nil:
	case errors.Is(err, audit.ErrRollbackDetected):
		rep.Fail(audit.ProblemRollbackDetected, err)
	case errors.Is(err, audit.ErrForkDetected):
		rep.Fail(audit.ProblemForkDetected, err)
	default:
		return rep, err
	}
	return rep, nil
}

// fixedAnchor is an anchor read once, for a check that must not read it
// again, with the damaged slot found beside it, if any. It cannot be
// written.
type fixedAnchor struct {
	sc     audit.SignedCheckpoint
	damage *audit.SlotDamage
}

func (a *fixedAnchor) Load() (audit.SignedCheckpoint, error) { return a.sc, nil }

// Inspect makes the damage read with the anchor part of the report
// (audit.DamageReporter).
func (a *fixedAnchor) Inspect() (audit.AnchorFileReport, error) {
	return audit.AnchorFileReport{Current: a.sc, Damage: a.damage}, nil
}

func (a *fixedAnchor) Store(*audit.SignedCheckpoint, audit.SignedCheckpoint) error {
	return fmt.Errorf("%w: a verification does not write the anchor", ErrReadOnly)
}

func (a *fixedAnchor) Supersede(audit.SignedCheckpoint, audit.SignedCheckpoint) error {
	return fmt.Errorf("%w: a verification does not write the anchor", ErrReadOnly)
}

// checkRecoveryWitnesses asks the witnesses of opts for their latest
// checkpoints of this receiver and refuses sa unless it names each one
// that answered with a checkpoint at exactly that size and root.
func (r *Receiver) checkRecoveryWitnesses(sa audit.SignedAdmission, opts RecoverOptions) error {
	if len(sa.Witnessed) > 0 {
		// The witnesses will move to the recovered tree only from this
		// root (a consistency proof from it), so it must be the tree
		// the admitted head ends, and the recovered chain its extension.
		root, ok, err := r.admittedRoot(sa)
		if err != nil {
			return fmt.Errorf("the audit tree at the admitted seq %d: %w", sa.AdmittedHead.Seq, err)
		}
		if !ok {
			return fmt.Errorf("%w: the admission admits tree root %v at seq %d, but the database's is %v",
				audit.ErrAdmissionMismatch, tlog.Hash(sa.AdmittedRoot), sa.AdmittedHead.Seq, root)
		}
	}
	if len(opts.Witnesses) == 0 {
		if len(sa.Witnessed) > 0 || opts.WitnessQuorum != 0 {
			return fmt.Errorf("%w: the admission names %d witnesses (quorum %d); give them, so that what they hold now is checked",
				ErrInvalidArgument, len(sa.Witnessed), opts.WitnessQuorum)
		}
		return nil
	}
	q, err := r.newQuorum(opts.Witnesses, opts.WitnessQuorum, opts.WitnessFaults)
	if err != nil {
		return err
	}
	seen := map[string]string{}
	for _, m := range q.Members() {
		// The admission names witnesses by their own names: two members
		// under one would make its entry ambiguous.
		if other, ok := seen[q.KeyName(m)]; ok {
			return fmt.Errorf("%w: witnesses %q and %q sign under one name %q", ErrInvalidArgument, other, m, q.KeyName(m))
		}
		seen[q.KeyName(m)] = m
	}
	origin, err := checkpoint.ReceiverOrigin(r.id, r.pub)
	if err != nil {
		return err
	}
	timeout := opts.WitnessTimeout
	if timeout <= 0 {
		timeout = DefaultWitnessTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := q.Latest(ctx, origin)
	if err != nil {
		return err
	}
	var latest []audit.WitnessedCheckpoint
	signed := 0
	for _, a := range res.Members {
		if a.Answered {
			latest = append(latest, audit.WitnessedCheckpoint{Witness: q.KeyName(a.Member), Size: a.Size, Root: audit.Hash(a.Root)})
			if a.Note != nil {
				signed++
			}
		}
	}
	// A recovery cannot be undone: it is decided only against signed
	// answers. "None" is unsigned (anyone on the path can say it in a
	// witness's name, and a fresh process has seen no cosignature of its
	// own to doubt it), so it does not count toward the answers needed.
	if signed < res.Needed {
		return fmt.Errorf("%w: %d signed answers of the %d needed for a recovery (a witness's \"none\" is unsigned and does not count)",
			ErrWitnessAnswers, signed, res.Needed)
	}
	empty, _ := tlog.TreeHash(0, nil)
	return sa.CheckWitnesses(latest, audit.Hash(empty))
}
