package kvfence

import (
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that a recovery does not move a receiver's anchor onto whatever
// cluster answers at the anchor's address. Init recorded cluster 5; a
// cluster 6 that answers with a copy of the anchor (whoever can redirect
// the address can stand one up) is refused by Open, and must be refused
// by Recover too unless the operator states that cluster: the admission
// does not name the anchor's cluster, so a recovery that recorded the
// live one would hand the anchor to that cluster's administrator. With
// the new cluster stated, the move is made.
func TestRedteam8_RecoverMovesAnchorCluster(t *testing.T) {
	dir := t.TempDir()
	clock := newClock()
	path, file := filepath.Join(dir, "r.db"), audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	var expected uint64
	on := func(id uint64) clusterFileAnchor {
		expected = 0
		return clusterFileAnchor{FileAnchor: file, id: id, expected: &expected}
	}
	rpub := recoveryKey.Public().(ed25519.PublicKey)
	if err := Init(path, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: on(5), RecoveryKey: rpub, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, &Options{Key: testKey, Anchor: on(6), Now: clock.Now}); !errors.Is(err, ErrAnchorClusterChanged) {
		t.Fatalf("open on another cluster: %v", err)
	}
	admission := func() []byte {
		q, err := Inspect(path, on(6))
		if err != nil {
			t.Fatal(err)
		}
		return signed(t, recoveryKey, audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
			AdmittedState: q.State, At: clock.Now().UnixNano(), Expires: clock.Now().Add(time.Hour).UnixNano(), Reason: "restore"})
	}
	adm := admission()
	_, err := Recover(path, adm, RecoverOptions{Key: testKey, Anchor: on(6), RecoveryKey: rpub, Now: clock.Now})
	if !errors.Is(err, ErrAnchorClusterChanged) {
		r, oerr := Open(path, &Options{Key: testKey, Anchor: on(6), Now: clock.Now})
		if oerr == nil {
			r.Close()
		}
		t.Fatalf("recovery on another cluster: %v, want %v (afterwards, open on that cluster: %v)", err, ErrAnchorClusterChanged, oerr)
	}
	if _, err := Recover(path, adm, RecoverOptions{Key: testKey, Anchor: on(6), RecoveryKey: rpub, Now: clock.Now,
		AnchorClusterID: 7}); !errors.Is(err, ErrAnchorClusterChanged) {
		t.Fatalf("recovery with another cluster stated: %v", err)
	}
	// The refused recoveries changed nothing: the recorded cluster opens.
	r, err := Open(path, &Options{Key: testKey, Anchor: on(5), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	// Stated, the move is the operator's, on the recovery key's authority.
	if _, err := Recover(path, adm, RecoverOptions{Key: testKey, Anchor: on(6), RecoveryKey: rpub, Now: clock.Now,
		AnchorClusterID: 6}); err != nil {
		t.Fatalf("recovery with the new cluster stated: %v", err)
	}
	if expected != 6 {
		t.Fatalf("the anchor was held to cluster %d, want 6", expected)
	}
	if r, err = Open(path, &Options{Key: testKey, Anchor: on(6), Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := Open(path, &Options{Key: testKey, Anchor: on(5), Now: clock.Now}); !errors.Is(err, ErrAnchorClusterChanged) {
		t.Fatalf("open on the old cluster after the move: %v", err)
	}
}

// Ensure that a receiver whose anchor init recorded on an etcd cluster is
// not opened, nor its chain verified, on an anchor that names no cluster
// (a file holding a copy of the anchor): the record says where the anchor
// is, and an anchor that cannot say which cluster it is on is not on the
// recorded one. Only a recovery moves the anchor off its cluster.
func TestRedteam8_FileAnchorForRecordedCluster(t *testing.T) {
	dir := t.TempDir()
	clock := newClock()
	path, file := filepath.Join(dir, "r.db"), audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	var expected uint64
	on := clusterFileAnchor{FileAnchor: file, id: 5, expected: &expected}
	if err := Init(path, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: on, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: file, Now: clock.Now})
	if err == nil {
		r.Close()
	}
	if !errors.Is(err, ErrAnchorClusterChanged) {
		t.Fatalf("open of a receiver anchored on cluster 5 with an anchor file: %v, want %v", err, ErrAnchorClusterChanged)
	}
	if _, err := VerifyChain(path, VerifyOptions{Anchor: file, PublicKey: testKey.Public().(ed25519.PublicKey)}); !errors.Is(err, ErrAnchorClusterChanged) {
		t.Fatalf("verify-chain with an anchor file: %v", err)
	}
	if r, err = Open(path, &Options{Key: testKey, Anchor: on, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	r.Close()
}

// Ensure that a recovery of a receiver that records no anchor cluster (an
// anchor file at init, or a record a writer of the store deleted) does
// not adopt whatever cluster answers for its anchor: as Open, it takes an
// anchor on a cluster only with that cluster stated.
func TestRedteam8_RecoverUnrecordedAnchorCluster(t *testing.T) {
	dir := t.TempDir()
	clock := newClock()
	path, file := filepath.Join(dir, "r.db"), audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	var expected uint64
	on := clusterFileAnchor{FileAnchor: file, id: 6, expected: &expected}
	rpub := recoveryKey.Public().(ed25519.PublicKey)
	if err := Init(path, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: file, RecoveryKey: rpub, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	q, err := Inspect(path, file)
	if err != nil {
		t.Fatal(err)
	}
	adm := signed(t, recoveryKey, audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: clock.Now().UnixNano(), Expires: clock.Now().Add(time.Hour).UnixNano(), Reason: "restore"})
	if _, err := Recover(path, adm, RecoverOptions{Key: testKey, Anchor: on, RecoveryKey: rpub, Now: clock.Now}); !errors.Is(err, ErrAnchorClusterUnrecorded) {
		t.Fatalf("recovery onto an unstated cluster: %v, want %v", err, ErrAnchorClusterUnrecorded)
	}
	if _, err := Recover(path, adm, RecoverOptions{Key: testKey, Anchor: on, RecoveryKey: rpub, Now: clock.Now, AnchorClusterID: 6}); err != nil {
		t.Fatalf("recovery onto the stated cluster: %v", err)
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: on, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}

// Ensure that a receiver on a store that other processes write (etcd)
// keeps working after another process recovered it: the recovery's
// checkpoint, and the anchor it wrote, name the consumed admission, and
// the running receiver's next commit carries it; it must not then be
// refused against the anchor this process last saw, which names none.
func TestRedteam8_SharedStoreWriteAfterRecovery(t *testing.T) {
	s := engines[1].new(t)
	clock := newClock()
	anchor := audit.FileAnchor{Path: filepath.Join(t.TempDir(), "r.anchor")}
	rpub := recoveryKey.Public().(ed25519.PublicKey)
	if err := s.init(t, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: anchor, RecoveryKey: rpub, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	opts := &Options{Key: testKey, Anchor: anchor, Now: clock.Now}
	r, err := s.open(t, opts, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := t.Context()
	if _, err := r.Admin().CreateScope(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	q, err := InspectEngine(s.engine(t, nil), anchor)
	if err != nil {
		t.Fatal(err)
	}
	adm := signed(t, recoveryKey, audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: clock.Now().UnixNano(), Expires: clock.Now().Add(time.Hour).UnixNano(), Reason: "drill"})
	if _, err := RecoverEngine(s.engine(t, nil), adm, RecoverOptions{Key: testKey, Anchor: anchor, RecoveryKey: rpub, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().CreateScope(ctx, "b"); err != nil {
		t.Fatalf("a commit of the running receiver after another process's recovery: %v", err)
	}
	if _, err := r.Admin().Hold(ctx, HoldRequest{Scopes: []string{"a"}, Reason: "after"}); err != nil {
		t.Fatalf("a hold of the running receiver after another process's recovery: %v", err)
	}
}
