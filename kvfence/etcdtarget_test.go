package kvfence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdTarget is the name of the etcd target the tests of this file create.
const etcdTarget = "etcd-policy"

// appKeys numbers the application keys of these tests, so that tests on
// the shared member never meet.
var appKeys atomic.Uint64

// etcdTargetFixture is a fixture on a fresh etcd prefix with the etcd
// target etcdTarget, whose key (returned) is created holding value.
func etcdTargetFixture(t *testing.T, value string) (*fixture, string) {
	t.Helper()
	f := newFixtureOn(t, engines[1].new(t), defect.Variant{})
	key := fmt.Sprintf("/app-%d/policy", appKeys.Add(1))
	tg, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: etcdTarget, Value: []byte(value), Kind: TargetEtcd, Key: key})
	if err != nil {
		t.Fatalf("CreateTargetSpec: %v", err)
	}
	kv := etcdKey(t, key)
	if tg.Kind != TargetEtcd || tg.Key != key || tg.Writes != 1 || tg.Revision != uint64(kv.ModRevision) || string(kv.Value) != value {
		t.Fatalf("created %+v; the key is %+v", tg, kv)
	}
	return f, key
}

// etcdKey reads key from the shared member as any etcd client would;
// a zero KeyValue if it is absent.
func etcdKey(t testing.TB, key string, opts ...clientv3.OpOption) etcdKV {
	t.Helper()
	cli := etcdClient(t)
	defer cli.Close()
	resp, err := cli.Get(context.Background(), key, opts...)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return etcdKV{}
	}
	return etcdKV{Value: resp.Kvs[0].Value, ModRevision: resp.Kvs[0].ModRevision, CreateRevision: resp.Kvs[0].CreateRevision}
}

// etcdKV is one version of a key.
type etcdKV struct {
	Value                       []byte
	ModRevision, CreateRevision int64
}

// etcdWorker activates a grant for req on the etcd target, holding the
// scope first if it is open.
func (f *fixture) etcdWorker(name, action string, req *Request) worker {
	f.t.Helper()
	if st, err := f.r.Status(fixScope); err != nil {
		f.t.Fatal(err)
	} else if st.Mode == ModeOpen {
		f.hold("next worker")
	}
	req.V, req.Action, req.Target = 1, action, etcdTarget
	return f.activate(name, "claim-"+action, f.request(req))
}

// storeKeyRevision is the mod revision of a store key of the receiver's
// prefix: the revision of the commit that last wrote it.
func storeKeyRevision(t testing.TB, f *fixture, bucket []byte, key []byte) int64 {
	t.Helper()
	return etcdKey(t, f.store.prefix+string(bucket)+"/"+string(key)).ModRevision
}

// auditKey is the store key of the audit entry seq.
func auditKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

