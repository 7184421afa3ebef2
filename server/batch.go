package server

import (
	"errors"
	"net/http"
	"sync"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// DefaultMaxBatchesInFlight is Options.MaxBatchesInFlight's default: with
// the default batch limits, at most 64 MiB of batch bodies and 16,384
// decisions in flight, and room for 32 clients' two requests each.
const DefaultMaxBatchesInFlight = 64

// batchItem is one envelope's decision, or the error it was answered.
type batchItem struct {
	res kvfence.Result
	err error
}

// submitBatch decides every envelope of a batch as the authenticated
// caller and answers each one's result as submit would answer it alone.
// The envelopes join the receiver's commit queue together
// (Receiver.SubmitAll), so that they share its group commits: the batch
// exists to spend one request's HTTP and TLS work on many fenced writes. A body that is
// not a batch is refused whole before anything is decided; an envelope
// that is refused (too large) or fails gets its own error in its place.
func (h *Handler) submitBatch(w http.ResponseWriter, r *http.Request, caller string) error {
	if err := checkMediaType(r, api.ContentCBOR); err != nil {
		return err
	}
	body, err := readBody(r, h.maxBatchSize)
	if err != nil {
		return err
	}
	// The turn is taken once the body is read: a caller that trickles
	// its body holds no turn, and so cannot keep other callers' batches
	// waiting. What a body being read holds is what its sender sent, as
	// for a single submit.
	select {
	case h.batchTurns <- struct{}{}:
		defer func() { <-h.batchTurns }()
	case <-r.Context().Done():
		return errorf(http.StatusServiceUnavailable, api.CodeCanceled, "waiting for a turn to decide the batch: %v", r.Context().Err())
	}
	envs, err := api.DecodeBatch(body, h.maxBatchItems)
	switch {
	case errors.Is(err, api.ErrBatchTooMany):
		return errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "%v", err)
	case err != nil:
		return errorf(http.StatusBadRequest, api.CodeBadRequest, "%v", err)
	}
	items := make([]batchItem, len(envs))
	// The envelopes within the limit are decided together; one over it
	// gets its own error in its place.
	idx := make([]int, 0, len(envs))
	sub := make([][]byte, 0, len(envs))
	for i, env := range envs {
		if len(env) > h.maxEnv {
			items[i].err = errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge,
				"envelope %d is %d bytes, over the %d-byte limit", i, len(env), h.maxEnv)
			continue
		}
		idx, sub = append(idx, i), append(sub, env)
	}
	if len(sub) > 0 {
		results, errs := h.submitAll(r, caller, sub)
		for j, i := range idx {
			items[i] = batchItem{res: results[j], err: errs[j]}
		}
	}

	bp := batchAnswerPool.Get().(*[]byte)
	b := api.AppendBatchOpen((*bp)[:0])
	coded := false
	for i := range items {
		it := &items[i]
		if it.err != nil {
			he := h.errorAnswer(r, caller, it.err)
			if !coded {
				// The request is observed with its first refused
				// envelope's code, so that what alerts on a code (the
				// storage reserve's) sees refusals made in batches too.
				setErrorCode(w, he.code)
				coded = true
			}
			b = api.AppendBatchError(b, i, he.status, api.ErrorBody{Code: he.code, Message: he.message})
			continue
		}
		h.logDecision(r.Context(), caller, it.res)
		status := http.StatusOK
		if it.res.Outcome == kvfence.Denied {
			status = http.StatusForbidden
		}
		out := api.SubmitOf(it.res)
		b = api.AppendBatchDecision(b, i, status, &out)
	}
	*bp = api.AppendBatchClose(b)
	w.Header()["Content-Type"] = contentTypeJSON
	w.WriteHeader(http.StatusOK)
	w.Write(*bp)
	if cap(*bp) <= maxPooledBatchAnswer {
		batchAnswerPool.Put(bp)
	}
	return nil
}

// submitAll decides envs with the receiver's SubmitAll. A panic fails
// every envelope of the batch with a fault, as ServeHTTP answers one that
// ends a request; it is recovered here so that it is answered in the
// batch's shape. The receiver's goroutines that decide are its own.
func (h *Handler) submitAll(r *http.Request, caller string, envs [][]byte) (results []kvfence.Result, errs []error) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("panic while deciding a batch", "path", r.URL.Path, "panic", p)
			results, errs = make([]kvfence.Result, len(envs)), make([]error, len(envs))
			for i := range errs {
				errs[i] = errorf(http.StatusInternalServerError, api.CodeInternal, "internal error")
			}
		}
	}()
	return h.r.SubmitAll(r.Context(), caller, envs)
}

// batchAnswerPool holds buffers for batch answers, as answerPool does
// for single ones; a batch's answer is about 300 bytes an envelope.
var batchAnswerPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

const maxPooledBatchAnswer = 128 << 10
