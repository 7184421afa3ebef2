package kvfence

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/defect"
	"github.com/kvfence/kvfence/internal/etcdtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// raceAuthPasswords are the password files of deploy/etcd/README.md's
// receiver cluster.
var raceAuthPasswords = map[string]string{"root.password": "root-pw", "receiver.password": "receiver-pw", "worker-a.password": "worker-pw", "ledger.password": "ledger-pw"}

// raceAuthCluster starts a cluster of its own and runs the receiver
// cluster's etcdctl lines of deploy/etcd/README.md on it, so that the
// roles tested are the documented ones.
func raceAuthCluster(t *testing.T) *etcdtest.Cluster {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "deploy", "etcd", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.SplitSeq(string(doc), "\n") {
		if strings.Contains(l, `"$RECEIVER_ETCD"`) {
			lines = append(lines, l)
		}
	}
	ec := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n, err := etcdtest.ApplyEtcdctl(ctx, strings.Join(lines, "\n"), map[string]*clientv3.Client{"RECEIVER_ETCD": ec.Client(t)}, raceAuthPasswords); err != nil || n < 10 {
		t.Fatalf("deploy/etcd/README.md: %d commands, %v", n, err)
	}
	return ec
}

// userClient connects to ec as user.
func userClient(t *testing.T, ec *etcdtest.Cluster, user, passwordFile string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second,
		Username: user, Password: raceAuthPasswords[passwordFile], Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// authReceiver initialises and opens, as variant, a receiver at prefix of
// ec as the receiver's etcd user, with an anchor file.
func authReceiver(t *testing.T, ec *etcdtest.Cluster, prefix string, variant defect.Variant) *Receiver {
	t.Helper()
	newEngine := func() *etcdengine.Engine {
		e, err := etcdengine.New(userClient(t, ec, "kvfence-receiver", "receiver.password"), &etcdengine.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	clock := newClock()
	anchor := audit.FileAnchor{Path: filepath.Join(t.TempDir(), "receiver.anchor")}
	ie := newEngine()
	if err := InitEngine(ie, &InitOptions{ReceiverID: "race-receiver", Key: testKey, Anchor: anchor, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	ie.Close()
	r, err := OpenEngineDefective(newEngine(), &Options{Now: clock.Now, Key: testKey, Anchor: anchor}, variant)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// keyVersion is one version of the target's key, from etcd's history.
type keyVersion struct {
	value []byte
	mod   int64
}

// keyHistory reads every version of key that etcd keeps, oldest first,
// walking back from the newest by mod revision.
func keyHistory(t *testing.T, cli *clientv3.Client, key string) []keyVersion {
	t.Helper()
	var out []keyVersion
	var opts []clientv3.OpOption
	for {
		resp, err := cli.Get(context.Background(), key, opts...)
		if err != nil {
			t.Fatalf("history of %s: %v", key, err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		kv := resp.Kvs[0]
		out = append([]keyVersion{{value: kv.Value, mod: kv.ModRevision}}, out...)
		if kv.ModRevision == kv.CreateRevision {
			break
		}
		opts = []clientv3.OpOption{clientv3.WithRev(kv.ModRevision - 1)}
	}
	return out
}

// Ensure that, on etcd with auth set up as deploy/etcd/README.md says,
// an administrator holding and re-activating a scope while its current
// worker and every superseded worker submit to an etcd target, over many
// randomised schedules, lets no write under a superseded grant reach the
// key after the hold that superseded it commits; that the key's history
// in etcd and the audit chain agree version for version (each applied
// entry committed at the revision of one version, with its value's
// digest and a grant of that round); and that a worker's own etcd
// credentials read the key but cannot write it.
//
// The same race against a receiver that skips checks 2 to 4 must find
// writes of superseded grants after their holds: the check is able to
// fail.
func TestEtcdTarget_HoldRaceWithAuth(t *testing.T) {
	rounds := 16
	if testing.Short() {
		rounds = 4
	}
	ec := raceAuthCluster(t)
	for _, tt := range []struct {
		name    string
		variant defect.Variant
		late    bool // whether writes after their holds are expected
	}{
		{"sound", defect.Variant{}, false},
		{"without the fence checks", defect.Variant{SkipAuthority: true}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			late := holdRace(t, ec, "/kvfence/"+tt.name[:5]+"/", "/app/"+tt.name[:5]+"/policy", rounds, tt.variant)
			if tt.late != (late > 0) {
				t.Fatalf("%d writes landed after the hold that superseded their grant; want them: %v", late, tt.late)
			}
		})
	}
}

// holdRace runs the race of TestEtcdTarget_HoldRaceWithAuth on a receiver
// at prefix with its target at key, and returns how many of the key's
// versions were written under a grant after the hold that superseded it.
func holdRace(t *testing.T, ec *etcdtest.Cluster, prefix, key string, rounds int, variant defect.Variant) (late int) {
	const scope = "race"
	r := authReceiver(t, ec, prefix, variant)
	defer r.Close()
	ctx, admin := context.Background(), r.Admin()
	if _, err := admin.CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	// A key the receiver's role may not write: refused whole.
	if _, err := admin.CreateTargetSpec(ctx, TargetSpec{Scope: scope, Name: "outside", Kind: TargetEtcd, Key: "/other/policy"}); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("a key outside the receiver's role: %v", err)
	}
	if _, err := admin.CreateTargetSpec(ctx, TargetSpec{Scope: scope, Name: etcdTarget, Value: []byte("v0"), Kind: TargetEtcd, Key: key}); err != nil {
		t.Fatal(err)
	}

	type submitted struct {
		round int
		res   Result
	}
	var (
		mu       sync.Mutex
		results  []submitted
		holdSeqs []uint64 // holdSeqs[i] is the hold that superseded round i
		envs     [][]byte
		grants   []string
	)
	submit := func(round int) {
		res, err := r.Submit(ctx, fmt.Sprintf("worker-%d", round), envs[round])
		if err != nil {
			t.Errorf("submit of round %d: %v", round, err)
			return
		}
		mu.Lock()
		results = append(results, submitted{round, res})
		mu.Unlock()
	}
	for i := range rounds {
		req, err := EncodeRequest(&Request{V: 1, Action: fmt.Sprintf("a%d", i), Target: etcdTarget, Set: ptr([]byte(fmt.Sprintf("v-%d", i)))})
		if err != nil {
			t.Fatal(err)
		}
		name, claim := fmt.Sprintf("worker-%d", i), fmt.Sprintf("claim-%d", i)
		g, err := admin.Activate(ctx, ActivateRequest{Scope: scope, Executor: name, Claim: claim, Request: req})
		if err != nil {
			t.Fatal(err)
		}
		env, err := EncodeEnvelope(&Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.ID, Executor: name, Claim: claim, Request: req})
		if err != nil {
			t.Fatal(err)
		}
		envs, grants = append(envs, env), append(grants, g.ID)
		var wg sync.WaitGroup
		// The current worker, every superseded one, and the hold, each
		// after a random pause, so that the schedules differ.
		for j := i; j >= 0; j-- {
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				submit(j)
			})
		}
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			h, err := admin.Hold(ctx, HoldRequest{Scopes: []string{scope}, Reason: fmt.Sprintf("round %d", i)})
			if err != nil {
				t.Errorf("hold: %v", err)
				return
			}
			holdSeqs = append(holdSeqs, h.AuditSeq)
			// Superseded now: the stale worker tries again at once.
			submit(i)
		})
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}

	root := userClient(t, ec, "root", "root.password")
	defer root.Close()
	revOf := func(seq uint64) int64 {
		resp, err := root.Get(ctx, prefix+"audit/"+string(auditKey(seq)))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("audit entry %d: %v", seq, err)
		}
		return resp.Kvs[0].ModRevision
	}
	history := keyHistory(t, root, key)
	if len(history) == 0 || string(history[0].value) != "v0" {
		t.Fatalf("history %v", history)
	}
	byRev := map[int64]keyVersion{}
	for _, v := range history[1:] {
		byRev[v.mod] = v
	}
	// The audit chain's applied entries are the key's versions, one for
	// one, at their revisions.
	seqByRev := map[int64]uint64{}
	err := r.Events(0, func(e Event) bool {
		if e.Kind != KindSubmit || e.Outcome != string(Applied) || e.Target != etcdTarget {
			return true
		}
		rev := revOf(e.Seq)
		v, ok := byRev[rev]
		sum := sha256.Sum256(v.value)
		var round int
		fmt.Sscanf(string(v.value), "v-%d", &round)
		if !ok || string(sum[:]) != string(e.ValueSHA256) || e.Grant != grants[round] {
			t.Errorf("applied entry %d (grant %s) matches no version of the key: %q", e.Seq, e.Grant, v.value)
		}
		seqByRev[rev] = e.Seq
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	applied := len(seqByRev)
	if applied != len(history)-1 {
		t.Errorf("%d applied entries, %d writes of the key", applied, len(history)-1)
	}
	// No version under round i's grant after the hold that superseded it:
	// committed at a revision before the hold's, or in the hold's own
	// commit (a group-committed batch) decided before it in the chain.
	for _, v := range history[1:] {
		var round int
		if _, err := fmt.Sscanf(string(v.value), "v-%d", &round); err != nil {
			t.Fatalf("a version no worker wrote: %q", v.value)
		}
		hold := holdSeqs[round]
		if holdRev := revOf(hold); v.mod > holdRev || (v.mod == holdRev && seqByRev[v.mod] > hold) {
			t.Logf("round %d's write landed at revision %d (entry %d), after its hold committed at %d (entry %d)",
				round, v.mod, seqByRev[v.mod], holdRev, hold)
			late++
		}
	}
	for _, s := range results {
		if s.res.Outcome == Applied && byRev[int64(s.res.Revision)].mod == 0 {
			t.Errorf("round %d applied at revision %d, which the key never had", s.round, s.res.Revision)
		}
	}
	t.Logf("%d rounds, %d submits, %d applied", rounds, len(results), applied)
	if applied == 0 {
		t.Fatal("no write was ever applied: the race tested nothing")
	}

	// The worker's own credentials: it reads the key, and etcd refuses its
	// writes, direct or in a Txn.
	w := userClient(t, ec, "worker-a", "worker-a.password")
	defer w.Close()
	if resp, err := w.Get(ctx, key); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the worker cannot read the key: %v", err)
	}
	if _, err := w.Put(ctx, key, "direct"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the worker's put: %v, want permission denied", err)
	}
	if _, err := w.Txn(ctx).Then(clientv3.OpPut(key, "direct")).Commit(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the worker's txn: %v, want permission denied", err)
	}
	if after := keyHistory(t, root, key); len(after) != len(history) {
		t.Errorf("the key changed under the worker's refused writes")
	}
	return late
}

// Ensure that a commit etcd refuses as a whole leaves neither the key's
// write nor the receipt and audit entry: the receiver's user may read a
// key but not write it (a target adopted on a prefix its role only
// reads), so the Txn that would write the key with the receipt is refused
// by etcd auth, and the receiver still serves, its chain intact.
func TestEtcdTarget_RefusedTxnLeavesNeither(t *testing.T) {
	ec := raceAuthCluster(t)
	root := userClient(t, ec, "root", "root.password")
	defer root.Close()
	ctx := context.Background()
	if _, err := root.RoleGrantPermission(ctx, "kvfence-receiver", "/ro/", "/ro0", clientv3.PermissionType(clientv3.PermRead)); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Put(ctx, "/ro/policy", "v0"); err != nil {
		t.Fatal(err)
	}
	r := authReceiver(t, ec, "/kvfence/", defect.Variant{})
	defer r.Close()
	admin := r.Admin()
	if _, err := admin.CreateScope(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	// Adopting the key writes nothing to it: reading is enough.
	if _, err := admin.CreateTargetSpec(ctx, TargetSpec{Scope: "s", Name: etcdTarget, Value: []byte("v0"), Kind: TargetEtcd, Key: "/ro/policy"}); err != nil {
		t.Fatal(err)
	}
	req, err := EncodeRequest(&Request{V: 1, Action: "a1", Target: etcdTarget, Set: ptr([]byte("v1"))})
	if err != nil {
		t.Fatal(err)
	}
	g, err := admin.Activate(ctx, ActivateRequest{Scope: "s", Executor: "w", Claim: "c", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	env, err := EncodeEnvelope(&Envelope{V: 1, Scope: "s", Epoch: g.Epoch, Grant: g.ID, Executor: "w", Claim: "c", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	head := r.Head()
	if _, err := r.Submit(ctx, "w", env); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("Submit = %v, want etcd's refusal", err)
	}
	if resp, err := root.Get(ctx, "/ro/policy"); err != nil || string(resp.Kvs[0].Value) != "v0" {
		t.Fatalf("the key changed: %v %v", resp, err)
	}
	if _, err := r.Receipt("s", "a1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("receipt after a refused commit: %v", err)
	}
	if r.Head() != head {
		t.Fatal("the chain moved under a refused commit")
	}
	// The receiver still decides: a hold commits, and the envelope is then
	// denied without touching the key.
	if _, err := admin.Hold(ctx, HoldRequest{Scopes: []string{"s"}, Reason: "refused"}); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Submit(ctx, "w", env); err != nil || res.Outcome != Denied {
		t.Fatalf("after the hold: %+v, %v", res, err)
	}
	checkChain(t, r)
}