// Ensure that an applied write to an etcd target puts the key in the
// commit of the receipt and the audit entry: the key holds the new raw
// value at the commit's revision, which is the revision of the receipt's
// and the audit entry's own keys and the result's Revision, and a request
// whose expect_revision is the key's mod revision applies. A repeat is
// already_applied with the same revision. Open's state digest and
// verify-chain agree after a reopen.
func TestEtcdTarget_AppliedWithReceipt(t *testing.T) {
	f, key := etcdTargetFixture(t, `{"retention_days":"30"}`)
	created := etcdKey(t, key)
	w := f.etcdWorker("worker-a", "a1", &Request{ExpectRevision: ptr(uint64(created.ModRevision)),
		Patch: []byte(`[{"op":"test","path":"/retention_days","value":"30"},{"op":"replace","path":"/retention_days","value":"45"}]`)})
	res := f.submit(w.name, w.envelope)
	if res.Outcome != Applied {
		t.Fatalf("submit = %+v", res)
	}
	kv := etcdKey(t, key)
	if string(kv.Value) != `{"retention_days":"45"}` || res.Revision != uint64(kv.ModRevision) || kv.ModRevision <= created.ModRevision {
		t.Fatalf("key %s = %q at %d; result revision %d", key, kv.Value, kv.ModRevision, res.Revision)
	}
	if rr := storeKeyRevision(t, f, bucketReceipts, receiptKey(fixScope, "a1")); rr != kv.ModRevision {
		t.Errorf("receipt committed at revision %d, key at %d", rr, kv.ModRevision)
	}
	if ar := storeKeyRevision(t, f, bucketAudit, auditKey(res.AuditSeq)); ar != kv.ModRevision {
		t.Errorf("audit entry committed at revision %d, key at %d", ar, kv.ModRevision)
	}
	tg, err := f.r.Target(etcdTarget)
	if err != nil || tg.Revision != uint64(kv.ModRevision) || string(tg.Value) != string(kv.Value) || tg.Writes != 2 || tg.Key != key {
		t.Fatalf("Target = %+v, %v", tg, err)
	}
	rc, err := f.r.Receipt(fixScope, "a1")
	if err != nil || rc.RevBefore != 1 || rc.RevAfter != 2 {
		t.Fatalf("receipt = %+v, %v; want the fence's writes 1 -> 2", rc, err)
	}
	again := f.submit(w.name, w.envelope)
	if again.Outcome != AlreadyApplied || again.Revision != res.Revision {
		t.Fatalf("repeat = %+v, want already_applied at %d", again, res.Revision)
	}
	if etcdKey(t, key).ModRevision != kv.ModRevision {
		t.Fatal("the repeat wrote the key")
	}
	f.reopen()
	list, err := f.r.Targets(fixScope)
	if err != nil || len(list) != 2 || list[1].Name != etcdTarget || list[1].Revision != uint64(kv.ModRevision) {
		t.Fatalf("Targets = %+v, %v", list, err)
	}
}

// Ensure that a transaction that fails after the decision put the key
// leaves neither the key's write nor the receipt, and that the same
// envelope then applies once.
func TestEtcdTarget_FailedCommitLeavesNeither(t *testing.T) {
	f, key := etcdTargetFixture(t, "v0")
	w := f.etcdWorker("worker-a", "a1", &Request{Set: ptr([]byte("v1"))})
	before := etcdKey(t, key)
	boom := errors.New("injected fault")
	f.r.faults.beforeAudit = func(e *audit.Entry) error {
		if e.Kind == KindSubmit && e.Outcome == string(Applied) {
			return boom
		}
		return nil
	}
	if _, err := f.r.Submit(f.ctx, w.name, w.envelope); !errors.Is(err, boom) {
		t.Fatalf("Submit = %v, want the injected fault", err)
	}
	if after := etcdKey(t, key); after.ModRevision != before.ModRevision || string(after.Value) != "v0" {
		t.Fatalf("the key changed under a failed commit: %+v", after)
	}
	if _, err := f.r.Receipt(fixScope, "a1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("receipt after a failed commit: %v", err)
	}
	f.r.faults.beforeAudit = nil
	if res := f.submit(w.name, w.envelope); res.Outcome != Applied || string(etcdKey(t, key).Value) != "v1" {
		t.Fatalf("retry = %+v", res)
	}
}

