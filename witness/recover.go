package witness

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
)

// Errors of a recovery request.
var (
	// ErrNoRecoveryKey means the witness holds no recovery key for the
	// log (TrustRecovery was not run): it accepts no recovery of it.
	ErrNoRecoveryKey = errors.New("the witness trusts no recovery key for this log")

	// ErrRecoveryRefused means a recovery request's admission does not
	// verify with the log's recovery key, is for another receiver, does
	// not name this witness at exactly its latest checkpoint, or is not
	// the one the checkpoint names.
	ErrRecoveryRefused = errors.New("recovery admission refused")

	// ErrRecoveryReplayed means the admission was accepted before for
	// another checkpoint, or is not newer than one the witness accepted:
	// an admission is used once.
	ErrRecoveryReplayed = errors.New("recovery admission already used")
)

// Recovery is one recovery a witness accepted: the admission, the
// checkpoint it held, and the checkpoint it stored instead.
type Recovery struct {
	// Admission is the signed admission, as the receiver sent it.
	Admission []byte `json:"admission"`
	// AdmissionSHA256 is its SHA-256, as checkpoints name it.
	AdmissionSHA256 audit.Hash `json:"admission_sha256"`
	// AdmissionAt is the admission's At, Unix nanoseconds.
	AdmissionAt int64 `json:"admission_at"`
	// FromSize is the size of the checkpoint the witness held before.
	FromSize uint64 `json:"from_size"`
	// FromRoot is that checkpoint's root.
	FromRoot tlog.Hash `json:"from_root"`
	// Size is the size of the checkpoint accepted in its place.
	Size uint64 `json:"size"`
	// Root is that checkpoint's root.
	Root tlog.Hash `json:"root"`
	// Note is that checkpoint as the receiver signed it.
	Note []byte `json:"note"`
	// AcceptedAt is when the witness stored it.
	AcceptedAt time.Time `json:"accepted_at"`
}

// TrustRecovery records pub as the recovery public key of the receiver
// whose checkpoints the witness already trusts under origin (Trust), so
// that a recovery admission signed by it can make the witness accept a
// checkpoint that does not extend its latest (RecoverCheckpoint). Giving
// the same key again changes nothing; another key is ErrAlreadyTrusted;
// an origin not trusted is ErrUnknownLog. The log's own key is refused:
// the recovery key is a second, separately held authority.
func (s *Store) TrustRecovery(origin string, pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("recovery public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	if err := checkpoint.CheckPublicKey(pub); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		st, err := getState(tx, origin)
		if err != nil {
			return err
		}
		if logPub, err := verifierPublicKey(st.VerifierKey); err != nil {
			return err
		} else if logPub.Equal(pub) {
			return fmt.Errorf("the recovery key of %s is the receiver's own key; it must be held apart", origin)
		}
		switch {
		case len(st.RecoveryKey) == 0:
		case st.RecoveryKey.Equal(pub):
			return nil
		default:
			return fmt.Errorf("%w: %s has another recovery key", ErrAlreadyTrusted, origin)
		}
		st.RecoveryKey = append(ed25519.PublicKey(nil), pub...)
		return putState(tx.Bucket(bucketLogs), st)
	})
}

// verifierPublicKey reads the Ed25519 key out of a note verifier key
// (name+hash+base64 of the algorithm byte and the key).
func verifierPublicKey(vkey string) (ed25519.PublicKey, error) {
	// The name holds no "+" (checkpoint.CheckName); the base64 may.
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return nil, fmt.Errorf("%w: stored verifier key %q", ErrNotWitnessDB, vkey)
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != 1 {
		return nil, fmt.Errorf("%w: stored verifier key %q", ErrNotWitnessDB, vkey)
	}
	return ed25519.PublicKey(raw[1:]), nil
}

