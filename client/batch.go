package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// batchSlots is how many requests carrying Submits one Client has in
// flight at once. A Submit made while a slot is free is sent at once,
// alone; Submits made while both are taken wait, and the next request
// carries all of them, as the receiver's group commit gathers the calls
// that arrive during a commit. Two let a batch reach the receiver while it
// commits the one before, so that its queue always holds the next.
const batchSlots = 2

// batchOverflowAfter is how long a Submit waits for a slot before it
// sends the Submits queued with it in a request of their own: a request in
// flight may wait for a remote target's dispatch, up to the receiver's
// dispatch timeout, and two such must not hold every other Submit back.
const batchOverflowAfter = 250 * time.Millisecond

// maxBatchedEnvelope is the largest envelope (with its CBOR head) a batch
// carries; a larger one, which a receiver with the default limits refuses
// anyway, is sent alone and answered as /v1/submit answers it.
const maxBatchedEnvelope = kvfence.DefaultMaxEnvelopeSize

// batcher queues the Submits of one Client that wait for a slot.
type batcher struct {
	slots chan struct{}

	mu      sync.Mutex
	pending []*pendingSubmit
}

func newBatcher() *batcher { return &batcher{slots: make(chan struct{}, batchSlots)} }

// pendingSubmit is one Submit that waits for its answer.
type pendingSubmit struct {
	env  []byte
	done chan struct{}
	// Set before done is closed:
	status int
	out    api.Submit
	err    error
	// alone means that the receiver has no batch endpoint: the Submit is
	// sent again on its own, as nothing was decided.
	alone bool

	// taken is set, under the batcher's mutex, once a request carries it;
	// req is that request's.
	taken bool
	req   *batchRequest
}

// batchRequest is one request in flight; it is canceled when every Submit
// it carries has stopped waiting for it.
type batchRequest struct {
	ctx     context.Context
	cancel  context.CancelFunc
	waiting atomic.Int32
}

// leave is called by a Submit that stops waiting.
func (r *batchRequest) leave() {
	if r.waiting.Add(-1) == 0 {
		r.cancel()
	}
}

// submitBatched queues the envelope and waits for its answer, sending
// queued envelopes itself whenever a slot is free.
func (c *Client) submitBatched(ctx context.Context, env []byte) (kvfence.Result, error) {
	// A context that already ended sends nothing, as a request made with
	// it would not be sent.
	if err := ctx.Err(); err != nil {
		return kvfence.Result{}, fmt.Errorf("client: POST %s: %w", api.PathSubmit, err)
	}
	b := c.batch
	// A Submit that finds a slot free and no Submit waiting is sent
	// alone, from the caller's goroutine, as a Client without batches
	// sends it. Those that queue meanwhile wait for the slot it frees.
	select {
	case b.slots <- struct{}{}:
		b.mu.Lock()
		idle := len(b.pending) == 0
		b.mu.Unlock()
		if idle {
			defer func() { <-b.slots }()
			return c.submitOne(ctx, env)
		}
		<-b.slots
	default:
	}
	p := &pendingSubmit{env: env, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, p)
	b.mu.Unlock()
	overflow := time.NewTimer(batchOverflowAfter)
	defer overflow.Stop()
	for {
		select {
		case <-p.done:
			return c.batchedResult(ctx, p)
		case <-overflow.C:
			if take, req := b.take(ctx); len(take) > 0 {
				go func() {
					c.sendBatch(req.ctx, take)
					req.cancel()
				}()
			}
		case b.slots <- struct{}{}:
			// The request is sent from a goroutine of its own, so that
			// this caller can stop waiting when its context ends.
			if take, req := b.take(ctx); len(take) > 0 {
				go c.sendBatches(ctx, take, req)
			} else {
				<-b.slots
			}
		case <-ctx.Done():
			b.mu.Lock()
			taken := p.taken
			if !taken {
				b.remove(p)
			}
			b.mu.Unlock()
			if !taken {
				return kvfence.Result{}, fmt.Errorf("client: POST %s: %w", api.PathSubmit, ctx.Err())
			}
			select {
			case <-p.done:
				return c.batchedResult(ctx, p)
			default:
			}
			p.req.leave()
			return kvfence.Result{}, fmt.Errorf("%w: POST %s: stopped waiting for the answer of the request that carried the envelope: %w",
				ErrOutcomeUnknown, api.PathSubmitBatch, ctx.Err())
		}
	}
}

// batchedResult is the result of a Submit whose answer came.
func (c *Client) batchedResult(ctx context.Context, p *pendingSubmit) (kvfence.Result, error) {
	switch {
	case p.alone:
		return c.submitOne(ctx, p.env)
	case p.err != nil:
		return kvfence.Result{}, p.err
	}
	return submitResult(p.status, p.out)
}

