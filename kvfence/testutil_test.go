package kvfence

import (
	"context"
	"testing"

	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	bolt "go.etcd.io/bbolt"
)

func ptr[T any](v T) *T { return &v }

func deleteKey(bucket []byte, key string) func(engine.Tx) error {
	return func(tx engine.Tx) error { return tx.Delete(bucket, []byte(key)) }
}

// rawUpdate writes to the receiver's store directly, around the fence, as
// an attacker with write access to the store would.
func (r *Receiver) rawUpdate(fn func(engine.Tx) error) error {
	return r.eng.Update(context.Background(), fn)
}

// trustStore makes the receiver take its store as it now is, edits
// included, as if it had written every record itself: it recomputes the
// state digest, the known records and the epoch high-water from the store. A test that
// reaches a later check by editing a record calls it after the edit; an
// attacker has no such call, and without it the edited record is
// ErrStateMismatch.
func (r *Receiver) trustStore(t testing.TB) {
	t.Helper()
	r.wmu.Lock()
	defer r.wmu.Unlock()
	known, err := newKnownRecords(r.opts.MaxRecords)
	if err != nil {
		t.Fatal(err)
	}
	state, err := r.computeState(known)
	if err != nil {
		t.Fatal(err)
	}
	var hw uint64
	if err := r.view(func(tx engine.Tx) (err error) { hw, err = epochHighWater(tx); return err }); err != nil {
		t.Fatal(err)
	}
	r.state, r.stateSum, r.known, r.hw = state, state.Sum(), known, hw
}

// seam runs fn through the seam in a bbolt transaction of a file opened
// apart from a receiver.
func seam(fn func(engine.Tx) error) func(*bolt.Tx) error {
	return func(btx *bolt.Tx) error { return boltengine.InTx(btx, nil, fn) }
}

// forgeActiveGrant writes grant id into the fixture scope's control record
// directly, to reach checks past 2-4 with a grant of another scope.
func forgeActiveGrant(f *fixture, id string) {
	f.t.Helper()
	err := f.r.rawUpdate(func(tx engine.Tx) error {
		c, err := getControl(tx, fixScope)
		if err != nil {
			return err
		}
		c.ActiveGrant = id
		raw, err := encodeCanonical(c)
		if err != nil {
			return err
		}
		return tx.Put(bucketControl, []byte(fixScope), raw)
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.r.trustStore(f.t)
}

// skipShort skips a long test under go test -short; the README's full
// test command, which CI runs, always runs it.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("long: runs in the full test command (go test without -short)")
	}
}
