package fencecheck

import (
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder collects a history from concurrent clients. Times are
// nanoseconds on the monotonic clock since the recorder was made, so that a
// wall-clock step cannot reorder two calls.
type Recorder struct {
	base time.Time
	mu   sync.Mutex
	ops  []porcupine.Operation
	// stream numbers the calls of unknown outcome for the visualization:
	// such a call never returns, so it gets a row of its own instead of
	// overlapping its client's later calls.
	stream int
}

// unknownStreams is the first row given to a call of unknown outcome.
const unknownStreams = 1 << 20

// NewRecorder returns an empty recorder whose clock starts now.
func NewRecorder() *Recorder {
	return &Recorder{base: time.Now(), stream: unknownStreams}
}

// Now is the recorder's clock. A client reads it just before making a call
// and passes it to Record.
func (r *Recorder) Now() int64 { return int64(time.Since(r.base)) }

// Record appends a call made by client that started at call and returned
// out just now. A call of unknown outcome is given a return after every
// other call: it may take effect at any instant after its start, or never.
func (r *Recorder) Record(client int, in Input, call int64, out Output) {
	ret := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if out.Unknown {
		ret = math.MaxInt64
		client = r.stream
		r.stream++
	}
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// History returns a copy of the calls recorded so far.
func (r *Recorder) History() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}
