package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// lossyEngine commits a transaction and then loses its answer, as a
// timed-out etcd Txn that the cluster applied does, or, with failView,
// fails the first read after a commit.
type lossyEngine struct {
	engine.Engine
	// lose makes the next Update that commits report an unknown outcome;
	// loseCanceled does too, with the context's cancellation as the
	// cause, as etcd's client reports a commit whose caller went away.
	lose, loseCanceled atomic.Bool
	// failView makes the first View after the next Update fail.
	failView, viewArmed atomic.Bool
}

func (l *lossyEngine) Update(ctx context.Context, fn func(engine.Tx) error) error {
	// The flags are taken by the next Update that commits: one that fails
	// before its commit (the receiver re-verifying its store after an
	// earlier lost answer, say) committed nothing whose answer to lose.
	if err := l.Engine.Update(ctx, fn); err != nil {
		return err
	}
	lose, canceled := l.lose.Swap(false), l.loseCanceled.Swap(false)
	if canceled {
		return fmt.Errorf("%w: commit: %w", engine.ErrOutcomeUnknown, context.Canceled)
	}
	if l.failView.Swap(false) {
		l.viewArmed.Store(true)
	}
	if lose {
		return fmt.Errorf("%w: the commit's answer was lost (injected after the commit)", engine.ErrOutcomeUnknown)
	}
	return nil
}

func (l *lossyEngine) View(ctx context.Context, fn func(engine.Tx) error) error {
	if l.viewArmed.Swap(false) {
		return errors.New("read failed (injected)")
	}
	return l.Engine.View(ctx, fn)
}

// serveLossy serves a receiver over a lossyEngine on its bbolt file.
func serveLossy(t *testing.T, wrap func(http.Handler) http.Handler) (*served, *lossyEngine) {
	t.Helper()
	var le *lossyEngine
	s := serveOn(t, func(path string, opts *kvfence.Options) (*kvfence.Receiver, error) {
		e, err := boltengine.OpenFile(path, boltengine.FileOptions{Timeout: time.Second, CheckPages: true})
		if err != nil {
			return nil, err
		}
		le = &lossyEngine{Engine: e}
		return kvfence.OpenEngine(le, opts)
	}, wrap)
	return s, le
}

// wantOutcomeUnknown checks that err is the receiver's 503 outcome_unknown,
// matched by both the client's sentinel and kvfence's.
func wantOutcomeUnknown(t *testing.T, what string, err error) {
	t.Helper()
	var ce *client.Error
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, kvfence.ErrOutcomeUnknown) || !errors.As(err, &ce) ||
		ce.Status != http.StatusServiceUnavailable || ce.Code != api.CodeOutcomeUnknown {
		t.Fatalf("%s whose commit answer was lost: %v (%#v); want 503 outcome_unknown, client.ErrOutcomeUnknown", what, err, ce)
	}
	if errors.Is(err, client.ErrServer) {
		t.Fatalf("%s: %v matches ErrServer, which says nothing was applied", what, err)
	}
}

// Ensure that a call whose commit took effect and whose answer the store
// then lost (a lost etcd Txn response) is answered 503 outcome_unknown and
// returned as client.ErrOutcomeUnknown, for a submit and for every
// administrative change, never as a fault that says nothing was applied:
// the change is there, and a retried submit answers already_applied.
func TestOutcomeUnknown_LostCommitAnswer(t *testing.T) {
	s, le := serveLossy(t, nil)
	ctx := context.Background()
	op, b := s.client(operator), s.client(workerB)

	le.lose.Store(true)
	_, err := op.CreateScope(ctx, scope)
	wantOutcomeUnknown(t, "CreateScope", err)
	if st, err := op.Status(ctx, scope); err != nil || st.Scopes[0].Epoch != 1 {
		t.Fatalf("the scope whose creation was of unknown outcome: %+v %v", st, err)
	}
	if _, err := op.CreateScope(ctx, scope); !errors.Is(err, kvfence.ErrScopeExists) {
		t.Fatalf("CreateScope repeated: %v, want ErrScopeExists", err)
	}

	le.lose.Store(true)
	_, err = op.CreateTarget(ctx, scope, scope, []byte(`{"data":{"retention_days":"30"}}`))
	wantOutcomeUnknown(t, "CreateTarget", err)
	if tg, err := op.Target(ctx, scope); err != nil || tg.Revision != 1 {
		t.Fatalf("the target whose creation was of unknown outcome: %+v %v", tg, err)
	}

	le.lose.Store(true)
	req := kvfence.ActivateRequest{Scope: scope, Executor: workerB, Claim: "claim-b", Request: request(t, "raise")}
	_, err = op.Activate(ctx, req)
	wantOutcomeUnknown(t, "Activate", err)
	st, err := op.Status(ctx, scope)
	if err != nil || st.Scopes[0].Mode != kvfence.ModeOpen || st.Scopes[0].Grant == nil {
		t.Fatalf("the scope whose activation was of unknown outcome: %+v %v", st, err)
	}
	g := st.Scopes[0].Grant
	asg, err := client.NewAssignment(*g, req.Request)
	if err != nil {
		t.Fatal(err)
	}

	le.lose.Store(true)
	res, err := b.SubmitAssignment(ctx, asg)
	wantOutcomeUnknown(t, "Submit", err)
	if res.Outcome != "" {
		t.Fatalf("Submit of unknown outcome returned a verdict: %+v", res)
	}
	rc, err := op.Receipt(ctx, scope, "raise")
	if err != nil || rc.Grant != g.ID || rc.RevAfter != 2 {
		t.Fatalf("the receipt of the submit whose answer was lost: %+v %v", rc, err)
	}
	res, err = b.SubmitAssignment(ctx, asg)
	if err != nil || res.Outcome != kvfence.AlreadyApplied || res.Revision != 2 {
		t.Fatalf("the same envelope again: %+v %v, want already_applied at revision 2", res, err)
	}

	le.lose.Store(true)
	_, err = op.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "incident"})
	wantOutcomeUnknown(t, "Hold", err)
	if st, err := op.Status(ctx, scope); err != nil || st.Scopes[0].Mode != kvfence.ModeHeld || st.Scopes[0].Epoch != 2 {
		t.Fatalf("the scope whose hold was of unknown outcome: %+v %v", st, err)
	}

	if _, err := op.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: workerB, Claim: "claim-c",
		Request: request(t, "again")}); err != nil {
		t.Fatal(err)
	}
	le.lose.Store(true)
	_, err = op.HoldAll(ctx, "incident")
	wantOutcomeUnknown(t, "HoldAll", err)
	if st, err := op.Status(ctx, scope); err != nil || st.Scopes[0].Mode != kvfence.ModeHeld || st.Scopes[0].Epoch != 3 {
		t.Fatalf("the scope whose hold-all was of unknown outcome: %+v %v", st, err)
	}
}

