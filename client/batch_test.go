package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// gate holds the first two requests to /v1/submit, the ones that take the
// client's two slots, until released; the Submits made meanwhile queue in
// the client and go out in batches.
type gate struct {
	held    atomic.Int32
	release chan struct{}
	singles atomic.Int32
	batches atomic.Int32
	items   atomic.Int32
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case api.PathSubmit:
			g.singles.Add(1)
			if g.held.Add(1) <= 2 {
				<-g.release
			}
		case api.PathSubmitBatch:
			g.batches.Add(1)
		}
		h.ServeHTTP(w, r)
	})
}

// waitHeld waits until n requests are held.
func (g *gate) waitHeld(t *testing.T, n int32) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); g.held.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests held after 10 s, want %d", g.held.Load(), n)
		}
	}
}

// submitAll submits envs on c concurrently, the first two alone and held
// by g, the rest while they are held, and returns each one's outcome.
func submitAll(t *testing.T, c *client.Client, g *gate, envs [][]byte) ([]kvfence.Result, []error) {
	t.Helper()
	ctx := context.Background()
	res, errs := make([]kvfence.Result, len(envs)), make([]error, len(envs))
	var wg sync.WaitGroup
	for i := range envs {
		wg.Go(func() { res[i], errs[i] = c.Submit(ctx, envs[i]) })
		// The first two are sent one at a time, each alone.
		if i < 2 {
			g.waitHeld(t, int32(i+1))
		}
	}
	// Time for the others to queue behind the two held requests.
	time.Sleep(100 * time.Millisecond)
	close(g.release)
	wg.Wait()
	return res, errs
}

// workerEnvelopes creates n scopes, opens each for workerA and returns
// their envelopes.
func workerEnvelopes(t *testing.T, s *served, n int) [][]byte {
	t.Helper()
	ctx := context.Background()
	op := s.client(operator)
	envs := make([][]byte, n)
	for i := range envs {
		sc := fmt.Sprintf("%s-%d", scope, i)
		if _, err := op.CreateScope(ctx, sc); err != nil {
			t.Fatal(err)
		}
		if _, err := op.CreateTarget(ctx, sc, sc, []byte("v")); err != nil {
			t.Fatal(err)
		}
		req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "act", Target: sc, Set: new([]byte("w"))})
		if err != nil {
			t.Fatal(err)
		}
		a, err := op.Activate(ctx, kvfence.ActivateRequest{Scope: sc, Executor: workerA, Claim: "c", Request: req})
		if err != nil {
			t.Fatal(err)
		}
		if envs[i], err = a.Assignment().Envelope(); err != nil {
			t.Fatal(err)
		}
	}
	return envs
}

// Ensure that Submits made on one Client while its requests are in
// flight go to the receiver together, in batches, and that each still
// gets its own decision: the applied ones their scope's, the malformed
// ones their denial.
func TestSubmit_Coalesced(t *testing.T) {
	g := newGate()
	s := serveOn(t, func(path string, opts *kvfence.Options) (*kvfence.Receiver, error) { return kvfence.Open(path, opts) }, g.wrap)
	good := workerEnvelopes(t, s, 8)
	w := s.client(workerA)
	var envs [][]byte
	for i := range 40 {
		if i%5 == 0 {
			envs = append(envs, good[i/5])
		} else {
			envs = append(envs, []byte{0xa0})
		}
	}
	res, errs := submitAll(t, w, g, envs)
	for i := range envs {
		switch {
		case errs[i] != nil:
			t.Errorf("submit %d: %v", i, errs[i])
		case i%5 == 0 && (res[i].Outcome != kvfence.Applied || res[i].Scope != fmt.Sprintf("%s-%d", scope, i/5)):
			t.Errorf("submit %d: %+v, want applied in its scope", i, res[i])
		case i%5 != 0 && (res[i].Outcome != kvfence.Denied || res[i].Reason != kvfence.ReasonMalformedEnvelope):
			t.Errorf("submit %d: %+v, want denied malformed_envelope", i, res[i])
		}
	}
	if n := g.singles.Load() + g.batches.Load(); n > 10 || g.batches.Load() == 0 {
		t.Errorf("40 concurrent Submits took %d requests, %d of them batches", n, g.batches.Load())
	}
	// A Submit made alone goes alone.
	singles := g.singles.Load()
	if res, err := w.Submit(context.Background(), []byte{0xa0}); err != nil || res.Outcome != kvfence.Denied {
		t.Fatalf("a lone Submit: %+v, %v", res, err)
	}
	if g.singles.Load() != singles+1 {
		t.Error("a lone Submit was not sent to /v1/submit")
	}
}

