package server

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// StreamStall bounds how long one write of a long answer (a backup, the
// answer of a verification that ran for long) may wait on the client.
// Each write moves the connection's write deadline this far ahead, in
// place of the server's WriteTimeout, which counts from the request: a
// client that stops reading is cut off, and the read transaction it held
// ends.
const StreamStall = time.Minute

// StreamMinRate is the slowest average rate, in bytes a second, at which
// a backup is sent: the whole stream is due StreamStall after it began
// plus its length at this rate, and a client that has not taken it by
// then is cut off. A backup holds one read transaction until its last
// byte is written, and a commit that grows the database file waits for
// every open read transaction (bbolt remaps the file), as does every
// writer behind it: without this bound a client reading a chunk a minute
// would hold the receiver's writers, holds included, for days.
const StreamMinRate = 256 << 10

// streamStall and streamMinRate are the bounds in force; a test lowers them.
var (
	streamStall   = StreamStall
	streamMinRate = int64(StreamMinRate)
)

// errStreamTooSlow cuts a backup that fell behind StreamMinRate.
var errStreamTooSlow = errors.New("server: the client takes the backup slower than the slowest rate allowed")

// verifyChain verifies the running receiver's chain, state and anchor
// (kvfence.Receiver.VerifyOnline) and answers the report, whatever its
// problem, with 200: the request succeeded, and the report says what it
// found.
func (h *Handler) verifyChain(w http.ResponseWriter, r *http.Request, caller string) error {
	if _, err := query(r); err != nil {
		return err
	}
	rep, err := h.r.VerifyOnline(r.Context())
	if err != nil {
		return err
	}
	if !rep.OK() {
		h.log.Error("online verification found a problem", "caller", caller, "problem", rep.Problem, "detail", rep.Detail)
	}
	extendWrite(w)
	writeJSON(w, http.StatusOK, api.VerifyChainOf(rep))
	return nil
}

// backup streams a consistent snapshot of the receiver's storage with its
// newest signed checkpoint, as a backup file (package backup). A failure
// once the answer has begun cannot be answered any more: the connection
// is then cut, and the client's checks of the length and the sum refuse
// what it got.
func (h *Handler) backup(w http.ResponseWriter, r *http.Request, caller string) error {
	if _, err := query(r); err != nil {
		return err
	}
	started := false
	err := h.r.Snapshot(r.Context(), func(s kvfence.Snapshot) error {
		n, err := backup.Length(s)
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", backup.ContentType)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.Header().Set("Cache-Control", "no-store")
		extendWrite(w)
		w.WriteHeader(http.StatusOK)
		started = true
		_, err = backup.Write(&stallWriter{w: w, start: time.Now()}, s)
		return err
	})
	if err != nil && started {
		h.log.Error("backup stream cut short", "caller", caller, "error", err)
		panic(http.ErrAbortHandler)
	}
	if err == nil {
		h.log.Info("backup sent", "caller", caller)
	}
	return err
}

// extendWrite moves w's write deadline StreamStall ahead; a writer that
// has none (a test's recorder) is left as it is.
func extendWrite(w http.ResponseWriter) {
	// The only error is http.ErrNotSupported: then no deadline applies.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(StreamStall))
}

// stallWriter extends the write deadline before each write, to
// StreamStall from now but never past the time by which the stream's
// bytes so far, this write's included, are due at StreamMinRate; a write
// that is already late is refused.
type stallWriter struct {
	w     http.ResponseWriter
	start time.Time
	n     int64
}

func (s *stallWriter) Write(p []byte) (int, error) {
	now := time.Now()
	deadline := now.Add(streamStall)
	if due, ok := s.due(int64(len(p))); ok {
		if !now.Before(due) {
			return 0, errStreamTooSlow
		}
		if due.Before(deadline) {
			deadline = due
		}
	}
	// The only error is http.ErrNotSupported: then no deadline applies.
	_ = http.NewResponseController(s.w).SetWriteDeadline(deadline)
	n, err := s.w.Write(p)
	s.n += int64(n)
	return n, err
}

// due is when the stream's bytes up to this write's k more are due; ok is
// false when that is too far off to count (no bound then but the stall).
func (s *stallWriter) due(k int64) (time.Time, bool) {
	rate := streamMinRate
	if rate <= 0 {
		return time.Time{}, false
	}
	total := s.n + k
	secs := total / rate
	if secs > 1<<32 {
		return time.Time{}, false
	}
	d := time.Duration(secs)*time.Second + time.Duration(total%rate)*time.Second/time.Duration(rate)
	return s.start.Add(streamStall + d), true
}
