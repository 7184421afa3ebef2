package bench

import (
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// memSampler records the largest HeapSys seen while it runs.
type memSampler struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	peak uint64
}

// memSampleEvery is how often the sampler reads the heap's size. Reading
// it stops the world for microseconds; ten times a second is noise.
const memSampleEvery = 100 * time.Millisecond

func startMemSampler() *memSampler {
	s := &memSampler{done: make(chan struct{})}
	s.sample()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(memSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *memSampler) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.mu.Lock()
	s.peak = max(s.peak, ms.HeapSys)
	s.mu.Unlock()
}

// stop ends sampling and returns the peak HeapSys.
func (s *memSampler) stop() uint64 {
	close(s.done)
	s.wg.Wait()
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

func dirAbs(dir string) (string, error) { return filepath.Abs(dir) }

// peakNow returns the peak HeapSys so far, sampling once more first.
func (s *memSampler) peakNow() uint64 {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}
