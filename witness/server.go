package witness

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Paths the Server answers.
const (
	// AddCheckpointPath is c2sp.org/tlog-witness's add-checkpoint.
	AddCheckpointPath = "/add-checkpoint"
	// LatestPath is kvfence's own read endpoint, with ?origin=O.
	LatestPath = "/kvfence/v1/latest"
	// RecoveriesPath lists the recoveries the witness accepted for a log,
	// with ?origin=O, as JSON (RecoveryView).
	RecoveriesPath = "/kvfence/v1/recoveries"
	// SizeContentType is the Content-Type of a 409 answer's body.
	SizeContentType = "text/x.tlog.size"
)

// Server is the witness's HTTP interface (an http.Handler): POST
// /add-checkpoint as c2sp.org/tlog-witness says, POST
// /kvfence/v1/recover-checkpoint (kvfence's recovery exception), GET
// /<hex SHA-256 of origin>/checkpoint (the spec's monitor endpoint) and
// GET /kvfence/v1/latest?origin=O (kvfence's own).
type Server struct {
	w   *Witness
	log *slog.Logger
}

// NewServer returns the server of w; log receives one line per refused
// request and per store failure (nil discards them).
func NewServer(w *Witness, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Server{w: w, log: log}
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == AddCheckpointPath:
		if r.Method != http.MethodPost {
			rw.Header().Set("Allow", http.MethodPost)
			http.Error(rw, "add-checkpoint takes POST", http.StatusMethodNotAllowed)
			return
		}
		s.addCheckpoint(rw, r)
	case r.URL.Path == RecoverCheckpointPath:
		if r.Method != http.MethodPost {
			rw.Header().Set("Allow", http.MethodPost)
			http.Error(rw, "recover-checkpoint takes POST", http.StatusMethodNotAllowed)
			return
		}
		s.recoverCheckpoint(rw, r)
	case r.URL.Path == RecoveriesPath:
		if !getOnly(rw, r) {
			return
		}
		q := r.URL.Query()
		if len(q) != 1 || len(q["origin"]) != 1 {
			http.Error(rw, "want exactly one origin parameter", http.StatusBadRequest)
			return
		}
		s.recoveries(rw, q.Get("origin"))
	case r.URL.Path == LatestPath:
		if !getOnly(rw, r) {
			return
		}
		q := r.URL.Query()
		if len(q) != 1 || len(q["origin"]) != 1 {
			http.Error(rw, "want exactly one origin parameter", http.StatusBadRequest)
			return
		}
		s.latest(rw, q.Get("origin"))
	case strings.HasSuffix(r.URL.Path, "/checkpoint") && strings.Count(r.URL.Path, "/") == 2:
		if !getOnly(rw, r) {
			return
		}
		hash := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/checkpoint")
		origin, ok := s.originByHash(hash)
		if !ok {
			http.Error(rw, "no cosigned checkpoint for this origin hash", http.StatusNotFound)
			return
		}
		s.latest(rw, origin)
	default:
		http.NotFound(rw, r)
	}
}

func getOnly(rw http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		rw.Header().Set("Allow", "GET, HEAD")
		http.Error(rw, "this endpoint takes GET", http.StatusMethodNotAllowed)
		return false
	}
	return true
}

func (s *Server) originByHash(hash string) (string, bool) {
	if len(hash) != 64 || strings.ToLower(hash) != hash {
		return "", false
	}
	logs, err := s.w.store.Logs()
	if err != nil {
		return "", false
	}
	for _, l := range logs {
		sum := sha256.Sum256([]byte(l.Origin))
		if hex.EncodeToString(sum[:]) == hash {
			return l.Origin, true
		}
	}
	return "", false
}

func (s *Server) latest(rw http.ResponseWriter, origin string) {
	msg, err := s.w.Latest(origin)
	switch {
	case errors.Is(err, ErrUnknownLog), errors.Is(err, ErrNoCheckpoint):
		http.Error(rw, err.Error(), http.StatusNotFound)
	case err != nil:
		s.log.Error("latest checkpoint", "origin", origin, "err", err)
		http.Error(rw, "witness store failure", http.StatusInternalServerError)
	default:
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		rw.Write(msg)
	}
}

