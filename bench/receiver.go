package bench

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// countingAnchor is the receiver's file anchor, counting the checkpoints
// written to it: the receiver writes one after every commit, so it counts
// commits, however many Submits each one carries.
type countingAnchor struct {
	audit.FileAnchor
	stores atomic.Int64
}

// Store writes next to the anchor file and counts it.
func (a *countingAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	if err := a.FileAnchor.Store(old, next); err != nil {
		return err
	}
	a.stores.Add(1)
	return nil
}

// receiver is a kvfence receiver in its own directory, opened durable with
// its file anchor (and its witnesses, if it has any), that can be
// reopened without fsync for setup.
type receiver struct {
	path   string
	key    ed25519.PrivateKey
	anchor *countingAnchor
	r      *kvfence.Receiver
	// size0 is the database file's size when it was first opened.
	size0 int64
	// witnesses are the receiver's witnesses, nil without any; quorum is
	// the number of them that must cosign a write.
	witnesses *witnessSet
	quorum    int
}

// receiverOptions configures newReceiverWith.
type receiverOptions struct {
	// witnesses is the number of witnesses to start in the receiver's
	// directory, each on a loopback HTTPS server of its own; zero means
	// none.
	witnesses int
	// quorum is how many of them must cosign each write.
	quorum int
}

// benchReceiverID is the bench receivers' ID, their note origin's name.
const benchReceiverID = "bench"

// newReceiver initialises a receiver in dir and opens it durable.
func newReceiver(dir string) (*receiver, error) {
	return newReceiverWith(dir, receiverOptions{})
}

// newReceiverWith initialises a receiver in dir, starts its witnesses
// (trusting its key) if opts asks for them, and opens it durable.
func newReceiverWith(dir string, opts receiverOptions) (_ *receiver, err error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	f := &receiver{path: filepath.Join(dir, "receiver.db"), key: key, quorum: opts.quorum,
		anchor: &countingAnchor{FileAnchor: audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}}}
	if err := kvfence.Init(f.path, &kvfence.InitOptions{ReceiverID: benchReceiverID, Key: key, Anchor: f.anchor.FileAnchor}); err != nil {
		return nil, err
	}
	if opts.witnesses > 0 {
		if f.witnesses, err = startWitnesses(dir, opts.witnesses, benchReceiverID, key.Public().(ed25519.PublicKey)); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				err = errors.Join(err, f.witnesses.close())
			}
		}()
	}
	if f.r, err = kvfence.Open(f.path, f.durableOptions()); err != nil {
		return nil, err
	}
	if f.size0, err = fileSize(f.path); err != nil {
		f.r.Close()
		return nil, err
	}
	return f, nil
}

// durableOptions are the options of the timed receiver: fsync, the file
// anchor, and the witnesses if any.
func (f *receiver) durableOptions() *kvfence.Options {
	o := &kvfence.Options{Key: f.key, Anchor: f.anchor}
	if f.witnesses != nil {
		o.Witnesses, o.WitnessQuorum = f.witnesses.members, f.quorum
	}
	return o
}

// offline closes the receiver, runs fn, and reopens it durable with its
// file anchor. Open accepts a database ahead of its anchor (the window a
// crash between a commit and its anchor write leaves) and moves the anchor
// forward.
func (f *receiver) offline(fn func() error) (err error) {
	if err := f.r.Close(); err != nil {
		return err
	}
	f.r = nil
	defer func() {
		r, oerr := kvfence.Open(f.path, f.durableOptions())
		if oerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: reopening the receiver: %w", oerr))
			return
		}
		f.r = r
	}()
	return fn()
}

// setup runs fn on the receiver reopened with NoSync and an anchor kept
// in memory, so that administrative calls cost CPU only, and then reopens
// it durable: the setup's commits leave the anchor file behind, which the
// durable Open moves forward. Nothing of this is timed.
func (f *receiver) setup(fn func(r *kvfence.Receiver, a *kvfence.Admin) error) error {
	return f.offline(func() error {
		r, err := f.openFast()
		if err != nil {
			return err
		}
		err = fn(r, r.Admin())
		return errors.Join(err, r.Close())
	})
}

