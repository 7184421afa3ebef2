package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// RouteOther is the route a RequestObserver is told for a request to a
// path the handler does not serve. The path a caller sends is never a
// route: it is the caller's to choose, and a metric label taken from it
// would let any caller create series without bound.
const RouteOther = "other"

// RequestObserver is told about every request a Handler answers, for
// metrics (metrics.Metrics implements it). It is called once the answer
// is written, on the request's goroutine: it must be quick and safe for
// concurrent use.
type RequestObserver interface {
	// ObserveRequest is told the request's route (a path the handler
	// serves, or RouteOther), the HTTP status of its answer, the error
	// code of an answer that is not a result ("" for a result), and how
	// long the handler took.
	ObserveRequest(route string, status int, errCode string, d time.Duration)
}

// statusWriter records the status and error code a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
	code   string
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes a handler's flush on, for a handler that asserts
// http.Flusher rather than using a ResponseController.
func (w *statusWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// routeOf is the route label of path: the path itself when the handler
// serves it, RouteOther otherwise.
func (h *Handler) routeOf(path string) string {
	if _, ok := h.routes[path]; ok || path == api.PathHealthz {
		return path
	}
	return RouteOther
}

// observe reports the request w answered, once it has been.
func (h *Handler) observe(w *statusWriter, r *http.Request, start time.Time) {
	status := w.status
	if status == 0 {
		// Nothing written: net/http answers 200 with an empty body.
		status = http.StatusOK
	}
	h.obs.ObserveRequest(h.routeOf(r.URL.Path), status, w.code, time.Since(start))
}

// setErrorCode tells the observer's writer, if w is one, the error code
// of the answer.
func setErrorCode(w http.ResponseWriter, code string) {
	if sw, ok := w.(*statusWriter); ok {
		sw.code = code
	}
}

// logDecision logs one submit decision, with --log-decisions: who
// submitted, what the envelope named, and what was decided. Never the
// request's bytes, the target's value or the denial's detail, which may
// quote them.
func (h *Handler) logDecision(ctx context.Context, caller string, res kvfence.Result) {
	if !h.logDecisions {
		return
	}
	h.log.LogAttrs(ctx, slog.LevelInfo, "decision",
		slog.String("caller", caller), slog.String("scope", res.Scope), slog.Uint64("epoch", res.Epoch),
		slog.String("grant", res.Grant), slog.String("action", res.Action), slog.String("target", res.Target),
		slog.String("outcome", string(res.Outcome)), slog.String("reason", string(res.Reason)),
		slog.Uint64("audit_seq", res.AuditSeq))
}

// logChange logs one committed administrative change: what changed, who
// changed it (the actor its audit entry records) and attrs, which name the
// scopes, their epochs before and after, and the change's own fields.
func (h *Handler) logChange(ctx context.Context, change, actor string, attrs ...slog.Attr) {
	h.log.LogAttrs(ctx, slog.LevelInfo, "admin change",
		append([]slog.Attr{slog.String("change", change), slog.String("actor", actor)}, attrs...)...)
}

// heldAttrs are the attributes of a hold's log line: the scopes held and
// their epochs before and after, in the same order.
func heldAttrs(res kvfence.HoldResult) []slog.Attr {
	scopes := make([]string, len(res.Scopes))
	before := make([]uint64, len(res.Scopes))
	after := make([]uint64, len(res.Scopes))
	for i, s := range res.Scopes {
		scopes[i], before[i], after[i] = s.Scope, s.PreviousEpoch, s.Epoch
	}
	return []slog.Attr{slog.Any("scopes", scopes), slog.Any("epochs_before", before), slog.Any("epochs_after", after),
		slog.Bool("repeated", res.Repeated), slog.Uint64("audit_seq", res.AuditSeq)}
}
