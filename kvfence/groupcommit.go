package kvfence

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/chain"
)

// Group commit (docs/design.md §10). A durable write costs a bbolt commit (its
// fdatasyncs) and an anchor write, both far slower than deciding a request,
// so concurrent writes share them: every write call queues its closure, and
// whichever caller finds no commit running leads. The leader takes a
// batch from the queue (admin calls first, see take), runs its calls in
// order inside one write transaction, signs
// one checkpoint for the last entry, commits, writes the anchor once and
// then hands each caller its own result. Calls that arrive meanwhile wait
// for the next leader, which heads the next batch (next); there is no
// timer and no fixed delay, so a lone caller commits at once.
//
// A batch's results are those of running its calls one by one in its
// order: they share the transaction and its audit chain, so each call sees
// the effects of the calls before it. If any call fails, or the commit
// does, the transaction rolls back and every call of the batch runs again
// alone, so that one faulty call never fails its neighbours. An
// administrator's call that arrives meanwhile ends the batch early (cut):
// the calls not yet run go back to the head of the queue.

// Batch limits. A batch holds at most maxBatchCalls calls and, unless its
// first call alone is larger, at most maxBatchBytes of input: every call
// of a batch waits for the whole batch, and its dirty pages stay in memory
// until the commit.
const (
	maxBatchCalls = 1024
	maxBatchBytes = 8 << 20
)

// The administrators' lane (docs/design.md §10). An administrator's call
// (a hold, an activation: Admin's writes) waits in a queue of its own, and
// the next batch takes the waiting ones first, ahead of every queued
// submit, and brings along at most adminCompanions of the oldest submits
// (or as many as it took admin calls, if more): during a flood, a hold
// then waits for the batch being decided and for a small batch of its
// own, not for a batch of every queued submit. A batch being decided when
// an admin call arrives ends at the call it decides (cut), and a batch
// with admin calls passes the lead only after its anchor write (lead).
// A commit's fsyncs cost far more than deciding a few calls, so the
// companions cost the hold little and keep the submits moving. Submits
// cannot starve: a batch that takes admin calls still takes at least one
// waiting submit whenever it has room for two calls, a cut batch keeps
// the first of them, and at most maxAdminBatches batches in a row may
// take no submit while submits wait (which only a batch limit of one call
// allows); the next batch is then led by the oldest submit.
const (
	adminCompanions = 8
	maxAdminBatches = 4
)

// lane says which queue a call waits in and what it may do.
type lane uint8

const (
	// laneWrite is a write of the receiver's own (settling a remote
	// write, an archive), queued with the submits.
	laneWrite lane = iota
	// laneWorker is a worker's call (Submit), which may not write into
	// the space reserved for administrators.
	laneWorker
	// laneAdmin is an administrator's call, taken ahead of queued
	// submits.
	laneAdmin
)

// call is one write call in the commit queue.
type call struct {
	fn func(w *wtx) (any, error)
	// size is the call's input in bytes, counted against maxBatchBytes.
	size int
	// worker marks a worker's call (Submit), which may not write into the
	// space reserved for administrators.
	worker bool
	// admin marks an administrator's call, which waits in the admin lane.
	admin bool
	// sub is the submission a Submit call decides, whose reads the leader
	// names ahead to an engine that can fetch them in one request; nil
	// for other calls.
	sub *submission
	// res and err are the call's outcome, set by the leader that ran it
	// before it wakes the caller.
	res any
	err error
	// anchored is the signed checkpoint that acknowledged the call's
	// commit, set with res once the anchor holds it (or, for a receiver
	// without an anchor, once the commit is made); nil for a call whose
	// batch wrote nothing (wtx.idle).
	anchored *audit.SignedCheckpoint
	// lead, when wake fires, means the call has not run yet and its caller
	// must lead the next batch.
	lead bool
	// wake receives exactly one signal; it is buffered so that the leader
	// never blocks on a caller.
	wake chan struct{}
}

