package kubetarget

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/kubeclient"
	"github.com/kvfence/kvfence/kvfence"
)

// fakeAPI is an API server for one ConfigMap, prod/x, whose PUT answers
// are scripted: it shows what this package sends and how it reads each
// answer, without a real server.
type fakeAPI struct {
	mu       sync.Mutex
	gets     int
	puts     []map[string]any
	labelled bool
	// putAnswers are the PUTs' answers in turn; past the end, 200 with
	// the body sent.
	putAnswers []fakeAnswer
	// blockPut makes every PUT wait until the client gives up.
	blockPut bool
}

type fakeAnswer struct {
	code       int
	retryAfter string
	message    string
}

const fakePath = "/api/v1/namespaces/prod/configmaps/x"

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path != fakePath {
		http.Error(w, "unexpected path "+r.URL.Path, http.StatusTeapot)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.Method {
	case http.MethodGet:
		f.gets++
		labels := `{}`
		if f.labelled {
			labels = `{"kvfence.dev/scope":"s"}`
		}
		io.WriteString(w, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"prod","resourceVersion":"10","uid":"u1","labels":`+labels+`},"data":{"a":"1"}}`)
	case http.MethodPut:
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.puts = append(f.puts, body)
		if f.blockPut {
			f.mu.Unlock()
			<-r.Context().Done()
			f.mu.Lock()
			// No answer at all: returning would send an empty 200, which
			// a client that has not yet seen its own deadline could read
			// (a CI run did). The deferred unlock releases mu.
			panic(http.ErrAbortHandler)
		}
		if n := len(f.puts) - 1; n < len(f.putAnswers) {
			a := f.putAnswers[n]
			if a.retryAfter != "" {
				w.Header().Set("Retry-After", a.retryAfter)
			}
			w.WriteHeader(a.code)
			json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": a.message, "code": a.code})
			return
		}
		// The answer is a copy: f.puts keeps what was sent.
		var answer map[string]any
		json.Unmarshal(b, &answer)
		answer["metadata"].(map[string]any)["resourceVersion"] = "11"
		json.NewEncoder(w).Encode(answer)
	default:
		http.Error(w, "unexpected method", http.StatusMethodNotAllowed)
	}
}

func (f *fakeAPI) counts() (gets, puts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, len(f.puts)
}

func newFake(t *testing.T, f *fakeAPI) *Dispatcher {
	t.Helper()
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	d, err := New(Options{Config: &kubeclient.Config{Host: srv.URL, CAData: ca}, FenceRetryInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var fakeInput = kvfence.DispatchInput{
	Object:       cm("prod", "x"),
	UID:          "u0",
	Precondition: "9",
	Value:        []byte(`{"a":"2"}`),
	Stamp:        kvfence.Stamp{Scope: "s", Epoch: 1, Grant: "g", Receipt: "r"},
}

// Ensure that Apply sends exactly one update whatever the answer (client-
// go would retry a 429 or a 5xx with Retry-After by itself), that 409 and
// 404 are the sentinels the receiver settles on, with the server's
// message, and that every other answer is neither.
func TestApplyOutcomesAndNoRetry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   fakeAnswer
		want     error
		notWant  []error
		wantCode int
	}{
		{"conflict", fakeAnswer{code: 409, message: "the object has been modified"}, kvfence.ErrRemoteConflict, []error{kvfence.ErrRemoteNotFound}, 409},
		{"not found", fakeAnswer{code: 404, message: "configmaps \"x\" not found"}, kvfence.ErrRemoteNotFound, []error{kvfence.ErrRemoteConflict}, 404},
		{"forbidden", fakeAnswer{code: 403, message: "denied by policy"}, nil, []error{kvfence.ErrRemoteConflict, kvfence.ErrRemoteNotFound}, 403},
		{"invalid", fakeAnswer{code: 422, message: "invalid"}, nil, []error{kvfence.ErrRemoteConflict, kvfence.ErrRemoteNotFound}, 422},
		{"too many requests", fakeAnswer{code: 429, retryAfter: "1", message: "slow down"}, nil, []error{kvfence.ErrRemoteConflict, kvfence.ErrRemoteNotFound}, 429},
		{"server timeout", fakeAnswer{code: 504, retryAfter: "1", message: "timeout"}, nil, []error{kvfence.ErrRemoteConflict, kvfence.ErrRemoteNotFound}, 504},
		{"unavailable", fakeAnswer{code: 503, retryAfter: "1", message: "unavailable"}, nil, []error{kvfence.ErrRemoteConflict, kvfence.ErrRemoteNotFound}, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAPI{labelled: true, putAnswers: []fakeAnswer{tc.answer}}
			d := newFake(t, f)
			_, err := d.Apply(context.Background(), fakeInput)
			if err == nil {
				t.Fatal("Apply succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v; want %v", err, tc.want)
			}
			for _, nw := range tc.notWant {
				if errors.Is(err, nw) {
					t.Errorf("err = %v is %v", err, nw)
				}
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Code != tc.wantCode || !strings.Contains(err.Error(), tc.answer.message) {
				t.Errorf("err = %v; want a StatusError %d with the server's message %q", err, tc.wantCode, tc.answer.message)
			}
			if _, puts := f.counts(); puts != 1 {
				t.Errorf("%d updates sent; want exactly 1", puts)
			}
		})
	}
}

// Ensure that the server's message is kept printable and bounded: it ends
// up on terminals and in logs.
func TestStatusMessagePrintable(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "the object has been modified", "the object has been modified"},
		{"terminal escape", `a\u001b[2Jb\nc`, "a?[2Jb?c"},
		{"bidi override", `a\u202eb`, "a?b"},
		{"long", strings.Repeat("x", 5000), strings.Repeat("x", 1024) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in string
			if err := json.Unmarshal([]byte(`"`+tc.in+`"`), &in); err != nil {
				t.Fatal(err)
			}
			f := &fakeAPI{labelled: true, putAnswers: []fakeAnswer{{code: 422, message: in}}}
			d := newFake(t, f)
			_, err := d.Apply(context.Background(), fakeInput)
			var se *StatusError
			if !errors.As(err, &se) || se.Message != tc.want {
				t.Errorf("message %q; want %q", se.Message, tc.want)
			}
		})
	}
}

// Ensure that a Dispatcher lets a burst of dispatches through without
// waiting: it has no client-side rate limit, because a write kept waiting
// past its deadline is one whose outcome the receiver must record as
// unknown (the API server's own fairness limits are what apply).
func TestNoClientRateLimit(t *testing.T) {
	f := &fakeAPI{labelled: true}
	d := newFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// A limit of 5 per second with bursts of 10 (a common client default)
	// would make these 40 requests take about 6 s.
	for i := 0; i < 20; i++ {
		if _, err := d.Apply(ctx, fakeInput); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
}

// Ensure that Apply sends the decision's preconditions, not the read's,
// with the data and stamp, and returns the state the server answers.
func TestApplySendsTheDecisionsPreconditions(t *testing.T) {
	f := &fakeAPI{labelled: true}
	d := newFake(t, f)
	st, err := d.Apply(context.Background(), fakeInput)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "11" || string(st.Value) != `{"a":"2"}` || st.Stamp != fakeInput.Stamp {
		t.Errorf("state %+v (value %s)", st, st.Value)
	}
	md := f.puts[0]["metadata"].(map[string]any)
	if md["resourceVersion"] != "9" || md["uid"] != "u0" {
		t.Errorf("update sent resourceVersion %v uid %v; want the decision's 9, u0", md["resourceVersion"], md["uid"])
	}
}

// Ensure that Apply sends nothing for an input without preconditions (an
// update without them would overwrite any version), an invalid value or
// stamp, or an object the admission policy does not guard.
func TestApplyRefusesBeforeWriting(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mutate   func(*kvfence.DispatchInput)
		labelled bool
		want     error
	}{
		{"no precondition", func(in *kvfence.DispatchInput) { in.Precondition = "" }, true, ErrNoPrecondition},
		{"no uid", func(in *kvfence.DispatchInput) { in.UID = "" }, true, ErrNoPrecondition},
		{"invalid value", func(in *kvfence.DispatchInput) { in.Value = []byte(`{"a":1}`) }, true, ErrInvalidValue},
		{"invalid stamp", func(in *kvfence.DispatchInput) { in.Stamp.Receipt = "" }, true, ErrInvalidStamp},
		{"stamp without a grant", func(in *kvfence.DispatchInput) { in.Stamp.Grant = "" }, true, ErrInvalidStamp},
		{"unsupported resource", func(in *kvfence.DispatchInput) { in.Object.Resource = "secrets" }, true, ErrUnsupportedResource},
		{"unlabelled object", func(in *kvfence.DispatchInput) {}, false, ErrUnguarded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAPI{labelled: tc.labelled}
			d := newFake(t, f)
			in := fakeInput
			tc.mutate(&in)
			_, err := d.Apply(context.Background(), in)
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v; want %v", err, tc.want)
			}
			if _, puts := f.counts(); puts != 0 {
				t.Errorf("%d updates sent; want none", puts)
			}
		})
	}
}

// Ensure that an update without an answer by the context's deadline
// returns by then with an error that is neither sentinel: the receiver
// records the outcome unknown.
func TestApplyDeadline(t *testing.T) {
	f := &fakeAPI{labelled: true, blockPut: true}
	d := newFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := d.Apply(ctx, fakeInput)
	if err == nil || errors.Is(err, kvfence.ErrRemoteConflict) || errors.Is(err, kvfence.ErrRemoteNotFound) {
		t.Fatalf("err = %v; want an error that is neither conflict nor not found", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v; want it to say the deadline passed", err)
	}
	if el := time.Since(began); el > 5*time.Second {
		t.Errorf("Apply returned %v after a 300ms deadline", el)
	}
	if _, puts := f.counts(); puts != 1 {
		t.Errorf("%d updates sent; want 1", puts)
	}
}

// Ensure that Fence reads again and retries after a conflict, stops at
// once on any other refusal, and, when conflicts last until its context
// ends, returns an error that is not ErrRemoteConflict: the object is not
// fenced.
func TestFenceRetries(t *testing.T) {
	stamp := kvfence.Stamp{Scope: "s", Epoch: 2, Receipt: "fence-1"}
	conflict := fakeAnswer{code: 409, message: "modified"}
	t.Run("conflicts then success", func(t *testing.T) {
		f := &fakeAPI{labelled: true, putAnswers: []fakeAnswer{conflict, conflict}}
		d := newFake(t, f)
		st, err := d.Fence(context.Background(), cm("prod", "x"), stamp)
		if err != nil {
			t.Fatal(err)
		}
		if gets, puts := f.counts(); gets != 3 || puts != 3 {
			t.Errorf("%d reads, %d updates; want 3 and 3", gets, puts)
		}
		if st.Stamp != stamp || string(st.Value) != `{"a":"1"}` {
			t.Errorf("state %+v (value %s)", st, st.Value)
		}
		md := f.puts[2]["metadata"].(map[string]any)
		if md["resourceVersion"] != "10" || md["uid"] != "u1" {
			t.Errorf("fence sent resourceVersion %v uid %v; want the read's 10, u1", md["resourceVersion"], md["uid"])
		}
	})
	t.Run("forbidden", func(t *testing.T) {
		f := &fakeAPI{labelled: true, putAnswers: []fakeAnswer{{code: 403, message: "no"}}}
		d := newFake(t, f)
		_, err := d.Fence(context.Background(), cm("prod", "x"), stamp)
		var se *StatusError
		if !errors.As(err, &se) || se.Code != 403 {
			t.Errorf("err = %v; want a 403", err)
		}
		if _, puts := f.counts(); puts != 1 {
			t.Errorf("%d updates; want 1", puts)
		}
	})
	t.Run("conflicts until the deadline", func(t *testing.T) {
		many := make([]fakeAnswer, 100000)
		for i := range many {
			many[i] = conflict
		}
		f := &fakeAPI{labelled: true, putAnswers: many}
		d := newFake(t, f)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := d.Fence(ctx, cm("prod", "x"), stamp)
		// The deadline shows as the context's error.
		if err == nil || errors.Is(err, kvfence.ErrRemoteConflict) || !strings.Contains(err.Error(), "deadline") {
			t.Errorf("err = %v; want the deadline, not ErrRemoteConflict", err)
		}
		if _, puts := f.counts(); puts < 2 {
			t.Errorf("%d updates; want retries", puts)
		}
	})
}