// Ensure that a scope or target that was created, and whose read-back for
// the answer then failed, is answered outcome_unknown, not a fault that
// says nothing was created.
func TestOutcomeUnknown_ReadBackAfterCommit(t *testing.T) {
	s, le := serveLossy(t, nil)
	ctx := context.Background()
	op := s.client(operator)

	le.failView.Store(true)
	_, err := op.CreateScope(ctx, scope)
	wantOutcomeUnknown(t, "CreateScope with a failed read-back", err)
	if _, err := op.Status(ctx, scope); err != nil {
		t.Fatalf("the scope was not created: %v", err)
	}
	le.failView.Store(true)
	_, err = op.CreateTarget(ctx, scope, scope, []byte("v"))
	wantOutcomeUnknown(t, "CreateTarget with a failed read-back", err)
	if _, err := op.Target(ctx, scope); err != nil {
		t.Fatalf("the target was not created: %v", err)
	}
}

// Ensure that a submit whose HTTP answer is lost after the receiver
// decided it (the connection dropped) is client.ErrOutcomeUnknown, not an
// error a worker would read as "not applied", and that the retry answers
// already_applied; and that a request that never reached a connection is
// not.
func TestOutcomeUnknown_LostHTTPAnswer(t *testing.T) {
	var drop atomic.Bool
	s, _ := serveLossy(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !drop.Swap(false) {
				h.ServeHTTP(w, r)
				return
			}
			// The receiver decides; the answer never leaves.
			h.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			conn.Close()
		})
	})
	ctx := context.Background()
	op, b := s.client(operator), s.client(workerB)
	if _, err := op.CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	if _, err := op.CreateTarget(ctx, scope, scope, []byte(`{"data":{"retention_days":"30"}}`)); err != nil {
		t.Fatal(err)
	}
	act, err := op.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: workerB, Claim: "claim-b", Request: request(t, "raise")})
	if err != nil {
		t.Fatal(err)
	}
	drop.Store(true)
	res, err := b.SubmitAssignment(ctx, act.Assignment())
	if !errors.Is(err, client.ErrOutcomeUnknown) || res.Outcome != "" {
		t.Fatalf("submit whose answer was lost: %+v %v, want ErrOutcomeUnknown", res, err)
	}
	if _, err := op.Receipt(ctx, scope, "raise"); err != nil {
		t.Fatalf("the receipt of the submit whose answer was lost: %v", err)
	}
	res, err = b.SubmitAssignment(ctx, act.Assignment())
	if err != nil || res.Outcome != kvfence.AlreadyApplied {
		t.Fatalf("the retry: %+v %v, want already_applied", res, err)
	}
	// Nothing listens here: the request never left, and says so. (On an
	// idle connection the server closed, the transport cannot tell a
	// request the server never read from one it read and dropped.)
	s.srv.Close()
	b.Close()
	if _, err := b.SubmitAssignment(ctx, act.Assignment()); err == nil || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("submit to a closed server: %v, want an error that is not ErrOutcomeUnknown", err)
	}
}

// Ensure that an unknown outcome whose cause is a cancelled context (the
// etcd client's answer to a commit whose caller went away) is answered
// outcome_unknown, not "canceled", which the client reads as
// context.Canceled: a call that did nothing.
func TestOutcomeUnknown_CanceledCommit(t *testing.T) {
	s, le := serveLossy(t, nil)
	ctx := context.Background()
	op := s.client(operator)
	le.loseCanceled.Store(true)
	_, err := op.CreateScope(ctx, scope)
	wantOutcomeUnknown(t, "CreateScope whose commit was cancelled", err)
	if errors.Is(err, context.Canceled) {
		t.Fatalf("%v matches context.Canceled", err)
	}
	if _, err := op.Status(ctx, scope); err != nil {
		t.Fatalf("the scope was not created: %v", err)
	}
}