// commitQueue holds the calls waiting for a commit, each lane in arrival
// order.
type commitQueue struct {
	mu sync.Mutex
	// pending are the submits and the receiver's own writes; admin are
	// the administrators' calls, taken first.
	pending []*call
	admin   []*call
	// admins is len(admin), which a leader deciding its batch reads
	// without mu (cut).
	admins atomic.Int32
	// adminRun counts the batches in a row that took no call of pending
	// while some waited (maxAdminBatches).
	adminRun int
	// leading is true from the moment a caller takes the lead until a
	// leader finds the queue empty; while it is true, new calls wait.
	leading bool
	// buffers holds the leaders' batch slices for reuse.
	buffers sync.Pool
	// commits counts committed write transactions, so that tests and
	// benchmarks can see how many calls shared each one.
	commits atomic.Uint64
}

// update runs fn as one write call through the commit queue and returns
// its result once the commit that contains it is anchored. size is the
// call's input in bytes. fn may run more than once (a batch that fails is
// retried call by call), so it must not keep state of its own between
// runs: it returns its result, and only the result of a committed run
// reaches the caller.
func update[T any](r *Receiver, size int, fn func(w *wtx) (T, error)) (T, error) {
	return updateIn(r, laneWrite, size, fn)
}

// adminUpdate is update for an administrator's call, which waits in the
// admin lane.
func adminUpdate[T any](r *Receiver, size int, fn func(w *wtx) (T, error)) (T, error) {
	return updateIn(r, laneAdmin, size, fn)
}

// updateIn is update for a call of lane l.
func updateIn[T any](r *Receiver, l lane, size int, fn func(w *wtx) (T, error)) (T, error) {
	res, err := r.write(size, l, nil, func(w *wtx) (any, error) { return fn(w) })
	if err != nil {
		var zero T
		return zero, err
	}
	return res.(T), nil
}

// adminUpdateAnchored is adminUpdate that also returns the signed
// checkpoint the anchor was moved to for the call's commit: one that
// covers every entry the call appended. It is nil when the call's batch
// wrote nothing (wtx.idle); such a call answers from what the store
// already held.
func adminUpdateAnchored[T any](r *Receiver, size int, fn func(w *wtx) (T, error)) (T, *audit.SignedCheckpoint, error) {
	c := r.writeCall(size, laneAdmin, nil, func(w *wtx) (any, error) { return fn(w) })
	if c.err != nil {
		var zero T
		return zero, nil, c.err
	}
	return c.res.(T), c.anchored, nil
}

// exec is update for a call whose only outcome is an error.
func (r *Receiver) exec(size int, fn func(w *wtx) error) error {
	_, err := r.write(size, laneWrite, nil, func(w *wtx) (any, error) { return nil, fn(w) })
	return err
}

// adminExec is adminUpdate for a call whose only outcome is an error.
func (r *Receiver) adminExec(size int, fn func(w *wtx) error) error {
	_, err := r.write(size, laneAdmin, nil, func(w *wtx) (any, error) { return nil, fn(w) })
	return err
}

// submitCall is update for a worker's call, which is refused when the
// volume is below the administrators' reserve.
func submitCall(r *Receiver, size int, fn func(w *wtx) (Result, error)) (Result, error) {
	res, err := r.write(size, laneWorker, nil, func(w *wtx) (any, error) { return fn(w) })
	if err != nil {
		return Result{}, err
	}
	return res.(Result), nil
}

// decideCall is submitCall for Submit's decision of s, whose reads the
// leader of its batch may fetch ahead (prefetchKeys).
func (r *Receiver) decideCall(s *submission, size int) (Result, error) {
	res, err := r.write(size, laneWorker, s, func(w *wtx) (any, error) { return r.decide(w, s) })
	if err != nil {
		return Result{}, err
	}
	return s.committed(res.(Result)), nil
}

// write queues one call in lane l and waits for its outcome, leading a
// batch itself when no commit is running. sub is the submission of a
// Submit call, or nil.
func (r *Receiver) write(size int, l lane, sub *submission, fn func(w *wtx) (any, error)) (any, error) {
	c := r.writeCall(size, l, sub, fn)
	return c.res, c.err
}

// writeCall is write that returns the call, whose outcome is set.
func (r *Receiver) writeCall(size int, l lane, sub *submission, fn func(w *wtx) (any, error)) *call {
	if r.opts.ReadOnly {
		return &call{err: ErrReadOnly}
	}
	c := &call{fn: fn, size: size, worker: l == laneWorker, admin: l == laneAdmin, sub: sub, wake: make(chan struct{}, 1)}
	r.await(c, r.queue.enqueue(c))
	return c
}

