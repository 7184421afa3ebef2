package witness

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/checkpoint"
)

// Witness cosigns checkpoints: a Store and the witness's private key.
type Witness struct {
	store    *Store
	cosigner *checkpoint.Cosigner
	now      func() time.Time
}

// Options configures New.
type Options struct {
	// Now is the witness's clock, time.Now when nil; cosignatures carry
	// its second.
	Now func() time.Time
}

// New returns the witness of store, signing with priv, which must be the
// key whose public half the store recorded.
func New(store *Store, priv ed25519.PrivateKey, opts Options) (*Witness, error) {
	if len(priv) != ed25519.PrivateKeySize || !priv.Public().(ed25519.PublicKey).Equal(store.PublicKey()) {
		return nil, errors.New("witness key does not match the public key recorded in the witness database")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c, err := checkpoint.NewCosigner(store.ID(), priv, opts.Now)
	if err != nil {
		return nil, err
	}
	return &Witness{store: store, cosigner: c, now: opts.Now}, nil
}

// Store returns the witness's store.
func (w *Witness) Store() *Store { return w.store }

// AddCheckpoint checks a request and, if the checkpoint extends the latest
// one cosigned for its origin, stores it and returns the cosignature line.
// The signature and proof are checked against a read-only view of the
// store, outside the write transaction; the write transaction re-checks
// the size and root it saw, takes the cosignature's time and commits
// (fsyncs) before the witness signs. A checkpoint the witness already
// holds (a replay of its latest, public one) is answered from the view
// and writes nothing. Errors wrap ErrBadRequest, ErrUnknownLog,
// ErrForbidden, ErrConflict (a *ConflictError) or ErrBadProof; any other
// error is the store's.
func (w *Witness) AddCheckpoint(req AddCheckpointRequest) (string, error) {
	body, at, err := w.store.advance(req, w.now)
	if err != nil {
		return "", err
	}
	return w.cosigner.Line(body, at)
}

// Latest returns the latest checkpoint cosigned for origin as the log
// signed it, with a cosignature made now appended, or ErrUnknownLog or
// ErrNoCheckpoint.
func (w *Witness) Latest(origin string) ([]byte, error) {
	st, err := w.store.Log(origin)
	if err != nil {
		return nil, err
	}
	if !st.Cosigned {
		return nil, fmt.Errorf("%w: %q", ErrNoCheckpoint, origin)
	}
	c, n, err := openTrusted(st, st.Note)
	if err != nil {
		return nil, fmt.Errorf("%w: stored checkpoint of %q: %v", ErrNotWitnessDB, origin, err)
	}
	if c.Size != st.Size || c.Root != st.Root {
		return nil, fmt.Errorf("%w: stored checkpoint of %q does not match its size and root", ErrNotWitnessDB, origin)
	}
	// Only the log's verified signature and this witness's cosignature:
	// whatever else the log sent along is not the witness's to vouch for.
	n.UnverifiedSigs = nil
	return note.Sign(n, w.cosigner)
}

// noteOrigin reads the origin of a signed note without verifying it.
func noteOrigin(signedNote []byte) (string, error) {
	_, err := note.Open(signedNote, note.VerifierList())
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) {
		return "", fmt.Errorf("%w: checkpoint is not a signed note", ErrBadRequest)
	}
	c, err := checkpoint.Parse([]byte(unverified.Note.Text))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return c.Origin, nil
}

// openTrusted verifies a signed note with the log's trusted key.
func openTrusted(st LogState, signedNote []byte) (checkpoint.Checkpoint, *note.Note, error) {
	v, err := checkpoint.ParseVerifierKey(st.VerifierKey)
	if err != nil {
		return checkpoint.Checkpoint{}, nil, fmt.Errorf("%w: stored verifier key of %q: %v", ErrNotWitnessDB, st.Origin, err)
	}
	return checkpoint.Open(signedNote, v)
}

// emptyRoot is the RFC 6962 hash of the empty tree.
var emptyRoot, _ = tlog.TreeHash(0, nil)

// errNoChange rolls back a write transaction that found nothing to change,
// so that bbolt writes and fsyncs nothing.
var errNoChange = errors.New("nothing to change")

