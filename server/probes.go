package server

import (
	"errors"
	"net/http"
	"time"

	"github.com/kvfence/kvfence/kvfence"
)

// ErrNoReceiver means ProbeOptions named no receiver.
var ErrNoReceiver = errors.New("server: probes need a receiver")

// ProbeOptions configures NewProbes.
type ProbeOptions struct {
	// Receiver is the receiver whose readiness /readyz reports.
	Receiver *kvfence.Receiver
	// AnchorStall is how long an anchor write may be in progress before
	// /readyz reports the receiver not ready. Zero means
	// DefaultAnchorStall.
	AnchorStall time.Duration
}

// DefaultAnchorStall is ProbeOptions.AnchorStall's default: far longer than
// an anchor write on a healthy volume, well within serve's write timeout.
const DefaultAnchorStall = 10 * time.Second

// The probes answer in one line of text. A reason names a condition,
// never a value of the receiver's data or an error's text, since the
// probes need no credential.
const (
	probeOK              = "ok\n"
	probeClosed          = "not ready: receiver closed\n"
	probeAnchorUnchecked = "not ready: anchor not checked at open\n"
	probeAnchorFailed    = "not ready: last anchor write failed\n"
	probeAnchorStalled   = "not ready: anchor write stalled\n"
)

// NewProbes returns a handler for the liveness and readiness probes of an
// orchestrator, meant for the plain-HTTP metrics listener, without client
// authentication:
//
//	GET /healthz  200 "ok" while the process serves
//	GET /readyz   200 "ok" when the receiver is open, its anchor was
//	              checked at open, its last anchor write succeeded and
//	              none has been in progress for over AnchorStall;
//	              503 with a one-line reason otherwise
//
// Neither reads the receiver's records or chain.
func NewProbes(opts ProbeOptions) (http.Handler, error) {
	if opts.Receiver == nil {
		return nil, ErrNoReceiver
	}
	stall := opts.AnchorStall
	if stall <= 0 {
		stall = DefaultAnchorStall
	}
	mux := http.NewServeMux()
	for pattern, serve := range probeRoutes(opts.Receiver, stall) {
		mux.HandleFunc(pattern, serve)
	}
	return mux, nil
}

// probeRoutes returns the probes by ServeMux pattern. They are one table
// so that docs/openapi.yaml can be held to what is served.
func probeRoutes(r *kvfence.Receiver, stall time.Duration) map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /healthz": func(w http.ResponseWriter, _ *http.Request) {
			probeAnswer(w, http.StatusOK, probeOK)
		},
		"GET /readyz": func(w http.ResponseWriter, _ *http.Request) {
			rd := r.Readiness()
			switch {
			case !rd.Open:
				probeAnswer(w, http.StatusServiceUnavailable, probeClosed)
			case !rd.AnchorChecked:
				probeAnswer(w, http.StatusServiceUnavailable, probeAnchorUnchecked)
			case rd.AnchorWriteFailed:
				probeAnswer(w, http.StatusServiceUnavailable, probeAnchorFailed)
			case !rd.AnchorWriteSince.IsZero() && time.Since(rd.AnchorWriteSince) > stall:
				probeAnswer(w, http.StatusServiceUnavailable, probeAnchorStalled)
			default:
				probeAnswer(w, http.StatusOK, probeOK)
			}
		},
	}
}

func probeAnswer(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	// A probe's answer is of this moment only.
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