// take removes the Submits the next request carries from the queue: the
// oldest, as many as api.MaxBatchItems and api.DefaultMaxBatchSize allow.
// The request's context carries the values of ctx, but not its end: it is
// canceled once every Submit it carries has stopped waiting.
func (b *batcher) take(ctx context.Context) ([]*pendingSubmit, *batchRequest) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		return nil, nil
	}
	n, size := 0, 9 // the array's head, at its longest
	for n < len(b.pending) && n < api.MaxBatchItems {
		s := api.BatchItemSize(len(b.pending[n].env))
		if n > 0 && size+s > api.DefaultMaxBatchSize {
			break
		}
		size += s
		n++
	}
	take := make([]*pendingSubmit, n)
	copy(take, b.pending)
	rest := copy(b.pending, b.pending[n:])
	clear(b.pending[rest:])
	b.pending = b.pending[:rest]
	req := &batchRequest{}
	req.ctx, req.cancel = context.WithCancel(context.WithoutCancel(ctx))
	req.waiting.Store(int32(n))
	for _, p := range take {
		p.taken, p.req = true, req
	}
	return take, req
}

// remove takes p, which is not taken, out of the queue.
func (b *batcher) remove(p *pendingSubmit) {
	for i, q := range b.pending {
		if q == p {
			b.pending = append(b.pending[:i], b.pending[i+1:]...)
			b.pending = b.pending[:len(b.pending):len(b.pending)]
			return
		}
	}
}

// sendBatches sends take, and then whatever queued meanwhile, until the
// queue is empty, and gives its slot back. Measured with
// kvfence_submit_https at 64 writers, whose workers submit again as soon
// as they are answered: without the yield below, the first of them took
// the free slot alone, a batch of one that held it for a whole commit,
// and the rate halved.
func (c *Client) sendBatches(ctx context.Context, take []*pendingSubmit, req *batchRequest) {
	defer func() { <-c.batch.slots }()
	for len(take) > 0 {
		c.sendBatch(req.ctx, take)
		req.cancel()
		// The callers this answer woke run first, so that those that
		// submit again at once join the next request rather than one
		// of them taking the other slot alone.
		runtime.Gosched()
		take, req = c.batch.take(ctx)
	}
}

// sendBatch sends one request with the envelopes of take and answers each
// of them. One alone goes to /v1/submit, as a Client without batches would
// send it.
func (c *Client) sendBatch(rctx context.Context, take []*pendingSubmit) {
	defer func() {
		for _, p := range take {
			close(p.done)
		}
	}()
	if len(take) == 1 {
		p := take[0]
		p.status, p.err = c.callStatus(rctx, http.MethodPost, api.PathSubmit, api.ContentCBOR, p.env, &p.out, http.StatusForbidden)
		return
	}
	envs := make([][]byte, len(take))
	for i, p := range take {
		envs[i] = p.env
	}
	status, raw, err := c.roundTrip(rctx, http.MethodPost, api.PathSubmitBatch, api.ContentCBOR, api.AppendBatch(nil, envs))
	if err == nil && status == http.StatusNotFound {
		// A receiver that predates batches decided nothing: each
		// envelope goes again on its own, and so do later ones.
		c.noBatch.Store(true)
		for _, p := range take {
			p.alone = true
		}
		return
	}
	if err == nil && status != http.StatusOK {
		err = answerError(http.MethodPost, api.PathSubmitBatch, status, raw)
		if status == http.StatusRequestEntityTooLarge && errors.Is(err, ErrTooLarge) {
			// Over the receiver's batch limits, which may be lower than
			// this client's: the batch was refused whole, before anything
			// was decided, and each envelope goes alone.
			for _, p := range take {
				p.alone = true
			}
			return
		}
	}
	var out api.Batch
	if err == nil {
		// An answer of decisions alone, in the receiver's own form, is
		// read without reflection; any other goes to encoding/json.
		var fast bool
		if out, fast = api.ParseBatchJSON(raw); !fast {
			if derr := api.DecodeAnswer(raw, &out); derr != nil {
				err = fmt.Errorf("%w: POST %s: %v", ErrProtocol, api.PathSubmitBatch, derr)
			}
		}
		// Either reader: an answer with a result more or less than the
		// envelopes sent is not this request's.
		if err == nil && len(out.Results) != len(take) {
			err = fmt.Errorf("%w: POST %s: %d envelopes sent, %d results answered", ErrProtocol, api.PathSubmitBatch, len(take), len(out.Results))
		}
	}
	if err != nil {
		for _, p := range take {
			p.err = err
		}
		return
	}
	for i, p := range take {
		p.status, p.err = batchItem(i, out.Results[i])
		if p.err == nil {
			p.out = *out.Results[i].Result
		}
	}
}

// batchItem checks one element of a batch's answer: a decision with the
// status /v1/submit answers it with, or an error.
func batchItem(i int, r api.BatchResult) (int, error) {
	switch {
	case r.Error != nil && r.Result == nil && r.Status != http.StatusOK && r.Status != http.StatusForbidden:
		return 0, errorOf(r.Status, *r.Error)
	case r.Error == nil && r.Result != nil && (r.Status == http.StatusOK || r.Status == http.StatusForbidden):
		return r.Status, nil
	}
	return 0, fmt.Errorf("%w: POST %s: result %d has status %d, a decision: %t, an error: %t",
		ErrProtocol, api.PathSubmitBatch, i, r.Status, r.Result != nil, r.Error != nil)
}
