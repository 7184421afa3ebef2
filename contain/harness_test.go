package contain_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/contain"
	"github.com/kvfence/kvfence/engine/boltengine"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// testReceiver is an embedded receiver registered in the test's ledger.
type testReceiver struct {
	name string
	r    *kvfence.Receiver
	priv ed25519.PrivateKey
	db   string
	anch string
}

// world is a ledger and a pool of receivers that many cases share: each
// case works on an action and scopes of its own.
type world struct {
	t      testing.TB
	dir    string
	l      *ledger.Ledger
	recvs  []*testReceiver
	byName map[string]*testReceiver
	n      int // cases so far, for fresh names

	mu     sync.Mutex
	faults map[string]*faulty // by receiver name, for the current case
	// wrap, when set, puts a Boundary in front of each receiver without a
	// fault wrapper.
	wrap func(name string, b contain.Boundary) contain.Boundary

	lpath   string
	lkey    ed25519.PrivateKey
	lanchor *audit.MemAnchor

	// beforeActivate, if set, runs in newScenario after worker A's claim
	// and before its grants are activated.
	beforeActivate func(sc *scenario)
}

func key(seed byte) ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	s[0], s[1] = seed, 0x5a
	return ed25519.NewKeyFromSeed(s)
}

// newWorld makes a ledger and n receivers, each with its own key,
// registered in the ledger as receivers on this host.
func newWorld(t testing.TB, n int) *world {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	lk := key(100)
	// The anchors are in memory and the stores skip fsync: the tests are
	// about the coordinator's logic, not durability, and must stay fast.
	lpath, lanchor := filepath.Join(dir, "ledger.db"), &audit.MemAnchor{}
	if err := ledger.Init(lpath, &ledger.InitOptions{LedgerID: "ledger-1", Key: lk, Anchor: lanchor}); err != nil {
		t.Fatal(err)
	}
	e, err := boltengine.OpenFile(lpath, boltengine.FileOptions{NoSync: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.OpenEngine(e, &ledger.Options{Key: lk, Anchor: lanchor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	w := &world{t: t, dir: dir, l: l, byName: map[string]*testReceiver{}, faults: map[string]*faulty{},
		lpath: lpath, lkey: lk, lanchor: lanchor}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("r%d", i+1)
		tr := &testReceiver{name: name, priv: key(byte(i + 1)), db: filepath.Join(dir, name+".db"), anch: filepath.Join(dir, name+".anchor")}
		anchor := &audit.MemAnchor{}
		if err := kvfence.Init(tr.db, &kvfence.InitOptions{ReceiverID: "receiver-" + name, Key: tr.priv, Anchor: anchor}); err != nil {
			t.Fatal(err)
		}
		r, err := kvfence.Open(tr.db, &kvfence.Options{Key: tr.priv, Anchor: anchor, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		tr.r = r
		if _, err := l.AddReceiver(ctx, ledger.AddReceiverRequest{Name: name, DB: tr.db, Anchor: tr.anch, ReceiverID: "receiver-" + name,
			PublicKey: tr.priv.Public().(ed25519.PublicKey), Operator: "op"}); err != nil {
			t.Fatal(err)
		}
		w.recvs = append(w.recvs, tr)
		w.byName[name] = tr
	}
	return w
}

// dial is the coordinator's Dial: each receiver behind its fault wrapper.
func (w *world) dial(ctx context.Context, r ledger.Receiver) (contain.Boundary, error) {
	tr, ok := w.byName[r.Name]
	if !ok {
		return nil, fmt.Errorf("no receiver %s", r.Name)
	}
	w.mu.Lock()
	f, wrap := w.faults[r.Name], w.wrap
	w.mu.Unlock()
	if f == nil {
		if wrap != nil {
			return wrap(r.Name, contain.Embedded(tr.r)), nil
		}
		return contain.Embedded(tr.r), nil
	}
	if f.get() == faultDown {
		return nil, errors.New("connection refused")
	}
	return f, nil
}

func (w *world) coordinator(timeout time.Duration) *contain.Coordinator {
	co, err := contain.New(contain.Options{Ledger: w.l, Dial: w.dial, Timeout: timeout})
	if err != nil {
		w.t.Fatal(err)
	}
	return co
}

// scenario is one action with its boundaries, its superseded claim A and
// its successor's claim B, A's grant active at every boundary.
type scenario struct {
	action  string
	request []byte
	bounds  []ledger.Boundary
	before  map[ledger.Boundary]uint64 // each scope's epoch before containment
	claimA  ledger.Claim
	claimB  ledger.Claim
}

// newScenario approves an action with a boundary at each of the first n
// receivers, claims it for worker A, activates A's grant at every
// boundary, and takes the claim over for worker B.
func (w *world) newScenario(n int) *scenario {
	t := w.t
	t.Helper()
	ctx := context.Background()
	w.n++
	sc := &scenario{action: fmt.Sprintf("action-%d", w.n), before: map[ledger.Boundary]uint64{}}
	v := []byte("v2")
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: sc.action, Target: fmt.Sprintf("t-%d", w.n), Set: &v})
	if err != nil {
		t.Fatal(err)
	}
	sc.request = req
	for i := 0; i < n; i++ {
		tr := w.recvs[i]
		b := ledger.Boundary{Receiver: tr.name, Scope: fmt.Sprintf("s-%d-%d", w.n, i)}
		if _, err := tr.r.Admin().CreateScope(ctx, b.Scope); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.r.Admin().CreateTarget(ctx, b.Scope, fmt.Sprintf("t-%d", w.n), []byte("v1")); err != nil {
			t.Fatal(err)
		}
		sc.bounds = append(sc.bounds, b)
	}
	if _, err := w.l.Approve(ctx, ledger.ApproveRequest{Action: sc.action, Request: req, Approver: "alice", TTL: time.Hour,
		Boundaries: sc.bounds}); err != nil {
		t.Fatal(err)
	}
	if sc.claimA, err = w.l.Claim(ctx, ledger.ClaimRequest{Action: sc.action, Worker: "worker-a"}); err != nil {
		t.Fatal(err)
	}
	if w.beforeActivate != nil {
		w.beforeActivate(sc)
	}
	for _, b := range sc.bounds {
		r := w.byName[b.Receiver].r
		if _, err := r.Admin().Activate(ctx, kvfence.ActivateRequest{Scope: b.Scope, Executor: "worker-a", Claim: sc.claimA.Ref,
			Request: req, Decision: "first"}); err != nil {
			t.Fatal(err)
		}
		st, err := r.Status(b.Scope)
		if err != nil {
			t.Fatal(err)
		}
		sc.before[b] = st.Epoch
	}
	if sc.claimB, err = w.l.Takeover(ctx, ledger.TakeoverRequest{Action: sc.action, Operator: "op", Worker: "worker-b",
		Reason: "worker-a paused"}); err != nil {
		t.Fatal(err)
	}
	return sc
}

func (w *world) status(b ledger.Boundary) kvfence.ScopeStatus {
	w.t.Helper()
	st, err := w.byName[b.Receiver].r.Status(b.Scope)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// successorGrants returns the boundaries at which B's grant is active.
func (w *world) successorGrants(sc *scenario) []ledger.Boundary {
	var out []ledger.Boundary
	for _, b := range sc.bounds {
		if st := w.status(b); st.Grant != nil && st.Grant.Claim == sc.claimB.Ref {
			out = append(out, b)
		}
	}
	return out
}

func (w *world) reconcile(sc *scenario) {
	w.t.Helper()
	if _, err := w.l.Reconcile(context.Background(), sc.claimA.Ref, "op", ledger.StateFailed); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) activateReq(sc *scenario) contain.ActivateRequest {
	return contain.ActivateRequest{Action: sc.action, Executor: "worker-b", Claim: sc.claimB.Ref, Request: sc.request, Decision: "review-7"}
}

// fault is what a faulty boundary does to a hold.
type fault int

const (
	faultNone          fault = iota
	faultDown                // no connection: nothing sent
	faultSlowBefore          // no answer before the timeout; nothing held
	faultSlowAfter           // the hold commits, its answer comes after the timeout
	faultLost                // the hold commits, its answer is lost
	faultForgedKey           // the acknowledgment re-signed by another receiver's key
	faultForgedEpoch         // the acknowledgment's epochs changed
	faultForgedScope         // the acknowledgment names another scope, re-signed with another key
	faultUnsignedEpoch       // the answer's own epochs differ from those its acknowledgment signs
	faultReplayed            // the receiver's own signature over an acknowledgment of another hold id
	faultGarbled             // an error whose text is long and full of control characters
	numFaults
)

func (f fault) String() string {
	return [...]string{"none", "down", "slow-before", "slow-after", "lost", "forged-key", "forged-epoch", "forged-scope",
		"unsigned-epoch", "replayed", "garbled"}[f]
}

// faulty is a Boundary in front of a real receiver that misbehaves as
// its fault says.
type faulty struct {
	real  contain.Boundary
	other ed25519.PrivateKey // a key that is not the receiver's
	own   ed25519.PrivateKey // the receiver's own key
	mu    sync.Mutex
	f     fault
	// realAcks are the acknowledgments the receiver really gave, by
	// scope, whatever the wrapper answered.
	realAcks map[string][]byte
	// failReceipts makes ReceiptsByClaim fail.
	failReceipts bool
}

func newFaulty(real contain.Boundary, other ed25519.PrivateKey) *faulty {
	return &faulty{real: real, other: other, realAcks: map[string][]byte{}}
}

func (f *faulty) get() fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.f
}

func (f *faulty) set(x fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.f = x
}

func (f *faulty) Hold(ctx context.Context, req kvfence.HoldRequest) (kvfence.HoldResult, error) {
	fl := f.get()
	switch fl {
	case faultDown:
		return kvfence.HoldResult{}, errors.New("connection refused")
	case faultSlowBefore:
		<-ctx.Done()
		return kvfence.HoldResult{}, ctx.Err()
	case faultGarbled:
		return kvfence.HoldResult{}, errors.New("\x1b[2J\n" + strings.Repeat("\u202egarbage\x00", 600))
	}
	res, err := f.real.Hold(ctx, req)
	if err != nil {
		return res, err
	}
	for _, hs := range res.Scopes {
		b, merr := hs.Ack.Marshal()
		if merr != nil {
			return kvfence.HoldResult{}, merr
		}
		f.mu.Lock()
		f.realAcks[hs.Scope] = b
		f.mu.Unlock()
	}
	switch fl {
	case faultSlowAfter:
		<-ctx.Done()
		return kvfence.HoldResult{}, ctx.Err()
	case faultLost:
		return kvfence.HoldResult{}, client.ErrOutcomeUnknown
	case faultForgedKey:
		a := res.Scopes[0].Ack.HoldAck
		sa, serr := audit.SignHoldAck(f.other, a)
		if serr != nil {
			return kvfence.HoldResult{}, serr
		}
		res.Scopes[0].Ack = sa
	case faultForgedEpoch:
		// One more than the receiver installed: a boundary claiming a
		// generation it never had, under the receiver's own signature.
		res.Scopes[0].Ack.PreviousEpoch++
		res.Scopes[0].Ack.Epoch++
		res.Scopes[0].PreviousEpoch++
		res.Scopes[0].Epoch++
	case faultUnsignedEpoch:
		res.Scopes[0].Epoch++
	case faultReplayed:
		a := res.Scopes[0].Ack.HoldAck
		a.HoldID = "h-an-earlier-containment"
		sa, serr := audit.SignHoldAck(f.own, a)
		if serr != nil {
			return kvfence.HoldResult{}, serr
		}
		res.Scopes[0].Ack = sa
	case faultForgedScope:
		a := res.Scopes[0].Ack.HoldAck
		a.Scope += "-other"
		sa, serr := audit.SignHoldAck(f.other, a)
		if serr != nil {
			return kvfence.HoldResult{}, serr
		}
		res.Scopes[0].Ack = sa
	}
	return res, nil
}

func (f *faulty) ReceiptsByClaim(ctx context.Context, scope, claim string) ([]kvfence.Receipt, error) {
	f.mu.Lock()
	fail := f.failReceipts
	f.mu.Unlock()
	if f.get() == faultDown || fail {
		return nil, errors.New("connection refused")
	}
	return f.real.ReceiptsByClaim(ctx, scope, claim)
}

func (f *faulty) Status(ctx context.Context, scope string) (kvfence.ScopeStatus, error) {
	if f.get() == faultDown {
		return kvfence.ScopeStatus{}, errors.New("connection refused")
	}
	return f.real.Status(ctx, scope)
}

func (f *faulty) Activate(ctx context.Context, req kvfence.ActivateRequest) (kvfence.Grant, error) {
	if f.get() == faultDown {
		return kvfence.Grant{}, errors.New("connection refused")
	}
	return f.real.Activate(ctx, req)
}

// installFaults puts a fault wrapper in front of each receiver of sc,
// each with the given fault.
func (w *world) installFaults(sc *scenario, fs ...fault) map[string]*faulty {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults = map[string]*faulty{}
	for i, b := range sc.bounds {
		tr := w.byName[b.Receiver]
		other := w.recvs[(i+1)%len(w.recvs)].priv
		if len(w.recvs) == 1 {
			other = key(200)
		}
		f := newFaulty(contain.Embedded(tr.r), other)
		f.own = tr.priv
		if i < len(fs) {
			f.f = fs[i]
		}
		w.faults[b.Receiver] = f
	}
	return w.faults
}