// enqueue queues calls, in their order and under one lock, so that no
// leader can take the first before the last is queued. It reports whether
// the first must lead a batch, because no commit is running.
func (q *commitQueue) enqueue(calls ...*call) (lead bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, c := range calls {
		if c.admin {
			q.admin = append(q.admin, c)
			q.admins.Store(int32(len(q.admin)))
		} else {
			q.pending = append(q.pending, c)
		}
	}
	if q.leading {
		return false
	}
	q.leading = true
	return true
}

// await waits until c, queued, has its outcome, leading a batch when lead
// says it must now or when the leader before hands it the lead.
func (r *Receiver) await(c *call, lead bool) {
	if !lead {
		<-c.wake
		if !c.lead {
			return
		}
	}
	r.lead(c)
}

// lead runs one batch from the head of the queue, which holds self's
// call (take), writes the anchor for it, wakes the batch's other callers,
// and passes the lead to the call that heads the next batch, if any.
//
// On a database file, which this process alone writes, the next leader
// starts its transaction while this one writes the anchor: the anchor's
// fdatasync then overlaps the next batch's decisions instead of adding to
// them. Nothing is acknowledged earlier for it: a caller is woken only
// once the anchor covers its commit. The anchor writes stay in commit
// order because a leader takes amu before it lets go of wmu, and the next
// transaction checks its checkpoint against an anchor that is at most one
// commit older, which the rules of CheckAdvance make no weaker (seqs and
// high-waters only grow along the chain). A store that other processes
// write (etcd) reads the anchor before each batch (currentAnchor), so
// there the lead passes only after the anchor write: a batch started
// during the write could read the anchor being written, not yet durable,
// and answer a repeated call (a hold retried with its ID) from it before
// that write is known to have succeeded
// (TestRedteamT_RepeatHoldNotAnsweredFromAnchorWriteInFlight).
//
// A batch with admin calls passes the lead only after its anchor write on
// a file too: the next batch, often a flood's large one, would otherwise
// decide on the same cores and fsync on the same disk while the hold
// waits for its anchor, which then takes several times as long. The
// flood waits for one anchor write per admin batch instead.
func (r *Receiver) lead(self *call) {
	q := &r.queue
	batch := q.take(q.buffer(), self, r.batchCallsNow(), r.batchBytes)
	var rest []*call
	work := func() *anchorWork {
		r.wmu.Lock()
		defer r.wmu.Unlock()
		var work *anchorWork
		work, rest = r.commit(batch)
		if work != nil {
			r.amu.Lock()
		}
		return work
	}()
	if len(rest) > 0 {
		// The calls the batch left go back to the queue before the lead
		// passes, so that the next batch, led by the admin call that
		// waits, finds them at the heads of their lanes. Their callers
		// are woken by the batch that runs them.
		// rest may share batch's array, which without clears.
		rest = slices.Clone(rest)
		batch = without(batch, rest)
		q.putBack(rest)
	}
	early := r.file && !batch[0].admin
	if early {
		q.handOff()
	}
	if work != nil {
		r.anchorCommits(work)
		r.amu.Unlock()
	} else if r.witnesses != nil {
		r.amu.Lock()
		r.cosignIdle(batch)
		r.amu.Unlock()
	}
	for _, c := range batch {
		if c != self {
			c.wake <- struct{}{}
		}
	}
	q.release(batch)
	if !early {
		q.handOff()
	}
}

// handOff passes the lead to the call that heads the next batch (next),
// or ends the leading if no call waits.
func (q *commitQueue) handOff() {
	q.mu.Lock()
	if next := q.next(); next != nil {
		next.lead = true
		next.wake <- struct{}{}
	} else {
		q.leading = false
	}
	q.mu.Unlock()
}

// next returns the call that leads the next batch: the oldest admin call,
// unless maxAdminBatches batches in a row took no waiting submit, then the
// oldest other call; nil if no call waits. The caller holds mu.
func (q *commitQueue) next() *call {
	if len(q.admin) > 0 && (len(q.pending) == 0 || q.adminRun < maxAdminBatches) {
		return q.admin[0]
	}
	if len(q.pending) > 0 {
		return q.pending[0]
	}
	return nil
}

