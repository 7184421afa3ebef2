package kvfence

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/defect"
)

// fakeWrite is one change a fakeObject took, in order.
type fakeWrite struct {
	version int
	stamp   Stamp
	value   []byte
	fence   bool
}

// fakeObject is an in-memory remote object with integer versions, a UID
// and fault injection, and the Dispatcher that writes it.
type fakeObject struct {
	mu      sync.Mutex
	exists  bool
	uid     string
	version int
	value   []byte
	stamp   Stamp
	log     []fakeWrite
	applies int

	// readErr fails every Read.
	readErr error
	// failApply makes Apply return it without writing.
	failApply error
	// block, if non-nil, holds Apply until it is closed, or, unless
	// ignoreCtx, until the call's context ends (a timeout: nothing
	// written).
	block     chan struct{}
	ignoreCtx bool
	// started receives a value when Apply begins, if non-nil.
	started chan struct{}
	// loseAnswer makes Apply write, then wait for its context to end and
	// return its error: the answer is lost.
	loseAnswer bool
	// beforeWrite runs in Apply before the conditional write, unlocked.
	beforeWrite func()
	// applyDelay delays Apply.
	applyDelay time.Duration
	// lateResult receives Apply's error when it ends (if non-nil).
	lateResult chan error
}

func newFakeObject(value string) *fakeObject {
	return &fakeObject{exists: true, uid: "uid-1", version: 1, value: []byte(value)}
}

var testObject = RemoteObject{Version: "v1", Resource: "configmaps", Namespace: "prod", Name: "backup-policy"}

func (o *fakeObject) state() RemoteState {
	return RemoteState{Version: strconv.Itoa(o.version), UID: o.uid, Value: bytes.Clone(o.value), Stamp: o.stamp}
}

// Read implements Dispatcher.
func (o *fakeObject) Read(ctx context.Context, obj RemoteObject) (RemoteState, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.readErr != nil {
		return RemoteState{}, o.readErr
	}
	if !o.exists || obj != testObject {
		return RemoteState{}, ErrRemoteNotFound
	}
	return o.state(), nil
}

// Apply implements Dispatcher.
func (o *fakeObject) Apply(ctx context.Context, in DispatchInput) (st RemoteState, err error) {
	o.mu.Lock()
	o.applies++
	block, started, lose, before, delay, fail, late := o.block, o.started, o.loseAnswer, o.beforeWrite, o.applyDelay, o.failApply, o.lateResult
	ignore := o.ignoreCtx
	o.mu.Unlock()
	if late != nil {
		defer func() { late <- err }()
	}
	if started != nil {
		started <- struct{}{}
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	if block != nil {
		if ignore {
			<-block
		} else {
			select {
			case <-block:
			case <-ctx.Done():
				return RemoteState{}, ctx.Err()
			}
		}
	}
	if fail != nil {
		return RemoteState{}, fail
	}
	if before != nil {
		before()
	}
	o.mu.Lock()
	if !o.exists {
		o.mu.Unlock()
		return RemoteState{}, ErrRemoteNotFound
	}
	if o.uid != in.UID || strconv.Itoa(o.version) != in.Precondition {
		o.mu.Unlock()
		return RemoteState{}, ErrRemoteConflict
	}
	o.version++
	o.value, o.stamp = bytes.Clone(in.Value), in.Stamp
	o.log = append(o.log, fakeWrite{version: o.version, stamp: in.Stamp, value: bytes.Clone(in.Value)})
	st = o.state()
	o.mu.Unlock()
	if lose {
		<-ctx.Done()
		return RemoteState{}, ctx.Err()
	}
	return st, nil
}

// Fence implements Dispatcher.
func (o *fakeObject) Fence(ctx context.Context, obj RemoteObject, stamp Stamp) (RemoteState, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.exists {
		return RemoteState{}, ErrRemoteNotFound
	}
	o.version++
	o.stamp = stamp
	o.log = append(o.log, fakeWrite{version: o.version, stamp: stamp, fence: true})
	return o.state(), nil
}

// outOfBand changes the object as another writer would.
func (o *fakeObject) outOfBand(value string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.version++
	o.value, o.stamp = []byte(value), Stamp{}
	o.log = append(o.log, fakeWrite{version: o.version, value: []byte(value)})
}

func (o *fakeObject) snapshot() (RemoteState, []fakeWrite, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.state(), append([]fakeWrite(nil), o.log...), o.applies
}

func (o *fakeObject) set(fn func(o *fakeObject)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fn(o)
}

const remoteTarget = "cm/prod/backup-policy"

// newRemoteFixture is the backup-policy fixture on s's engine with a
// kubernetes target, remoteTarget, standing for obj through a fake
// dispatcher.
func newRemoteFixture(t testing.TB, s *store, obj *fakeObject, timeout time.Duration) *fixture {
	t.Helper()
	f := newFixtureOn(t, s, defect.Variant{})
	f.dispatchers, f.dispatchTimeout = map[TargetKind]Dispatcher{TargetKubernetes: obj}, timeout
	f.reopen()
	o := testObject
	tg, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: remoteTarget, Kind: TargetKubernetes, Object: &o})
	if err != nil {
		t.Fatalf("CreateTargetSpec: %v", err)
	}
	if tg.Kind != TargetKubernetes || tg.UID != "uid-1" || tg.Object == nil || *tg.Object != testObject || tg.Revision != 1 {
		t.Fatalf("created target %+v", tg)
	}
	return f
}

// remoteRequest is an approved patch of the remote target for action.
func (f *fixture) remoteRequest(action string) []byte {
	return f.request(&Request{V: 1, Action: action, Target: remoteTarget, Patch: []byte(fixPatch)})
}

// receiptOf returns the receipt of action, failing the test if none.
func (f *fixture) receiptOf(action string) Receipt {
	f.t.Helper()
	rc, err := f.r.Receipt(fixScope, action)
	if err != nil {
		f.t.Fatalf("Receipt %s: %v", action, err)
	}
	return rc
}

// holdAsync holds the fixture scope in a goroutine; the channel gets its
// result.
func (f *fixture) holdAsync(ctx context.Context, id string) <-chan holdOutcome {
	ch := make(chan holdOutcome, 1)
	go func() {
		res, err := f.admin.Hold(ctx, HoldRequest{Scopes: []string{fixScope}, Reason: "incident", ID: id})
		ch <- holdOutcome{res, err, time.Now()}
	}()
	return ch
}

type holdOutcome struct {
	res HoldResult
	err error
	at  time.Time
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