// Ensure that a write of the key by another client between the decision's
// read and its commit makes the decision run again on the new value: a
// request with expect_revision is then denied precondition_failed and the
// out-of-band value stays; a request without it applies over the new
// value, once. Without the key's compare in the commit, the first case
// would apply over a value its precondition never saw.
func TestEtcdTarget_OutOfBandWriteDecidesAgain(t *testing.T) {
	for _, tt := range []struct {
		name   string
		expect bool
		want   Outcome
		value  string
	}{
		{"expect_revision given", true, Denied, "out-of-band"},
		{"no precondition", false, Applied, "v1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, key := etcdTargetFixture(t, "v0")
			req := &Request{Set: ptr([]byte("v1"))}
			if tt.expect {
				req.ExpectRevision = ptr(uint64(etcdKey(t, key).ModRevision))
			}
			w := f.etcdWorker("worker-a", "a1", req)
			cli := etcdClient(t)
			defer cli.Close()
			var runs atomic.Int32
			f.r.faults.beforeAudit = func(e *audit.Entry) error {
				if e.Kind == KindSubmit && e.Outcome == string(Applied) && runs.Add(1) == 1 {
					if _, err := cli.Put(context.Background(), key, "out-of-band"); err != nil {
						return err
					}
				}
				return nil
			}
			res := f.submit(w.name, w.envelope)
			if res.Outcome != tt.want || string(etcdKey(t, key).Value) != tt.value {
				t.Fatalf("submit = %+v; key %q", res, etcdKey(t, key).Value)
			}
			if runs.Load() == 0 {
				t.Fatal("the decision never reached its write: nothing was raced")
			}
			if tt.want == Denied && res.Reason != ReasonPreconditionFailed {
				t.Fatalf("reason %s", res.Reason)
			}
		})
	}
}

// Ensure that denied submits and a stale worker after a hold never touch
// the key: its mod revision stays, whatever they send.
func TestEtcdTarget_StaleWorkerNeverWrites(t *testing.T) {
	f, key := etcdTargetFixture(t, "v0")
	a := f.etcdWorker("worker-a", "a1", &Request{Set: ptr([]byte("from A"))})
	f.hold("worker-a stalled")
	b := f.etcdWorker("worker-b", "b1", &Request{Set: ptr([]byte("from B")), ExpectValue: ptr([]byte("not v0"))})
	before := etcdKey(t, key)
	wantDenied(t, f.submit(a.name, a.envelope), ReasonStaleEpoch)
	wantDenied(t, f.submit(b.name, b.envelope), ReasonPreconditionFailed)
	f.hold("again")
	wantDenied(t, f.submit(a.name, a.envelope), ReasonReceiverHeld)
	wantDenied(t, f.submit(b.name, b.envelope), ReasonReceiverHeld)
	if after := etcdKey(t, key); after.ModRevision != before.ModRevision || string(after.Value) != "v0" {
		t.Fatalf("the key changed: %+v", after)
	}
}

// Ensure that a receiver on bbolt refuses to create an etcd target
// (ErrKindUnsupported) and writes nothing.
func TestEtcdTarget_BboltRefuses(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	head := f.r.Head()
	_, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: etcdTarget, Value: []byte("v"), Kind: TargetEtcd, Key: "/app/policy"})
	if !errors.Is(err, ErrKindUnsupported) || !strings.Contains(err.Error(), "etcd engine") {
		t.Fatalf("CreateTargetSpec on bbolt = %v, want ErrKindUnsupported", err)
	}
	if _, err := f.r.Target(etcdTarget); !errors.Is(err, ErrUnknownTarget) || f.r.Head() != head {
		t.Fatalf("something was written: %v", err)
	}
}