// buffer returns a slice for a leader's batch. Two leaders may hold a
// batch at once (one writing its anchor, the next deciding), so each
// takes a buffer of its own and gives it back with release.
func (q *commitQueue) buffer() []*call {
	if b, ok := q.buffers.Get().(*[]*call); ok {
		return (*b)[:0]
	}
	return nil
}

func (q *commitQueue) release(batch []*call) {
	clear(batch)
	batch = batch[:0]
	q.buffers.Put(&batch)
}

// anchorWork is what a leader's commits leave to do once they are
// committed: write the anchor for the newest of them, then acknowledge
// their calls.
type anchorWork struct {
	sc    audit.SignedCheckpoint
	calls []*call
	// commits are the commits' reports for the Observer, each with the
	// time its transaction started.
	commits []commitReport
}

type commitReport struct {
	stats *CommitStats
	start time.Time
}

// anchorCommits moves the anchor to the newest commit of work and, if
// that fails, gives each of its calls ErrNotAcknowledged: the database is
// then ahead of its anchor, which Open accepts as a crash window; the
// callers see an error and may retry (an applied request then answers
// already_applied).
func (r *Receiver) anchorCommits(work *anchorWork) {
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("anchor store or witnesses panicked: %v", p)
			}
		}()
		if r.witnesses == nil {
			err = r.advanceAnchor(work.sc)
			return
		}
		// The witnesses' round runs beside the anchor write, not after
		// it: both wait on a disk, and the batch waits for the slower
		// one, not for both. A round for a checkpoint whose anchor write
		// then fails leaves a witness at a size the anchor is not; that
		// is the crash window Open accepts, and Open anchors that very
		// checkpoint (refreshStored), so no witness is ever shown another
		// body for the size.
		round := make(chan error, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					round <- fmt.Errorf("witnesses panicked: %v", p)
				}
			}()
			round <- r.cosignCovering(work.sc)
		}()
		err = r.advanceAnchor(work.sc)
		if werr := <-round; err == nil {
			err = werr
		}
	}()
	// An Observer that panics must not leave amu held, which would stop
	// every later write; its batch is then not acknowledged, as a panic
	// anywhere after a commit.
	defer func() {
		if p := recover(); p != nil {
			r.notAcknowledged(work.calls, fmt.Errorf("after the commit: observer panicked: %v", p))
		}
	}()
	if err != nil {
		r.notAcknowledged(work.calls, err)
	} else {
		for _, c := range work.calls {
			if c.err == nil {
				c.anchored = &work.sc
			}
		}
	}
	for _, c := range work.commits {
		r.observe(c.stats, c.start, err)
	}
}

// take moves the next batch into buf, within the batch limits: the
// waiting admin calls first, then the oldest other calls: at most
// adminCompanions of them, or as many as the admin calls taken if more
// (without admin calls, as many as fit). The batch holds
// self, the leader's call, which next chose: the head of its lane. The
// calls keep their order, admin calls before the rest, so a hold runs
// before every submit of its batch, as it would had it been queued first.
func (q *commitQueue) take(buf []*call, self *call, maxCalls, maxBytes int) []*call {
	q.mu.Lock()
	defer q.mu.Unlock()
	waiting := len(q.pending) > 0
	bytes := 0
	batch := buf[:0]
	fits := func(c *call) bool { return len(batch) == 0 || bytes+c.size <= maxBytes }
	a := 0
	if len(q.admin) > 0 && (self.admin || q.adminRun < maxAdminBatches) {
		// Room for the oldest of the rest, which self may be; a batch of
		// one call led by an admin call has none (adminRun bounds those).
		room := maxCalls
		if waiting && (maxCalls > 1 || !self.admin) {
			room = maxCalls - 1
		}
		for a < len(q.admin) && a < room && fits(q.admin[a]) {
			bytes += q.admin[a].size
			batch = append(batch, q.admin[a])
			a++
		}
	}
	room := maxCalls - len(batch)
	if a > 0 {
		room = min(room, max(a, adminCompanions))
	}
	p := 0
	// The first of the rest is taken whatever its size, so that admin
	// calls cannot keep every submit out by their bytes.
	for p < len(q.pending) && p < room && (p == 0 || fits(q.pending[p])) {
		bytes += q.pending[p].size
		batch = append(batch, q.pending[p])
		p++
	}
	if waiting && p == 0 {
		q.adminRun++
	} else {
		q.adminRun = 0
	}
	q.admin = dequeue(q.admin, a)
	q.admins.Store(int32(len(q.admin)))
	q.pending = dequeue(q.pending, p)
	return batch
}