// Ensure that a receiver that answers the batch endpoint 404, one that
// predates it, is sent each envelope of the batch alone, and every later
// Submit alone too, and that each gets its decision.
func TestSubmit_BatchFallbackOn404(t *testing.T) {
	g := newGate()
	old := func(h http.Handler) http.Handler {
		return g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == api.PathSubmitBatch {
				w.Header().Set("Content-Type", api.ContentJSON)
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, `{"error":{"code":"no_such_endpoint","message":"no endpoint /v1/submit/batch"}}`)
				return
			}
			h.ServeHTTP(w, r)
		}))
	}
	s := serveOn(t, func(path string, opts *kvfence.Options) (*kvfence.Receiver, error) { return kvfence.Open(path, opts) }, old)
	good := workerEnvelopes(t, s, 4)
	w := s.client(workerA)
	envs := append([][]byte{{0xa0}, {0xa0}}, good...)
	res, errs := submitAll(t, w, g, envs)
	for i := range envs {
		want := kvfence.Applied
		if i < 2 {
			want = kvfence.Denied
		}
		if errs[i] != nil || res[i].Outcome != want {
			t.Errorf("submit %d: %+v, %v; want %s", i, res[i], errs[i], want)
		}
	}
	if g.batches.Load() == 0 {
		t.Fatal("no batch was tried")
	}
	batches := g.batches.Load()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := w.Submit(context.Background(), []byte{0xa0}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if g.batches.Load() != batches {
		t.Errorf("after a 404, %d more batches were sent", g.batches.Load()-batches)
	}
}

// Ensure that only a 404 or a 413 (over the receiver's batch limits,
// TestSubmit_BatchOverReceiverLimit) sends a batch's envelopes again
// alone: any other refusal of the whole batch is each of its Submits'
// error, and a server error without the receiver's error object says the
// outcome is unknown.
func TestSubmit_BatchRefusedNoFallback(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   error
	}{
		{http.StatusBadRequest, `{"error":{"code":"bad_request","message":"no"}}`, client.ErrBadRequest},
		{http.StatusServiceUnavailable, `{"error":{"code":"storage_busy","message":"busy"}}`, kvfence.ErrStorageBusy},
		{http.StatusBadGateway, `upstream gone`, client.ErrOutcomeUnknown},
		{http.StatusMethodNotAllowed, `{"error":{"code":"method_not_allowed","message":"no"}}`, client.ErrBadRequest},
	} {
		g := newGate()
		c := unixServer(t, g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == api.PathSubmitBatch {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
				return
			}
			out := api.SubmitOf(kvfence.Result{Outcome: kvfence.Denied, Reason: kvfence.ReasonMalformedEnvelope})
			w.WriteHeader(http.StatusForbidden)
			w.Write(out.AppendJSON(nil))
		})), false)
		envs := make([][]byte, 12)
		for i := range envs {
			envs[i] = []byte{0xa0}
		}
		_, errs := submitAll(t, c, g, envs)
		for i, err := range errs[2:] {
			if !errors.Is(err, tc.want) {
				t.Errorf("batch answered %d: submit %d: %v, want %v", tc.status, i+2, err, tc.want)
			}
		}
		if g.batches.Load() == 0 || g.singles.Load() != 2 {
			t.Errorf("batch answered %d: %d batches and %d single submits, want some and 2", tc.status, g.batches.Load(), g.singles.Load())
		}
	}
}

// Ensure that each result of a batch answer is checked on its own, as a
// single answer is: a denial must come with 403 and a decision that
// applied with 200 (else ErrProtocol), an error maps to its sentinel, and
// neither affects the other results; an answer with another number of
// results than envelopes is ErrProtocol for all of them.
func TestSubmit_BatchResultsChecked(t *testing.T) {
	applied := api.SubmitOf(kvfence.Result{Outcome: kvfence.Applied, Scope: "s", Epoch: 1, Grant: "g", Action: "a", Target: "t", Revision: 2, AuditSeq: 5})
	denied := api.SubmitOf(kvfence.Result{Outcome: kvfence.Denied, Reason: kvfence.ReasonStaleEpoch, Scope: "s", Epoch: 1, AuditSeq: 6})
	// Each envelope names the answer the fake receiver gives it.
	answers := map[string]api.BatchResult{
		"applied-200": {Status: 200, Result: &applied},
		"denied-403":  {Status: 403, Result: &denied},
		"applied-403": {Status: 403, Result: &applied},
		"denied-200":  {Status: 200, Result: &denied},
		"busy-503":    {Status: 503, Error: &api.ErrorBody{Code: "storage_busy", Message: "busy"}},
		"error-200":   {Status: 200, Error: &api.ErrorBody{Code: "internal", Message: "x"}},
		"both-200":    {Status: 200, Result: &applied, Error: &api.ErrorBody{Code: "internal", Message: "x"}},
		"neither-403": {Status: 403},
	}
	g := newGate()
	c := fakeBatchServer(t, g, answers, false)
	envs := [][]byte{[]byte("x"), []byte("x")} // the two held single submits
	for k := range answers {
		envs = append(envs, []byte(k))
	}
	res, errs := submitAll(t, c, g, envs)
	for i, e := range envs[2:] {
		i += 2
		k := string(e)
		switch k {
		case "applied-200":
			if errs[i] != nil || res[i].Outcome != kvfence.Applied || res[i].AuditSeq != 5 {
				t.Errorf("%s: %+v, %v", k, res[i], errs[i])
			}
		case "denied-403":
			if errs[i] != nil || res[i].Outcome != kvfence.Denied || res[i].Reason != kvfence.ReasonStaleEpoch {
				t.Errorf("%s: %+v, %v", k, res[i], errs[i])
			}
		case "busy-503":
			if !errors.Is(errs[i], kvfence.ErrStorageBusy) {
				t.Errorf("%s: %+v, %v; want ErrStorageBusy", k, res[i], errs[i])
			}
		default:
			if !errors.Is(errs[i], client.ErrProtocol) || res[i] != (kvfence.Result{}) {
				t.Errorf("%s: %+v, %v; want ErrProtocol", k, res[i], errs[i])
			}
		}
	}
	if g.batches.Load() == 0 {
		t.Fatal("no batch was sent")
	}

	g = newGate()
	c = fakeBatchServer(t, g, answers, true)
	_, errs = submitAll(t, c, g, [][]byte{[]byte("x"), []byte("x"), []byte("applied-200"), []byte("denied-403"), []byte("busy-503")})
	for i, err := range errs[2:] {
		if !errors.Is(err, client.ErrProtocol) || !strings.Contains(err.Error(), "results answered") {
			t.Errorf("a short answer: submit %d: %v, want ErrProtocol", i+2, err)
		}
	}
}