// readBody reads a request body of at most limit bytes, answering the
// client itself when it cannot.
func readBody(rw http.ResponseWriter, r *http.Request, limit int) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, int64(limit)))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(rw, fmt.Sprintf("request body over %d bytes", limit), http.StatusRequestEntityTooLarge)
			return nil, false
		}
		http.Error(rw, "reading the request body failed", http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

// recoverCheckpoint answers a recover-checkpoint request: the cosignature
// line, or 400, 404, 403 (a recovery refused, replayed, or without a
// recovery key: the message begins with the sentinel's text) or 500.
func (s *Server) recoverCheckpoint(rw http.ResponseWriter, r *http.Request) {
	body, ok := readBody(rw, r, MaxRecoverRequestSize)
	if !ok {
		return
	}
	req, err := ParseRecoverCheckpoint(body)
	if err == nil {
		var line string
		line, err = s.w.RecoverCheckpoint(req)
		if err == nil {
			s.log.Info("recovery accepted")
			rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(rw, line)
			return
		}
	}
	switch {
	case errors.Is(err, ErrBadRequest):
		http.Error(rw, err.Error(), http.StatusBadRequest)
	case errors.Is(err, ErrUnknownLog):
		http.Error(rw, err.Error(), http.StatusNotFound)
	case errors.Is(err, ErrForbidden), errors.Is(err, ErrNoRecoveryKey), errors.Is(err, ErrRecoveryRefused),
		errors.Is(err, ErrRecoveryReplayed):
		http.Error(rw, err.Error(), http.StatusForbidden)
	default:
		s.log.Error("recover-checkpoint", "err", err)
		http.Error(rw, "witness store failure", http.StatusInternalServerError)
		return
	}
	s.log.Info("recover-checkpoint refused", "err", err)
}

func (s *Server) addCheckpoint(rw http.ResponseWriter, r *http.Request) {
	body, ok := readBody(rw, r, MaxRequestSize)
	if !ok {
		return
	}
	req, err := ParseAddCheckpoint(body)
	if err == nil {
		var line string
		line, err = s.w.AddCheckpoint(req)
		if err == nil {
			rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(rw, line)
			return
		}
	}
	var conflict *ConflictError
	switch {
	case errors.As(err, &conflict):
		rw.Header().Set("Content-Type", SizeContentType)
		rw.WriteHeader(http.StatusConflict)
		fmt.Fprintf(rw, "%d\n", conflict.Size)
		return
	case errors.Is(err, ErrBadRequest):
		http.Error(rw, err.Error(), http.StatusBadRequest)
	case errors.Is(err, ErrUnknownLog):
		http.Error(rw, err.Error(), http.StatusNotFound)
	case errors.Is(err, ErrForbidden):
		http.Error(rw, err.Error(), http.StatusForbidden)
	case errors.Is(err, ErrBadProof):
		http.Error(rw, err.Error(), http.StatusUnprocessableEntity)
	default:
		s.log.Error("add-checkpoint", "err", err)
		http.Error(rw, "witness store failure", http.StatusInternalServerError)
		return
	}
	s.log.Info("add-checkpoint refused", "err", err)
}

// RecoveryView is one accepted recovery as GET /kvfence/v1/recoveries shows
// it: what the admission was (its hash and time) and what it moved, not
// the admission itself, which stays a bearer token until it expires.
type RecoveryView struct {
	// AdmissionSHA256 is the lowercase hex SHA-256 of the admission.
	AdmissionSHA256 string `json:"admission_sha256"`
	// AdmissionAt is the admission's signing time, Unix nanoseconds.
	AdmissionAt int64 `json:"admission_at"`
	// FromSize and FromRoot are the checkpoint the witness held before.
	FromSize uint64 `json:"from_size"`
	// FromRoot is the root of that checkpoint, base64.
	FromRoot string `json:"from_root"`
	// Size is the size of the checkpoint accepted in its place.
	Size uint64 `json:"size"`
	// Root is that checkpoint's root, base64.
	Root string `json:"root"`
	// AcceptedAt is when the witness stored it.
	AcceptedAt time.Time `json:"accepted_at"`
}

func (s *Server) recoveries(rw http.ResponseWriter, origin string) {
	st, err := s.w.store.Log(origin)
	switch {
	case errors.Is(err, ErrUnknownLog):
		http.Error(rw, err.Error(), http.StatusNotFound)
		return
	case err != nil:
		s.log.Error("recoveries", "origin", origin, "err", err)
		http.Error(rw, "witness store failure", http.StatusInternalServerError)
		return
	}
	out := []RecoveryView{}
	for _, r := range st.Recoveries {
		out = append(out, RecoveryView{AdmissionSHA256: hex.EncodeToString(r.AdmissionSHA256[:]), AdmissionAt: r.AdmissionAt,
			FromSize: r.FromSize, FromRoot: r.FromRoot.String(), Size: r.Size, Root: r.Root.String(), AcceptedAt: r.AcceptedAt})
	}
	rw.Header().Set("Content-Type", "application/json")
	json.NewEncoder(rw).Encode(out)
}