// putBack returns the calls of rest, the end of a batch that a leader cut
// (cut) and that did not run, to the heads of their lanes, ahead of every
// call queued since: they were taken first, and keep their order.
func (q *commitQueue) putBack(rest []*call) {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := 0
	for a < len(rest) && rest[a].admin {
		a++
	}
	q.admin = slices.Insert(q.admin, 0, rest[:a]...)
	q.admins.Store(int32(len(q.admin)))
	q.pending = slices.Insert(q.pending, 0, rest[a:]...)
}

// cut reports whether a leader deciding batch should commit its first i
// calls now and leave the rest to the next batch: an administrator's call
// waits (or, for a failed batch rerun call by call, the batch held one),
// and the batch already ran a call of the other lane after its own admin
// calls, which come first. A hold that arrives while a large batch of
// submits is decided then waits for that batch's commit, not for its
// decisions too, and a hold whose batch failed is acknowledged without
// waiting for the batch's submits to commit one by one. The call after
// the admin calls is never left, so that a batch that took submits always
// commits one (the lanes' bound on starvation holds), and the leader's own
// call, an admin call or the first of the others, always runs.
func (q *commitQueue) cut(batch []*call, i int, rerun bool) bool {
	if i == 0 || i >= len(batch) || batch[i-1].admin {
		return false
	}
	return q.admins.Load() > 0 || (rerun && batch[0].admin)
}

// without removes from batch the calls of rest, which appear in it in
// the same order.
func without(batch, rest []*call) []*call {
	j := 0
	return slices.DeleteFunc(batch, func(c *call) bool {
		if j < len(rest) && c == rest[j] {
			j++
			return true
		}
		return false
	})
}

// dequeue removes the first n calls of queue.
func dequeue(queue []*call, n int) []*call {
	rest := copy(queue, queue[n:])
	clear(queue[rest:])
	return queue[:rest]
}

// commit runs a batch in one transaction, or, if that transaction does not
// commit, each of its calls in a transaction of its own. It sets the
// outcome of every call it ran, and returns the anchor write the commits
// still need (nil if none committed, or the receiver has no anchor) and
// the end of the batch that it cut off for an administrator's call (cut),
// whose calls did not run. The caller holds wmu.
func (r *Receiver) commit(batch []*call) (*anchorWork, []*call) {
	if batch = r.reserve(batch); len(batch) == 0 {
		return nil, nil
	}
	var work anchorWork
	rest := r.commitSplit(batch, &work, true)
	if len(work.calls) == 0 {
		return nil, rest
	}
	return &work, rest
}

// commitSplit runs a batch in one transaction. A batch larger than the
// store takes in one commit (engine.ErrTxnTooLarge) is split in halves,
// down to a single call, which is refused with ErrTooLarge: nothing of it
// was written. An outcome that is unknown is every call's outcome: its
// calls may have been applied, and a call retried alone here would answer
// already_applied, a verdict the caller must not get for it. Any other
// failure makes every call run again alone. Commits that need an anchor
// write are added to work. With cuts allowed, the batch or its run call
// by call may stop early for an administrator's call (cut); the calls it
// did not run are returned.
func (r *Receiver) commitSplit(batch []*call, work *anchorWork, cuts bool) []*call {
	n, err := r.run(batch, work, cuts)
	// The calls after a cut did not run, whatever became of the others:
	// not even an unknown outcome is theirs.
	all := batch
	batch, rest := batch[:n], batch[n:]
	switch {
	case err == nil:
		return rest
	case errors.Is(err, engine.ErrTxnTooLarge) && len(batch) > 1:
		mid := len(batch) / 2
		r.commitSplit(batch[:mid], work, false)
		r.commitSplit(batch[mid:], work, false)
		return rest
	case errors.Is(err, engine.ErrTxnTooLarge):
		batch[0].err = fmt.Errorf("%w: %w", ErrTooLarge, err)
		return rest
	case len(batch) == 1 || errors.Is(err, ErrClosed) || errors.Is(err, ErrOutcomeUnknown) || r.faults.shareFault:
		for _, c := range batch {
			c.err = err
		}
		return rest
	}
	for i, c := range batch {
		// Each call alone is a commit: a hold must not wait for all of
		// them, whether it waits in the queue or ran first in this batch.
		if cuts && r.queue.cut(batch, i, true) {
			return all[i:]
		}
		// The batch may have failed because it filled the volume: each
		// worker call retried alone is measured against the reserve
		// again, so that the retries cannot eat the administrators' room.
		if len(r.reserve(batch[i:i+1])) == 0 {
			continue
		}
		if _, err := r.run(batch[i:i+1], work, false); err != nil {
			if errors.Is(err, engine.ErrTxnTooLarge) {
				err = fmt.Errorf("%w: %w", ErrTooLarge, err)
			}
			c.err = err
		}
	}
	return rest
}

