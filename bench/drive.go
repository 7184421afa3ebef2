package bench

import (
	"context"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// cell is one row opened for one writer count: the operation the writers
// run, and what the harness reads around the timed rounds.
type cell interface {
	// op performs operation i as writer w. Writers call it concurrently;
	// each i is performed once.
	op(ctx context.Context, w int, i int64) error
	// syncs returns the fsync-like calls made so far, counted or computed
	// from counted commits. The harness reads it only between rounds.
	syncs() (float64, error)
	// close releases the cell's files.
	close() error
}

// preparer is a cell whose operations must be made ready before they run,
// outside the timed region: an applied fenced write needs its own grant.
type preparer interface {
	// prepare makes operations from to from+n-1 ready. Operations before
	// from that were prepared and never run are abandoned. It is never
	// called while operations run.
	prepare(ctx context.Context, from, n int64) error
}

// measurement accumulates the timed rounds of one cell.
type measurement struct {
	ops     int64
	elapsed time.Duration
	syncs   float64
	mallocs uint64
	// lat holds every operation's latency in nanoseconds, per writer.
	lat [][]int64
}

func (m *measurement) result(rw row, writers int) Result {
	res := Result{Name: rw.name, Writers: writers, Ops: m.ops, Seconds: m.elapsed.Seconds(), Durable: rw.durable}
	if m.ops > 0 && m.elapsed > 0 {
		res.OpsPerSec = float64(m.ops) / m.elapsed.Seconds()
		res.FsyncsPerOp = m.syncs / float64(m.ops)
		res.AllocsPerOp = float64(m.mallocs) / float64(m.ops)
	}
	p := percentiles(m.lat, 0.50, 0.99)
	res.P50Micros, res.P99Micros = p[0]/1e3, p[1]/1e3
	return res
}

// percentiles returns the q-quantiles (nearest rank) of all latencies.
func percentiles(lat [][]int64, qs ...float64) []float64 {
	var all []int64
	for _, l := range lat {
		all = append(all, l...)
	}
	out := make([]float64, len(qs))
	if len(all) == 0 {
		return out
	}
	slices.Sort(all)
	for i, q := range qs {
		k := int(math.Ceil(q*float64(len(all)))) - 1
		out[i] = float64(all[max(0, min(k, len(all)-1))])
	}
	return out
}

// firstRound is the number of operations per writer prepared for the
// warm-up round of a cell that needs preparation, which also measures the
// rate that sizes the rounds after it.
const firstRound = 8

// measureFor runs a warm-up round and then timed rounds of c with writers
// concurrent writers until d of timed rounds has passed. A cell that needs
// preparation gets it between rounds, sized from the measured rate so that
// few rounds are needed.
func measureFor(ctx context.Context, c cell, writers int, d time.Duration) (*measurement, error) {
	p, limited := c.(preparer)
	var next int64
	// Warm-up: not counted.
	warm := measurement{lat: make([][]int64, writers)}
	var rate float64
	if limited {
		n := int64(writers * firstRound)
		if err := p.prepare(ctx, next, n); err != nil {
			return nil, err
		}
		if err := drive(ctx, c, &warm, next, next+n, time.Time{}); err != nil {
			return nil, err
		}
		next += n
		rate = float64(warm.ops) / max(warm.elapsed.Seconds(), 1e-9)
	} else {
		if err := drive(ctx, c, &warm, next, math.MaxInt64, time.Now().Add(min(d/10, 500*time.Millisecond))); err != nil {
			return nil, err
		}
		next += warm.ops
	}
	m := &measurement{lat: make([][]int64, writers)}
	for m.elapsed < d {
		left := d - m.elapsed
		limit := int64(math.MaxInt64)
		if limited {
			// Prepare half as much again as the rate predicts, and never
			// less than the warm-up, so that the deadline, not the supply,
			// usually ends the round.
			n := max(int64(rate*left.Seconds()*1.5), int64(writers*firstRound))
			if err := p.prepare(ctx, next, n); err != nil {
				return nil, err
			}
			limit = next + n
		}
		before := m.ops
		if err := drive(ctx, c, m, next, limit, time.Now().Add(left)); err != nil {
			return nil, err
		}
		next += m.ops - before
		if limited && m.elapsed > 0 {
			rate = float64(m.ops) / m.elapsed.Seconds()
		}
		// A round that ran out of prepared operations just short of the
		// deadline would leave a sliver not worth another setup.
		if d-m.elapsed < d/20 {
			break
		}
	}
	return m, nil
}

// drive runs one round: writers goroutines take operation numbers from
// start upwards until limit, or until deadline passes (a zero deadline
// means none). It adds the round's operations, wall time, fsyncs,
// allocations and latencies to m. The first error stops every writer.
func drive(ctx context.Context, c cell, m *measurement, start, limit int64, deadline time.Time) error {
	writers := len(m.lat)
	syncs0, err := c.syncs()
	if err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs0 := ms.Mallocs

	var (
		next    atomic.Int64
		done    atomic.Int64
		stop    atomic.Bool
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
		ready   sync.WaitGroup
		gate    = make(chan struct{})
	)
	next.Store(start)
	ready.Add(writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := m.lat[w]
			if limit != math.MaxInt64 {
				lat = slices.Grow(lat, int((limit-start)/int64(writers))+1)
			}
			ready.Done()
			<-gate
			for !stop.Load() {
				t0 := time.Now()
				if !deadline.IsZero() && !t0.Before(deadline) {
					break
				}
				i := next.Add(1) - 1
				if i >= limit {
					break
				}
				if err := c.op(ctx, w, i); err != nil {
					errOnce.Do(func() { first = err })
					stop.Store(true)
					break
				}
				lat = append(lat, int64(time.Since(t0)))
				done.Add(1)
			}
			m.lat[w] = lat
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(gate)
	wg.Wait()
	elapsed := time.Since(t0)
	if first != nil {
		return first
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	runtime.ReadMemStats(&ms)
	syncs1, err := c.syncs()
	if err != nil {
		return err
	}
	m.ops += done.Load()
	m.elapsed += elapsed
	m.syncs += syncs1 - syncs0
	m.mallocs += ms.Mallocs - mallocs0
	return nil
}