// fakeBatchServer answers each envelope of a batch with answers[envelope],
// all but the first when short, and every single submit applied.
func fakeBatchServer(t *testing.T, g *gate, answers map[string]api.BatchResult, short bool) *client.Client {
	applied := api.SubmitOf(kvfence.Result{Outcome: kvfence.Applied, Scope: "s", Epoch: 1, AuditSeq: 1})
	return unixServer(t, g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == api.PathSubmit {
			w.WriteHeader(http.StatusOK)
			w.Write(applied.AppendJSON(nil))
			return
		}
		envs, err := api.DecodeBatch(body, api.MaxBatchItems)
		if err != nil {
			t.Errorf("the client sent a batch the server refuses: %v", err)
		}
		var out api.Batch
		for _, e := range envs {
			out.Results = append(out.Results, answers[string(e)])
		}
		if short {
			out.Results = out.Results[1:]
		}
		w.WriteHeader(http.StatusOK)
		b, _ := json.Marshal(out)
		w.Write(b)
	})), false)
}

// Ensure that a Submit whose context ends while it waits for a slot is
// not sent and says so (the context's error, not an unknown outcome), and
// that one whose request is in flight when its context ends is
// ErrOutcomeUnknown, as a single request cut after it was sent is.
func TestSubmit_BatchContextEnds(t *testing.T) {
	g := newGate()
	var mu sync.Mutex
	var seen []string
	c := unixServer(t, g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		envs := [][]byte{body}
		if r.URL.Path == api.PathSubmitBatch {
			envs, _ = api.DecodeBatch(body, api.MaxBatchItems)
		}
		mu.Lock()
		for _, e := range envs {
			seen = append(seen, string(e))
		}
		mu.Unlock()
		out := api.SubmitOf(kvfence.Result{Outcome: kvfence.Applied, Scope: "s", Epoch: 1, AuditSeq: 1})
		if r.URL.Path == api.PathSubmit {
			w.Write(out.AppendJSON(nil))
			return
		}
		b := api.AppendBatchOpen(nil)
		for i := range envs {
			b = api.AppendBatchDecision(b, i, 200, &out)
		}
		w.Write(api.AppendBatchClose(b))
	})), false)
	ctx := context.Background()
	held, cancelHeld := context.WithCancel(ctx)
	errs := make(chan error, 2)
	go func() { _, err := c.Submit(held, []byte("held")); errs <- err }()
	g.waitHeld(t, 1)
	go func() { _, err := c.Submit(ctx, []byte("held too")); errs <- err }()
	g.waitHeld(t, 2)
	queued, cancelQueued := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelQueued()
	if _, err := c.Submit(queued, []byte("queued")); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Errorf("a Submit whose context ended in the queue: %v, want DeadlineExceeded and not ErrOutcomeUnknown", err)
	}
	cancelHeld()
	if err := <-errs; !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Errorf("a Submit whose context ended in flight: %v, want ErrOutcomeUnknown", err)
	}
	close(g.release)
	if err := <-errs; err != nil {
		t.Errorf("the other held Submit: %v", err)
	}
	if _, err := c.Submit(ctx, []byte("after")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if s == "queued" {
			t.Errorf("the Submit whose context ended in the queue was sent: %q", seen)
		}
	}
}
