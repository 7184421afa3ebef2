package server_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/server"
)

// slowClient is a response writer whose client takes every chunk, but
// only after delay: a connection read slowly, or throttled on its way. It
// honours write deadlines as a connection does: a write still waiting at
// its deadline fails.
type slowClient struct {
	mu       sync.Mutex
	h        http.Header
	delay    time.Duration
	deadline time.Time
	n        int
}

func (s *slowClient) Header() http.Header { return s.h }
func (s *slowClient) WriteHeader(int)     {}

func (s *slowClient) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = t
	return nil
}

func (s *slowClient) Write(p []byte) (int, error) {
	s.mu.Lock()
	d := s.deadline
	s.mu.Unlock()
	wait := s.delay
	if !d.IsZero() && time.Until(d) < wait {
		time.Sleep(max(time.Until(d), 0))
		return 0, os.ErrDeadlineExceeded
	}
	time.Sleep(wait)
	s.n += len(p)
	return len(p), nil
}

// Ensure that a backup read slowly, however steadily, does not hold its
// read transaction, and with it every commit that grows the database
// file, for as long as the client likes: a commit that grows the file
// waits for every open read transaction (bbolt remaps it), and so do all
// writers behind it, holds included. The stream is cut once it falls
// behind the slowest rate it is allowed.
func TestRedteam21_BackupSlowReaderHoldsWriters(t *testing.T) {
	defer server.SetStreamBounds(500*time.Millisecond, 10<<20)()
	e := newEnv(t)
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 700<<10)
	// A database of some megabyte: the copy takes dozens of writes.
	for i := range 2 {
		if _, err := e.r.Admin().CreateTarget(ctx, scope, scope+"/pre"+string(rune('a'+i)), big); err != nil {
			t.Fatal(err)
		}
	}
	h := e.handler(fixed(operator), operator)
	w := &slowClient{h: http.Header{}, delay: 200 * time.Millisecond}
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			// The handler cuts a stream it cannot finish.
			if p := recover(); p != nil && p != http.ErrAbortHandler {
				t.Errorf("panic: %v", p)
			}
		}()
		req, _ := http.NewRequest(http.MethodGet, "https://receiver"+api.PathBackup, nil)
		close(started)
		h.ServeHTTP(w, req)
	}()
	<-started
	time.Sleep(100 * time.Millisecond)
	// Commits that grow the file past its mapping.
	t0 := time.Now()
	for i := range 5 {
		if _, err := e.r.Admin().CreateTarget(ctx, scope, scope+"/grow"+string(rune('a'+i)), big); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(t0); took > 4*time.Second {
		t.Errorf("commits that grow the database waited %s for a backup read slowly", took)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the backup did not end")
	}
}
