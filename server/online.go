package server

import (
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
// client that reads on is served however long it takes, one that stops
// reading is cut off, and the read transaction it held ends.
const StreamStall = time.Minute

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
		_, err = backup.Write(&stallWriter{w: w}, s)
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

// stallWriter extends the write deadline before each write.
type stallWriter struct{ w http.ResponseWriter }

func (s *stallWriter) Write(p []byte) (int, error) {
	extendWrite(s.w)
	return s.w.Write(p)
}