// advance is the witness's decision, in the order c2sp.org/tlog-witness
// gives its checks. It returns the body to cosign and the time to stamp
// the cosignature with, read while the state it vouches for is the latest.
func (s *Store) advance(req AddCheckpointRequest, now func() time.Time) ([]byte, time.Time, error) {
	origin, err := noteOrigin(req.SignedNote)
	if err != nil {
		return nil, time.Time{}, err
	}
	// Signature and proof against a read-only view: the expensive checks
	// hold no lock that other logs' requests wait for.
	var seen LogState
	var at time.Time
	err = s.db.View(func(tx *bolt.Tx) error {
		var err error
		seen, err = getState(tx, origin)
		at = now()
		return err
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	c, n, err := openTrusted(seen, req.SignedNote)
	switch {
	case errors.Is(err, ErrNotWitnessDB):
		return nil, time.Time{}, err
	case errors.Is(err, checkpoint.ErrUnverified), errors.Is(err, checkpoint.ErrBadSignature):
		return nil, time.Time{}, fmt.Errorf("%w: %v", ErrForbidden, err)
	case err != nil:
		return nil, time.Time{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if c.Origin != origin {
		return nil, time.Time{}, fmt.Errorf("%w: origin changed while verifying", ErrBadRequest)
	}
	body := []byte(n.Text)
	if err := decide(seen, req, c, body); err != nil {
		return nil, time.Time{}, err
	}
	if seen.Cosigned && c.Size == seen.Size {
		// The same checkpoint again: it is already durable; the view's
		// time is when it was seen as the latest.
		return body, at, nil
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		st, err := getState(tx, origin)
		if err != nil {
			return err
		}
		if st.Cosigned != seen.Cosigned || st.Size != seen.Size || st.Root != seen.Root {
			// Another request moved the log since the view: decide again
			// against what is stored now (sizes are at most 2^62 and proofs
			// at most 63 hashes, so this is quick).
			if err := decide(st, req, c, body); err != nil {
				return err
			}
		}
		// Read inside the transaction: no larger checkpoint can be
		// committed before this time.
		at = now()
		if st.Cosigned && c.Size == st.Size {
			return errNoChange
		}
		st.Cosigned, st.Size, st.Root = true, c.Size, c.Root
		st.Note = append([]byte(nil), req.SignedNote...)
		st.UpdatedAt = at.UTC()
		return putState(tx.Bucket(bucketLogs), st)
	})
	if err != nil && !errors.Is(err, errNoChange) {
		return nil, time.Time{}, err
	}
	return body, at, nil
}

// decide checks that checkpoint c, with body body, may follow st, the
// latest cosigned state of its log: old size, consistency, and at the
// same size the very body already cosigned.
func decide(st LogState, req AddCheckpointRequest, c checkpoint.Checkpoint, body []byte) error {
	if c.Size > checkpoint.MaxSize || req.OldSize > checkpoint.MaxSize {
		return fmt.Errorf("%w: size above %d", ErrBadRequest, uint64(checkpoint.MaxSize))
	}
	if req.OldSize > c.Size {
		return fmt.Errorf("%w: old size %d is above the checkpoint's size %d", ErrBadRequest, req.OldSize, c.Size)
	}
	if req.OldSize != st.Size {
		return &ConflictError{Size: st.Size}
	}
	if err := consistent(st, req, c); err != nil {
		return err
	}
	if st.Cosigned && c.Size == st.Size {
		// One size, one body: the extension lines (state digest, epoch
		// high-water) are part of what was cosigned.
		stored, _, ok := bytes.Cut(st.Note, []byte("\n\n"))
		if !ok || !bytes.Equal(append(stored, '\n'), body) {
			return fmt.Errorf("%w: size %d was cosigned with another body", ErrBadProof, c.Size)
		}
	}
	return nil
}

// consistent checks that c extends the latest cosigned checkpoint st, the
// request's old size being st's size.
func consistent(st LogState, req AddCheckpointRequest, c checkpoint.Checkpoint) error {
	switch {
	case c.Size == 0:
		if len(req.Proof) != 0 || c.Root != emptyRoot {
			return fmt.Errorf("%w: a checkpoint of size 0 must have the empty tree's root and no proof", ErrBadProof)
		}
		return nil
	case req.OldSize == 0:
		if len(req.Proof) != 0 {
			return fmt.Errorf("%w: a proof from size 0 must be empty", ErrBadProof)
		}
		return nil
	case req.OldSize == c.Size:
		if len(req.Proof) != 0 || c.Root != st.Root {
			return fmt.Errorf("%w: size %d was cosigned with root %v, not %v", ErrBadProof, c.Size, st.Root, c.Root)
		}
		return nil
	}
	if err := tlog.CheckTree(req.Proof, int64(c.Size), c.Root, int64(req.OldSize), st.Root); err != nil {
		return fmt.Errorf("%w: from size %d to %d: %v", ErrBadProof, req.OldSize, c.Size, err)
	}
	return nil
}