// RecoverCheckpoint accepts a receiver's checkpoint that does not extend
// the latest one the witness cosigned, on the strength of a recovery
// admission, and returns the cosignature line. It is the one exception to
// consistency, and it is accepted only if: the witness trusts a recovery
// key for the log (else ErrNoRecoveryKey); the checkpoint verifies with
// the log's key (else ErrForbidden); the admission verifies with the
// recovery key, is for the receiver of this origin, names this witness
// (its id) at exactly the size and root of its latest cosigned checkpoint,
// and is the admission the checkpoint's kvfence-admission line names by
// SHA-256 and time; and the request's proof shows the checkpoint's tree,
// larger than the admitted seq, to extend the tree the admission admits
// (its admitted seq and root) (else ErrRecoveryRefused); and no admission was
// accepted before with this hash for another checkpoint, or with a time
// at or after this one's (else ErrRecoveryReplayed). The same admission
// with the checkpoint already accepted is answered again, for a receiver
// whose first answer was lost. The new checkpoint becomes the latest, and
// the recovery is added to the log's Recoveries, in one transaction that
// commits (fsyncs) before the witness signs. An admission outside its
// validity by the witness's clock is refused (ErrRecoveryRefused): one
// replayed after it expired could otherwise move a witness that was down
// onto a chain a later admission abandoned. A witness down past the window
// follows with a new admission that names it.
func (w *Witness) RecoverCheckpoint(req RecoverCheckpointRequest) (string, error) {
	body, at, err := w.store.recover(req, w.now)
	if err != nil {
		return "", err
	}
	return w.cosigner.Line(body, at)
}

// recover is RecoverCheckpoint's decision and write. The signatures are
// checked against a read-only view first, so that requests that fail them
// never take the write lock that add-checkpoint needs; the write
// transaction decides again only if the log moved meanwhile.
func (s *Store) recover(req RecoverCheckpointRequest, now func() time.Time) ([]byte, time.Time, error) {
	origin, err := noteOrigin(req.SignedNote)
	if err != nil {
		return nil, time.Time{}, err
	}
	sa, err := audit.ParseSignedAdmission(req.Admission)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	var seen LogState
	if err := s.db.View(func(tx *bolt.Tx) (err error) {
		seen, err = getState(tx, origin)
		return err
	}); err != nil {
		return nil, time.Time{}, err
	}
	c, body, again, err := s.decideRecovery(seen, req, sa)
	if err != nil {
		return nil, time.Time{}, err
	}
	var at time.Time
	err = s.db.Update(func(tx *bolt.Tx) error {
		st, err := getState(tx, origin)
		if err != nil {
			return err
		}
		if !sameLogState(st, seen) {
			if c, body, again, err = s.decideRecovery(st, req, sa); err != nil {
				return err
			}
		}
		// Read inside the transaction, as add-checkpoint does.
		at = now()
		if again {
			// The answer to an accepted request was lost; it is durable
			// already.
			return errNoChange
		}
		// An admission is a decision for its window only: one replayed
		// after it expired (it is no secret: every backup holds it) could
		// otherwise move a witness that was down through that recovery
		// onto the chain it admitted, and off the one a later admission
		// decided on. A witness down past the window follows with a new
		// admission naming it.
		if err := sa.CheckTime(at); err != nil {
			return fmt.Errorf("%w: %v", ErrRecoveryRefused, err)
		}
		st.Recoveries = append(st.Recoveries, Recovery{
			Admission: bytes.Clone(req.Admission), AdmissionSHA256: sha256.Sum256(req.Admission), AdmissionAt: sa.At,
			FromSize: st.Size, FromRoot: st.Root, Size: c.Size, Root: c.Root,
			Note: bytes.Clone(req.SignedNote), AcceptedAt: at.UTC(),
		})
		st.Cosigned, st.Size, st.Root = true, c.Size, c.Root
		st.Note = bytes.Clone(req.SignedNote)
		st.UpdatedAt = at.UTC()
		return putState(tx.Bucket(bucketLogs), st)
	})
	if err != nil && !errors.Is(err, errNoChange) {
		return nil, time.Time{}, err
	}
	return body, at, nil
}

// sameLogState says whether the log is where a view saw it.
func sameLogState(a, b LogState) bool {
	return a.Cosigned == b.Cosigned && a.Size == b.Size && a.Root == b.Root && bytes.Equal(a.Note, b.Note) &&
		a.RecoveryKey.Equal(b.RecoveryKey) && len(a.Recoveries) == len(b.Recoveries)
}