// batchLimits sizes a batch within the engine's limits, ahead of the
// commit, so that splits after an ErrTxnTooLarge stay rare: a call reads
// its scope's control record, its grant, receipt and target, each
// compared at the commit, and its audit key, which the head key's compare
// guards (readAhead); it writes its receipt, target, audit entry and tree
// record; a commit reads and compares the head key, the state digest and
// the high-water, and writes its checkpoint, head key, state digest and
// high-water. The reads bound a batch too (batchCallsNow). A store
// without limits (bbolt) keeps the batch limits of the queue.
func batchLimits(lim engine.Limits) (calls, bytes int) {
	calls, bytes = maxBatchCalls, maxBatchBytes
	if lim.MaxOps > 0 {
		calls = min(calls, max(1, (lim.MaxOps-opsPerCommit)/opsPerCall))
	}
	if lim.MaxBytes > 0 {
		// A call's input is written about twice (its target value and
		// the request it records), with its entry and receipt beside.
		bytes = min(bytes, max(1, (lim.MaxBytes-bytesPerCommit)/2))
	}
	return calls, bytes
}

// batchCallsNow is batchCalls, bounded on a store whose reads are bounded
// per request (etcd) so that the batch's read-ahead is one request: each
// request more is a round trip the whole batch waits for. A call reads
// its four records; a commit reads three keys, one range of the batch's
// audit keys (successive keys) and the tree's frontier, one record per
// bit set in the chain's length, taken from this process's last commit
// (another writer's commits since then make the read-ahead two requests
// at worst, never a failure: the reads the audit and tree records add
// are not compares), and as frontierBound records before the first.
func (r *Receiver) batchCallsNow() int {
	if r.maxReads <= 0 {
		return r.batchCalls
	}
	frontier := frontierBound
	if seq := r.committedSeq.Load(); seq != 0 {
		frontier = bits.OnesCount64(seq)
	}
	return min(r.batchCalls, max(1, (r.maxReads-readsPerCommit-frontier)/readsPerCall))
}

// What one call and one commit add to a transaction, for batchLimits and
// batchCallsNow: compares or writes (whichever are more), and reads ahead.
// frontierBound is the tree frontier of a chain of fewer than 16,777,216
// entries.
const (
	opsPerCall     = 4
	opsPerCommit   = 8
	readsPerCall   = 4
	readsPerCommit = 3 + 1
	frontierBound  = 24
	bytesPerCommit = 8 << 10
)

// freeSpacer is a store that measures the free space left for it (the
// bbolt engine, on the volume of its file).
type freeSpacer interface {
	FreeSpace() (int64, error)
}

// reserve refuses the batch's worker calls with ErrStorageReserve when the
// volume has less free space than Options.Reserve, and returns the calls
// left to run. Measuring costs a statfs per batch, not per call. A
// measurement that fails refuses nothing: the write itself then meets the
// disk's own error, which changes nothing either.
func (r *Receiver) reserve(batch []*call) []*call {
	if r.opts.Reserve < 0 || !slices.ContainsFunc(batch, func(c *call) bool { return c.worker }) {
		return batch
	}
	var free int64
	var err error
	switch fs, ok := r.eng.(freeSpacer); {
	case r.faults.freeSpace != nil:
		free, err = r.faults.freeSpace(r.path)
	case ok:
		free, err = fs.FreeSpace()
	default:
		// A store that is not a local file (etcd) has no volume here to
		// keep a reserve on.
		return batch
	}
	if err != nil || free >= r.opts.Reserve {
		return batch
	}
	refused := fmt.Errorf("%w: %s: %d bytes free, %d reserved", ErrStorageReserve, r.path, free, r.opts.Reserve)
	return slices.DeleteFunc(slices.Clone(batch), func(c *call) bool {
		if c.worker {
			c.err = refused
		}
		return c.worker
	})
}