// Ensure that an etcd target's key is refused, with nothing written, when
// it is malformed, lies in the receiver's own prefix, is another etcd
// target's, or holds another value; that a key holding exactly the value
// is adopted at its mod revision; and that a key is named only for the
// etcd kind.
func TestEtcdTarget_KeysRefused(t *testing.T) {
	f, key := etcdTargetFixture(t, "v0")
	cli := etcdClient(t)
	defer cli.Close()
	busy := fmt.Sprintf("/app-%d/busy", appKeys.Add(1))
	if _, err := cli.Put(context.Background(), busy, "theirs"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		spec TargetSpec
		want error
	}{
		{"empty key", TargetSpec{Kind: TargetEtcd}, ErrInvalidArgument},
		{"blank in key", TargetSpec{Kind: TargetEtcd, Key: "/app/a b"}, ErrInvalidArgument},
		{"control byte", TargetSpec{Kind: TargetEtcd, Key: "/app/a\x00"}, ErrInvalidArgument},
		{"not ASCII", TargetSpec{Kind: TargetEtcd, Key: "/app/é"}, ErrInvalidArgument},
		{"oversized", TargetSpec{Kind: TargetEtcd, Key: "/" + strings.Repeat("k", engine.MaxRawKeySize)}, ErrInvalidArgument},
		{"the receiver's prefix", TargetSpec{Kind: TargetEtcd, Key: f.store.prefix + "targets/" + etcdTarget}, engine.ErrReservedKey},
		{"the receiver's prefix itself", TargetSpec{Kind: TargetEtcd, Key: f.store.prefix}, engine.ErrReservedKey},
		{"another target's key", TargetSpec{Kind: TargetEtcd, Key: key, Value: []byte("v0")}, ErrTargetKeyInUse},
		{"a key holding another value", TargetSpec{Kind: TargetEtcd, Key: busy, Value: []byte("mine")}, ErrTargetKeyInUse},
		{"a key for an internal target", TargetSpec{Key: "/app/x"}, ErrInvalidArgument},
		{"an effect for an etcd target", TargetSpec{Kind: TargetEtcd, Key: "/app/x", Effect: "e"}, ErrInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			head := f.r.Head()
			tt.spec.Scope, tt.spec.Name = fixScope, "refused"
			if _, err := f.admin.CreateTargetSpec(f.ctx, tt.spec); !errors.Is(err, tt.want) {
				t.Fatalf("CreateTargetSpec = %v, want %v", err, tt.want)
			}
			if f.r.Head() != head {
				t.Fatal("a refused creation wrote to the chain")
			}
		})
	}
	if kv := etcdKey(t, busy); string(kv.Value) != "theirs" {
		t.Fatalf("a refused creation wrote the key: %q", kv.Value)
	}
	tg, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: "adopted", Kind: TargetEtcd, Key: busy, Value: []byte("theirs")})
	if kv := etcdKey(t, busy); err != nil || tg.Revision != uint64(kv.ModRevision) || string(tg.Value) != "theirs" {
		t.Fatalf("adopt = %+v, %v; key %+v", tg, err, kv)
	}
}

// Ensure that a stored target record of kind etcd decodes only whole: a
// key that is missing or malformed, a value copy, or a digest of the
// wrong size is ErrBadFormat, never an internal target; and that an
// internal target's record encodes as it did before kinds existed.
func TestEtcdTarget_RecordChecked(t *testing.T) {
	sum := sha256.Sum256([]byte("v"))
	good := targetRecord{Scope: "s", Revision: 1, Value: []byte{}, Kind: TargetEtcd, Key: "/app/k", ValueSHA256: sum[:]}
	for _, tt := range []struct {
		name string
		edit func(*targetRecord)
		ok   bool
	}{
		{"whole", func(*targetRecord) {}, true},
		{"no key", func(r *targetRecord) { r.Key = "" }, false},
		{"key with a blank", func(r *targetRecord) { r.Key = "/app/a b" }, false},
		{"a value copy", func(r *targetRecord) { r.Value = []byte("v") }, false},
		{"short digest", func(r *targetRecord) { r.ValueSHA256 = sum[:8] }, false},
		{"no digest", func(r *targetRecord) { r.ValueSHA256 = nil }, false},
		{"an effect", func(r *targetRecord) { r.Effect = "e" }, false},
		{"internal with a key", func(r *targetRecord) { r.Kind = "" }, false},
		{"func with a key", func(r *targetRecord) { r.Kind, r.Effect = TargetFunc, "e" }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := good
			tt.edit(&rec)
			raw, err := encodeCanonical(&rec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseTarget("t", raw)
			if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, ErrBadFormat)) {
				t.Fatalf("parse = %+v, %v", got, err)
			}
			if tt.ok && (got.Key != rec.Key || !bytes.Equal(got.ValueSHA256, rec.ValueSHA256)) {
				t.Fatalf("parse = %+v", got)
			}
		})
	}
	internal, err := encodeCanonical(&targetRecord{Scope: "s", Revision: 1, Value: []byte("v")})
	if err != nil || bytes.Contains(internal, []byte("key")) || bytes.Contains(internal, []byte("kind")) {
		t.Fatalf("internal record %x, %v", internal, err)
	}
}