// decideRecovery checks a recovery request against st, the log's state.
// It returns the checkpoint and its body, and again when the request is
// the one accepted last, whose checkpoint is still the latest.
func (s *Store) decideRecovery(st LogState, req RecoverCheckpointRequest, sa audit.SignedAdmission) (c checkpoint.Checkpoint, body []byte, again bool, err error) {
	if len(st.RecoveryKey) == 0 {
		return c, nil, false, fmt.Errorf("%w: %s", ErrNoRecoveryKey, st.Origin)
	}
	c, n, err := openTrusted(st, req.SignedNote)
	switch {
	case errors.Is(err, ErrNotWitnessDB):
		return c, nil, false, err
	case errors.Is(err, checkpoint.ErrUnverified), errors.Is(err, checkpoint.ErrBadSignature):
		return c, nil, false, fmt.Errorf("%w: %v", ErrForbidden, err)
	case err != nil:
		return c, nil, false, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	body = []byte(n.Text)
	if c.Origin != st.Origin || c.Size == 0 || c.Size > checkpoint.MaxSize {
		return c, nil, false, fmt.Errorf("%w: a recovered checkpoint of %q has size %d", ErrBadRequest, c.Origin, c.Size)
	}
	if err := sa.Verify(st.RecoveryKey); err != nil {
		return c, nil, false, fmt.Errorf("%w: %v", ErrRecoveryRefused, err)
	}
	logPub, err := verifierPublicKey(st.VerifierKey)
	if err != nil {
		return c, nil, false, err
	}
	if o, err := checkpoint.ReceiverOrigin(sa.Receiver, logPub); err != nil || o != st.Origin {
		return c, nil, false, fmt.Errorf("%w: the admission is for receiver %q, not the log %s", ErrRecoveryRefused, sa.Receiver, st.Origin)
	}
	rs, err := checkpoint.ParseReceiverState(c.Extensions)
	if err != nil {
		return c, nil, false, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	digest := sha256.Sum256(req.Admission)
	if rs.Admission != (audit.AdmissionRecord{SHA256: digest, At: sa.At}) {
		return c, nil, false, fmt.Errorf("%w: the checkpoint's %s line does not name this admission", ErrRecoveryRefused, checkpoint.ExtAdmission)
	}
	for _, r := range st.Recoveries {
		if r.AdmissionSHA256 == audit.Hash(digest) {
			if st.Cosigned && bytes.Equal(r.Note, req.SignedNote) && bytes.Equal(st.Note, req.SignedNote) {
				return c, body, true, nil
			}
			return c, nil, false, fmt.Errorf("%w: it was accepted for size %d at %s", ErrRecoveryReplayed, r.Size, r.AcceptedAt.Format(time.RFC3339))
		}
		if sa.At <= r.AdmissionAt {
			return c, nil, false, fmt.Errorf("%w: an admission signed at or after it was accepted for size %d", ErrRecoveryReplayed, r.Size)
		}
	}
	named, ok := sa.Named(s.id)
	switch {
	case !ok:
		return c, nil, false, fmt.Errorf("%w: the admission does not name witness %s", ErrRecoveryRefused, s.id)
	case !st.Cosigned:
		return c, nil, false, fmt.Errorf("%w: the witness holds no checkpoint of %s to recover from", ErrRecoveryRefused, st.Origin)
	case named.Size != st.Size || tlog.Hash(named.Root) != st.Root:
		return c, nil, false, fmt.Errorf("%w: the admission names witness %s at size %d, root %v, but it holds size %d, root %v",
			ErrRecoveryRefused, s.id, named.Size, tlog.Hash(named.Root), st.Size, st.Root)
	}
	// The recovered tree must hold the tree the recovery key admitted and
	// the recovery's own entry after it: otherwise where the witness goes
	// would be the receiver key's choice, not the recovery key's decision.
	admitted := sa.AdmittedHead.Seq
	if c.Size <= admitted {
		return c, nil, false, fmt.Errorf("%w: the recovered checkpoint's size %d does not extend the admitted seq %d with the recovery's entry",
			ErrRecoveryRefused, c.Size, admitted)
	}
	if err := tlog.CheckTree(req.Proof, int64(c.Size), c.Root, int64(admitted), tlog.Hash(sa.AdmittedRoot)); err != nil {
		return c, nil, false, fmt.Errorf("%w: the recovered tree of size %d is not proven to extend the admitted tree of size %d, root %v: %v",
			ErrRecoveryRefused, c.Size, admitted, tlog.Hash(sa.AdmittedRoot), err)
	}
	return c, body, false, nil
}
