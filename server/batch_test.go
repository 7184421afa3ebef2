package server_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// batch posts envs as one batch from c to srvURL and returns the answer
// and, for a 200, its results.
func batch(t *testing.T, c *http.Client, srvURL string, envs ...[]byte) (response, []api.BatchResult) {
	t.Helper()
	return batchRaw(t, c, srvURL, api.ContentCBOR, api.AppendBatch(nil, envs))
}

func batchRaw(t *testing.T, c *http.Client, srvURL, ctype string, body []byte) (response, []api.BatchResult) {
	t.Helper()
	resp, err := do(c, http.MethodPost, srvURL+api.PathSubmitBatch, ctype, body)
	if err != nil {
		t.Fatalf("POST %s: %v", api.PathSubmitBatch, err)
	}
	if resp.status != http.StatusOK {
		return resp, nil
	}
	var out api.Batch
	if err := api.DecodeAnswer([]byte(resp.raw), &out); err != nil {
		t.Fatalf("batch answer %s: %v", resp.raw, err)
	}
	return resp, out.Results
}

// itemOutcome is a batch result as "STATUS outcome/reason" or "STATUS
// code".
func itemOutcome(r api.BatchResult) string {
	switch {
	case r.Result != nil && r.Error == nil:
		return http.StatusText(r.Status) + " " + r.Result.Outcome + "/" + r.Result.Reason
	case r.Error != nil && r.Result == nil:
		return http.StatusText(r.Status) + " " + r.Error.Code
	}
	return "malformed"
}

// Ensure that each envelope of a batch is answered as /v1/submit answers
// it alone, in the batch's order: an applied one 200, the same again
// already_applied, a malformed one a recorded denial (403), and one over
// the envelope limit its own 413 without a decision, which does not
// affect the others.
func TestSubmitBatch_MixedOutcomes(t *testing.T) {
	e := newEnv(t)
	_, env := activate(t, e.r, workerA, "a1")
	big := bytes.Repeat([]byte{0xa0}, kvfence.DefaultMaxEnvelopeSize+1)
	head := e.r.Head()
	resp, res := batch(t, e.client(workerA), e.srv.URL, env, []byte{0xa0}, big, env)
	want := []string{"OK applied/", "Forbidden denied/malformed_envelope", "Request Entity Too Large too_large", "OK already_applied/"}
	if resp.status != http.StatusOK || len(res) != len(want) {
		t.Fatalf("%d %s, want 200 with %d results", resp.status, resp.raw, len(want))
	}
	for i, w := range want {
		if got := itemOutcome(res[i]); got != w {
			t.Errorf("result %d: %s, want %s", i, got, w)
		}
	}
	// Three decisions recorded, in the batch's order; nothing for the
	// envelope refused for its size.
	if res[0].Result.AuditSeq != head.Seq+1 || res[1].Result.AuditSeq != head.Seq+2 || res[3].Result.AuditSeq != head.Seq+3 {
		t.Errorf("audit seqs %d, %d, %d after head %d", res[0].Result.AuditSeq, res[1].Result.AuditSeq, res[3].Result.AuditSeq, head.Seq)
	}
	if got := e.r.Head().Seq; got != head.Seq+3 {
		t.Errorf("head at %d, want %d", got, head.Seq+3)
	}
}

// Ensure that a batch is decided as the identity of its connection, once
// per request: worker B's batch with worker A's envelope is denied
// (executor_mismatch) while worker A's own batch with it applies.
func TestSubmitBatch_IdentityPerRequest(t *testing.T) {
	e := newEnv(t)
	_, env := activate(t, e.r, workerA, "a1")
	_, res := batch(t, e.client(workerB), e.srv.URL, env, env)
	for i, r := range res {
		if got := itemOutcome(r); got != "Forbidden denied/executor_mismatch" {
			t.Errorf("worker B's result %d: %s", i, got)
		}
	}
	_, res = batch(t, e.client(workerA), e.srv.URL, env)
	if len(res) != 1 || itemOutcome(res[0]) != "OK applied/" {
		t.Fatalf("worker A's batch: %+v", res)
	}
	// Without a usable identity, nothing of the batch is decided.
	head := e.r.Head()
	if resp, _ := batch(t, e.client(), e.srv.URL, env); resp.status != http.StatusUnauthorized {
		t.Errorf("no SPIFFE ID: %d %s, want 401", resp.status, resp.raw)
	}
	if e.r.Head() != head {
		t.Error("a batch without an identity was recorded")
	}
}