// run executes the calls in one write transaction and, if it commits,
// moves the cached head and adds the commit to work, whose anchor write
// acknowledges it. With cuts allowed, the transaction may end after the
// first n calls for an administrator's call (cut); it returns n, the
// number of calls it ran, whatever the outcome (set on return). The error
// reports a transaction that did not commit: then no call has a result.
func (r *Receiver) run(batch []*call, work *anchorWork, cuts bool) (n int, err error) {
	var w *wtx
	var sc audit.SignedCheckpoint
	var ahead *readAhead
	committed := false
	start := time.Now()
	limit := -1
	if cuts {
		limit = len(batch)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		// Whatever the outcome, the calls after a cut did not run.
		n = len(batch)
		if limit >= 0 {
			n = limit
		}
		if p := recover(); p != nil {
			if !committed {
				err = fmt.Errorf("%w: %s: bbolt: %v", ErrBadFormat, r.path, p)
			} else {
				r.notAcknowledged(batch, fmt.Errorf("after the commit: %v", p))
			}
		}
		if err != nil {
			// A run that did not commit leaves no result behind, not even
			// those of the calls before the one that failed.
			for _, c := range batch {
				c.res, c.err = nil, nil
			}
		}
	}()
	anchor, err := r.currentAnchor()
	if err != nil {
		return 0, err
	}
	for resyncs := 0; ; resyncs++ {
		err = r.update(batch, anchor, &w, &sc, &ahead, &limit)
		if !errors.Is(err, errHeadMoved) {
			break
		}
		if resyncs == maxResyncs {
			err = fmt.Errorf("%w: %w", engine.ErrConflict, err)
			break
		}
		if err = r.resync(); err != nil {
			break
		}
	}
	if errors.Is(err, errIdle) {
		// Every call answered from what the store held: there is nothing
		// to commit or anchor, and the results stand.
		return 0, nil
	}
	if err != nil {
		return 0, r.writeErr(err)
	}
	if limit >= 0 {
		batch = batch[:limit]
	}
	committed = true
	// Only a committed transaction's records are known: a run that
	// rolled back, or was retried, left none behind.
	w.recs.commit()
	if anchor != nil {
		r.anchorMu.Lock()
		if anchor.Seq > r.anchor.Seq {
			// Another process moved the anchor, and this commit extends it.
			r.anchor = *anchor
		}
		r.anchorMu.Unlock()
	}
	r.head, r.state, r.stateSum, r.hw = w.chain.Head(), w.state, w.stateSum, w.hw
	r.committedSeq.Store(r.head.Seq)
	r.queue.commits.Add(1)
	stats := r.commitStats(batch)
	if r.opts.Anchor == nil {
		for _, c := range batch {
			c.anchored = &sc
		}
		r.observe(stats, start, nil)
		return 0, nil
	}
	// Acknowledged only once the anchor covers the commit (lead).
	work.sc = sc
	work.calls = append(work.calls, batch...)
	if stats != nil {
		work.commits = append(work.commits, commitReport{stats, start})
	}
	return 0, nil
}