// openFast opens the receiver with NoSync and an anchor in memory that
// starts from the anchor file's checkpoint. The receiver must be closed.
func (f *receiver) openFast() (*kvfence.Receiver, error) {
	cur, err := f.anchor.Load()
	if err != nil {
		return nil, err
	}
	mem := &audit.MemAnchor{}
	if err := mem.Store(nil, cur); err != nil {
		return nil, err
	}
	return kvfence.Open(f.path, &kvfence.Options{Key: f.key, Anchor: mem, NoSync: true})
}

// syncs computes the receiver's fsync-like calls since it was opened: per
// commit, bbolt's two fdatasyncs and the anchor's one (the slot written in
// place), plus bbolt's growths of the file. Setup commits do
// not write the anchor file and are not counted; setup growths are, and
// are few next to the commits of a timed round. With witnesses, their
// calls are added: they run in this process, on the same disk.
func (f *receiver) syncs() (float64, error) {
	size, err := fileSize(f.path)
	if err != nil {
		return 0, err
	}
	n := float64(3*f.anchor.stores.Load()) + float64(boltGrowths(f.size0, size))
	if f.witnesses != nil {
		w, err := f.witnesses.syncs()
		if err != nil {
			return 0, err
		}
		n += w
	}
	return n, nil
}

// close closes the receiver, then stops its witnesses: a receiver closing
// sends them nothing more.
func (f *receiver) close() error {
	var err error
	if f.r != nil {
		err = f.r.Close()
		f.r = nil
	}
	if f.witnesses != nil {
		err = errors.Join(err, f.witnesses.close())
		f.witnesses = nil
	}
	return err
}

// Names used by the kvfence rows.
const (
	benchExecutor = "bench-worker"
	benchClaim    = "bench-claim"
)

func scopeName(i int) string  { return fmt.Sprintf("bench/scope/%07d", i) }
func targetName(i int) string { return fmt.Sprintf("bench/target/%07d", i) }

// createScopes creates scopes from to to-1, each held, with one target
// holding a RecordSize value.
func createScopes(ctx context.Context, a *kvfence.Admin, from, to int) error {
	value := record(2)
	for i := from; i < to; i++ {
		if _, err := a.CreateScope(ctx, scopeName(i)); err != nil {
			return err
		}
		if _, err := a.CreateTarget(ctx, scopeName(i), targetName(i), value); err != nil {
			return err
		}
	}
	return nil
}

// holdChunk bounds the scopes held in one transaction.
const holdChunk = 4096

// holdScopes holds scopes from to to-1, a chunk per transaction.
func holdScopes(ctx context.Context, a *kvfence.Admin, from, to int) error {
	return holdScopesChunk(ctx, a, from, to, holdChunk)
}

// holdScopesChunk holds scopes from to to-1, chunk per transaction.
func holdScopesChunk(ctx context.Context, a *kvfence.Admin, from, to, chunk int) error {
	for lo := from; lo < to; lo += chunk {
		hi := min(lo+chunk, to)
		names := make([]string, 0, hi-lo)
		for i := lo; i < hi; i++ {
			names = append(names, scopeName(i))
		}
		if _, err := a.Hold(ctx, kvfence.HoldRequest{Scopes: names, Reason: "bench: next round"}); err != nil {
			return err
		}
	}
	return nil
}

// activateWrite activates a grant on held scope i for an applied write of
// a new RecordSize value to its target, as action, and returns the
// envelope a worker submits.
func activateWrite(ctx context.Context, a *kvfence.Admin, i int, action string, executor string, seed int64) ([]byte, error) {
	value := record(seed)
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: action, Target: targetName(i), Set: &value})
	if err != nil {
		return nil, err
	}
	g, err := a.Activate(ctx, kvfence.ActivateRequest{Scope: scopeName(i), Executor: executor, Claim: benchClaim,
		Request: req, TTL: grantTTL})
	if err != nil {
		return nil, err
	}
	return kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: g.Scope, Epoch: g.Epoch,
		Grant: g.ID, Executor: executor, Claim: benchClaim, Request: req})
}