// Ensure that the same envelope sent many times at once, so that repeats
// share a group-committed batch with the write they repeat, writes the key
// once, and that every answer, applied or already_applied, gives the
// revision the write gave the key: a repeat in the write's own batch is
// told the revision of that commit, known only after it.
func TestEtcdTarget_ConcurrentRepeatsOneWrite(t *testing.T) {
	f, key := etcdTargetFixture(t, "v0")
	w := f.etcdWorker("worker-a", "a1", &Request{Set: ptr([]byte("v1"))})
	before := etcdKey(t, key)
	// A scope's creation holds the commit queue while the submits line up
	// behind it, so that they share the next batch.
	release, blocked := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.r.faults.beforeAudit = func(e *audit.Entry) error {
		if e.Kind == KindScopeCreated {
			once.Do(func() { close(blocked); <-release })
		}
		return nil
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := f.admin.CreateScope(f.ctx, "blocker"); err != nil {
			t.Error(err)
		}
	})
	<-blocked
	const n = 16
	results := make([]Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { results[i], errs[i] = f.r.Submit(f.ctx, w.name, w.envelope) })
	}
	time.Sleep(300 * time.Millisecond)
	close(release)
	wg.Wait()
	after := etcdKey(t, key)
	applied := 0
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("submit %d: %v", i, errs[i])
		}
		if res.Outcome == Applied {
			applied++
		}
		if res.Revision != uint64(after.ModRevision) {
			t.Errorf("submit %d: %s at revision %d, the key is at %d", i, res.Outcome, res.Revision, after.ModRevision)
		}
	}
	if applied != 1 || string(after.Value) != "v1" {
		t.Fatalf("%d applied; key %q", applied, after.Value)
	}
	if hist := after.ModRevision - before.ModRevision; hist <= 0 {
		t.Fatalf("the key did not move: %d -> %d", before.ModRevision, after.ModRevision)
	}
	if v := etcdKey(t, key, clientv3.WithRev(after.ModRevision-1)); v.ModRevision != before.ModRevision {
		t.Fatalf("the key was written more than once: the version before the last is at %d, not %d", v.ModRevision, before.ModRevision)
	}
}

// Ensure that a key deleted outside the fence makes a write
// precondition_failed, with nothing written, and that the fence does not
// recreate it.
func TestEtcdTarget_DeletedKeyRefused(t *testing.T) {
	f, key := etcdTargetFixture(t, "v0")
	w := f.etcdWorker("worker-a", "a1", &Request{Set: ptr([]byte("v1"))})
	cli := etcdClient(t)
	defer cli.Close()
	if _, err := cli.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	res := f.submit(w.name, w.envelope)
	wantDenied(t, res, ReasonPreconditionFailed)
	if !strings.Contains(res.Detail, "does not exist") {
		t.Fatalf("detail %q", res.Detail)
	}
	if kv := etcdKey(t, key); kv.ModRevision != 0 {
		t.Fatalf("the fence recreated the key: %+v", kv)
	}
	if tg, err := f.r.Target(etcdTarget); err != nil || tg.Value != nil || tg.Revision != 0 {
		t.Fatalf("Target of a deleted key = %+v, %v", tg, err)
	}
}

// Ensure that two creations racing for one key, in one batch or in two
// commits, leave one target on it: the other is ErrTargetKeyInUse (the
// scan of the targets is compared at the commit and sees the batch's own
// writes).
func TestEtcdTarget_CreationRaceOneKey(t *testing.T) {
	f, _ := etcdTargetFixture(t, "v0")
	for round := range 4 {
		key := fmt.Sprintf("/app-%d/raced", appKeys.Add(1))
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: fmt.Sprintf("raced-%d-%d", round, i),
					Kind: TargetEtcd, Key: key, Value: []byte("v")})
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, ErrTargetKeyInUse):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d creations on one key: %v", round, ok, errs)
		}
	}
}