// update runs the batch's write transaction once; w, sc and ahead are
// run's, which it sets. A limit of -1 runs every call; otherwise the
// transaction runs the first *limit calls and may lower *limit to end
// sooner (cut). A run of the function again (a conflict) keeps to the
// calls of the first, which is what the read-ahead named.
func (r *Receiver) update(batch []*call, anchor *audit.SignedCheckpoint, wp **wtx, scp *audit.SignedCheckpoint, aheadp **readAhead, limit *int) error {
	return r.eng.Update(context.Background(), func(tx engine.Tx) error {
		batch := batch
		if *limit >= 0 {
			batch = batch[:*limit]
		}
		w, sc, ahead := *wp, *scp, *aheadp
		defer func() { *wp, *scp, *aheadp = w, sc, ahead }()
		// The function may run more than once: every run starts from the
		// head the store holds now, and no call keeps a result of a run
		// that did not commit.
		for _, c := range batch {
			c.res = nil
		}
		// An engine whose reads are round trips (etcd) reads what the
		// batch will read in one; the reads are compared at the commit as
		// if each were made where the calls make them. bbolt reads its
		// pages in place and is not asked.
		if _, ok := tx.(engine.Prefetcher); ok {
			if ahead == nil {
				ra := r.prefetchKeys(batch)
				ahead = &ra
			}
			if err := ahead.prefetch(tx); err != nil {
				return err
			}
		}
		var err error
		if w, err = r.newWtx(tx); err != nil {
			return err
		}
		w.terms = &r.terms
		start := w.chain.Head()
		w.anchor = anchor
		if anchor != nil {
			// A store put back under a running receiver (an etcd
			// snapshot or the prefix's keys restored) ends before the
			// anchor, or forks from it: nothing is decided on it.
			err := anchor.CheckHead(w.chain.Started(), func(seq uint64) (audit.Hash, error) { return hashAt(tx, seq) })
			if err != nil {
				return fmt.Errorf("kvfence: %s: %w", r.path, err)
			}
		}
		for i, c := range batch {
			if *limit >= 0 && r.queue.cut(batch, i, false) {
				// The calls not decided are left out of this
				// transaction whole: none of them ran in it.
				*limit = i
				batch = batch[:i]
				break
			}
			// Each call reads the clock, as it would alone: a grant's
			// window is checked at the call's own decision.
			w.now = r.opts.Now()
			res, err := c.fn(w)
			if err != nil {
				return err
			}
			c.res = res
		}
		if w.idle == len(batch) && w.chain.Head() == start && !w.stateDirty {
			return errIdle
		}
		if sc, err = w.checkpoint(r.id, r.opts.Key); err != nil {
			return err
		}
		// The anchor's rules are checked before the commit, not after
		// it: a checkpoint the anchor would refuse must not describe a
		// committed state.
		if r.opts.Anchor == nil {
			return nil
		}
		if anchor != nil {
			if err := anchor.CheckAdvance(sc.Checkpoint); err != nil {
				return err
			}
		}
		cur := r.anchorNow()
		if anchor != nil && newerAdmission(anchor.Admission, cur.Admission) {
			// Another process recovered the receiver since this one last
			// wrote the anchor: the store's anchor, signed by this
			// receiver's key, names an admission consumed after the one
			// cur names, and every checkpoint since carries it. cur then
			// predates the recovery that superseded it, and holding the
			// commit to it would refuse every write from now on.
			cur = *anchor
		}
		return cur.CheckAdvance(sc.Checkpoint)
	})
}

// errIdle ends a write transaction in which every call answered from
// what the store already held and wrote nothing (wtx.idle): it commits
// nothing, not even a checkpoint, and its calls keep their results.
var errIdle = errors.New("kvfence: nothing to commit")

// newerAdmission reports whether a names an admission consumed after the
// one cur names (or cur names none): admissions are consumed in the order
// they were signed (audit.AdmissionRecord.Refuses), and every checkpoint
// after a recovery carries its admission, so an anchor that names a newer
// one was written after every anchor that names cur.
func newerAdmission(a, cur audit.AdmissionRecord) bool {
	return !a.IsZero() && (cur.IsZero() || a.At > cur.At)
}

// currentAnchor reads the anchor before a write on a store that other
// processes may write (etcd), or returns nil on a file that this process
// alone writes. There the anchor this process last wrote can be far behind
// the one that covers other processes' commits, and a store put back to a
// state between the two would pass a check against it: the commit would
// decide on records that a later hold superseded (a stale grant active
// again). The anchor read here is signed by this receiver's key; the write
// transaction then requires its head at or past it, in the same chain.
func (r *Receiver) currentAnchor() (*audit.SignedCheckpoint, error) {
	if r.file || r.opts.Anchor == nil {
		return nil, nil
	}
	a, err := chain.CurrentAnchor(r.opts.Anchor, r.anchorNow(), r.pub, r.id)
	if err != nil {
		return nil, fmt.Errorf("kvfence: %s: anchor: %w", r.path, err)
	}
	return &a, nil
}

// notAcknowledged gives every call of a committed batch ErrNotAcknowledged
// in place of its result.
func (r *Receiver) notAcknowledged(batch []*call, cause error) {
	err := fmt.Errorf("%w: %s: %w", ErrNotAcknowledged, r.path, cause)
	for _, c := range batch {
		c.res, c.err = nil, err
	}
}
