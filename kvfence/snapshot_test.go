package kvfence

import (
	"crypto/ed25519"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// snapPrefix is the receiver's prefix on the member of the snapshot test.
const snapPrefix = "/kvfence-snap/"

// snapEngine returns an etcd engine over snapPrefix on c, with a client of
// its own that the engine closes.
func snapEngine(t *testing.T, c *etcdtest.Cluster) engine.Engine {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	e, err := etcdengine.New(cli, &etcdengine.Options{Prefix: snapPrefix})
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	return e
}

// saveSnapshot writes a snapshot of c's member to a file, synced before
// it returns, and returns the file's path.
func saveSnapshot(t *testing.T, c *etcdtest.Cluster) string {
	t.Helper()
	cli := c.Client(t)
	rc, err := cli.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	path := filepath.Join(t.TempDir(), "member.snapshot")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return path
}

// restoreSnapshot restores the snapshot file into a fresh data directory,
// as an operator does with etcdutl, and starts a member on it. The revision
// is bumped and marked compacted, as etcd's restore guide asks, so that
// nothing but the anchor can tell the restored store from a live one.
func restoreSnapshot(t *testing.T, snap string) *etcdtest.Cluster {
	t.Helper()
	dir := t.TempDir()
	err := etcdtest.Restore(snap, filepath.Join(dir, "m0"), etcdtest.RestoreOptions{Name: "m0", RevisionBump: 1_000_000})
	if err != nil {
		t.Fatalf("snapshot restore: %v", err)
	}
	return etcdtest.NewClusterIn(t, dir, etcdtest.Config{})
}

// Ensure that an etcd member restored from a real snapshot taken before a
// hold is refused at open as a rollback, so the grant the hold superseded
// is never applied; that without the anchor check the restored store
// would apply it; and that a recovery admission re-admits the restored
// store with every scope held at a new epoch and the old grant denied.
func TestEtcdSnapshotRestore(t *testing.T) {
	c := etcdtest.Start(t)
	clock := newClock()
	anchor := audit.FileAnchor{Path: filepath.Join(t.TempDir(), "r.anchor")}
	recoveryPub := recoveryKey.Public().(ed25519.PublicKey)
	e := snapEngine(t, c)
	if err := InitEngine(e, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: anchor, RecoveryKey: recoveryPub, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	f := &fixture{t: t, clock: clock, ctx: t.Context(), anchor: anchor}
	open := func(c *etcdtest.Cluster) {
		t.Helper()
		r, err := OpenEngine(snapEngine(t, c), f.opts())
		if err != nil {
			t.Fatalf("OpenEngine: %v", err)
		}
		f.r, f.admin = r, r.Admin()
	}
	open(c)
	if _, err := f.admin.CreateScope(f.ctx, fixScope); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
		t.Fatal(err)
	}
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	snap := saveSnapshot(t, c)
	f.hold("worker-a lease expired")
	b := f.activate("worker-b", "claim-2", f.patchRequest("raise-retention"))
	if res := f.submit("worker-b", b.envelope); res.Outcome != Applied {
		t.Fatalf("worker B: %+v", res)
	}
	f.r.Close()
	c.Stop()

	restored := restoreSnapshot(t, snap)
	// The member runs on the restored data: the revision is the bumped one.
	if resp, err := restored.Client(t).Get(t.Context(), snapPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil ||
		resp.Header.Revision < 1_000_000 || resp.Count == 0 {
		t.Fatalf("restored member: %+v, %v; want the receiver's keys at a bumped revision", resp, err)
	}
	if r, err := OpenEngine(snapEngine(t, restored), f.opts()); !errors.Is(err, ErrRollbackDetected) {
		if err == nil {
			r.Close()
		}
		t.Fatalf("OpenEngine(restored) = %v, want ErrRollbackDetected", err)
	}
	pub := testKey.Public().(ed25519.PublicKey)
	if rep, err := VerifyChainEngine(snapEngine(t, restored), VerifyOptions{Anchor: anchor, PublicKey: pub}); err != nil ||
		rep.Problem != audit.ProblemRollbackDetected {
		t.Fatalf("VerifyChain(restored) = %+v, %v; want rollback_detected", rep, err)
	}

	// The counterexample, on a second restore of the same snapshot:
	// without the anchor check the restored store applies A's
	// superseded grant.
	restored.Stop()
	counter := restoreSnapshot(t, snap)
	v, err := OpenEngineDefective(snapEngine(t, counter), &Options{Key: testKey, Now: clock.Now}, defect.Variant{SkipAnchor: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Submit(f.ctx, "worker-a", a.envelope)
	v.Close()
	if err != nil || res.Outcome != Applied {
		t.Fatalf("restored store without the anchor check: %+v, %v; this test cannot go red without the anchor", res, err)
	}
	counter.Stop()

	restored = restoreSnapshot(t, snap)
	withoutDefects(t)
	q, err := InspectEngine(snapEngine(t, restored), anchor)
	if err != nil {
		t.Fatal(err)
	}
	adm := signed(t, recoveryKey, audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: clock.Now().UnixNano(), Expires: clock.Now().Add(time.Hour).UnixNano(), Reason: "etcd restored from a snapshot before the hold"})
	rr, err := RecoverEngine(snapEngine(t, restored), adm, RecoverOptions{Key: testKey, Anchor: anchor, RecoveryKey: recoveryPub, Now: clock.Now})
	if err != nil {
		t.Fatalf("RecoverEngine: %v", err)
	}
	if len(rr.Scopes) != 1 || rr.GrantsRevoked != 1 {
		t.Fatalf("recover result %+v, want the one scope and A's grant revoked", rr)
	}
	for _, s := range rr.Scopes {
		// Epoch 1 was A's, 2 the hold's on the store that was lost; the
		// restored store is at 1, and recovery must pass both.
		if s.Scope != fixScope || s.PreviousEpoch != 1 || s.Epoch != 3 {
			t.Fatalf("recovered scope %+v, want epoch 3", s)
		}
	}
	open(restored)
	defer f.r.Close()
	wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
	f.activate("worker-c", "claim-3", f.patchRequest("raise-retention"))
	wantDenied(t, f.submit("worker-a", a.envelope), ReasonStaleEpoch)
	checkChain(t, f.r)
}