// Ensure that a batch that is not one, or is over a limit, is refused
// whole, with the status and code that say why, and that nothing of it is
// decided or recorded.
func TestSubmitBatch_RefusedWhole(t *testing.T) {
	e := newEnv(t)
	_, env := activate(t, e.r, workerA, "a1")
	h := mustNew(t, server.Options{Receiver: e.r, Authenticator: server.SPIFFECertificate{}, MaxBatchItems: 2, MaxBatchSize: 3 * len(env)})
	srv := serveTLS(t, e, h)
	c := e.client(workerA)
	valid := api.AppendBatch(nil, [][]byte{env})
	for _, tc := range []struct {
		name   string
		ctype  string
		body   []byte
		status int
		code   string
	}{
		{"empty batch", api.ContentCBOR, []byte{0x80}, 400, api.CodeBadRequest},
		{"no body", api.ContentCBOR, nil, 400, api.CodeBadRequest},
		{"an envelope, not a batch", api.ContentCBOR, env, 400, api.CodeBadRequest},
		{"bytes after the batch", api.ContentCBOR, append(append([]byte(nil), valid...), 0), 400, api.CodeBadRequest},
		{"a head not in its shortest form", api.ContentCBOR, append([]byte{0x98, 0x01}, valid[1:]...), 400, api.CodeBadRequest},
		{"a text string in it", api.ContentCBOR, []byte{0x81, 0x61, 'x'}, 400, api.CodeBadRequest},
		{"over MaxBatchItems", api.ContentCBOR, api.AppendBatch(nil, [][]byte{env, {0xa0}, {0xa0}}), 413, api.CodeTooLarge},
		{"over MaxBatchSize", api.ContentCBOR, api.AppendBatch(nil, [][]byte{env, env, env}), 413, api.CodeTooLarge},
		{"JSON", api.ContentJSON, valid, 415, api.CodeMediaType},
	} {
		head := e.r.Head()
		resp, _ := batchRaw(t, c, srv.URL, tc.ctype, tc.body)
		if resp.status != tc.status || resp.errorCode() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, resp.status, resp.raw, tc.status, tc.code)
		}
		if e.r.Head() != head {
			t.Errorf("%s: recorded", tc.name)
		}
	}
	if resp, err := do(c, http.MethodGet, srv.URL+api.PathSubmitBatch, "", nil); err != nil || resp.status != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d %v, want 405", resp.status, err)
	}
	// Within the limits the same handler decides.
	if _, res := batch(t, c, srv.URL, env, env); len(res) != 2 || itemOutcome(res[0]) != "OK applied/" || itemOutcome(res[1]) != "OK already_applied/" {
		t.Errorf("a batch within the limits: %+v", res)
	}
}

// Ensure that an envelope's own failure is its result only: a batch whose
// decisions fail because the receiver closed answers each envelope with
// the error /v1/submit would answer (503 closed), as a batch answer.
func TestSubmitBatch_ErrorPerEnvelope(t *testing.T) {
	e := newEnv(t)
	r := openReceiver(t, t.TempDir(), false)
	_, env := activate(t, r, workerA, "a1")
	srv := serveTLS(t, e, mustNew(t, server.Options{Receiver: r, Authenticator: server.SPIFFECertificate{}}))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	resp, res := batch(t, e.client(workerA), srv.URL, env, []byte{0xa0})
	if resp.status != http.StatusOK || len(res) != 2 {
		t.Fatalf("%d %s", resp.status, resp.raw)
	}
	for i, r := range res {
		if got := itemOutcome(r); got != "Service Unavailable closed" {
			t.Errorf("result %d: %s, want 503 closed", i, got)
		}
	}
}
