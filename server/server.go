package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/receiptproof"
)

// DefaultMaxBodySize bounds the JSON body of an administrative request when
// Options.MaxBodySize is zero: room for a target value of
// kvfence.MaxTargetValueSize in base64.
const DefaultMaxBodySize = kvfence.MaxTargetValueSize*4/3 + 64<<10

// Event page sizes for GET /v1/events: a page is sent while a read
// transaction is open, so a page, not the whole chain, bounds how long a
// slow client can hold one.
const (
	DefaultEventsLimit = 1000
	MaxEventsLimit     = 10000
)

// Options configures New.
type Options struct {
	// Receiver is the open receiver the handler serves. Required. The
	// handler never closes it.
	Receiver *kvfence.Receiver
	// Authenticator computes each request's identity from its channel.
	// Required: SPIFFECertificate for mTLS, UnixPeer for a unix socket.
	Authenticator Authenticator
	// Admins are the identities admitted to the administrative endpoints;
	// every other authenticated caller may only submit (403 otherwise).
	Admins []string
	// MaxEnvelopeSize bounds a submitted envelope; a larger body is
	// answered 413 before anything is decided or recorded. Zero means
	// kvfence.DefaultMaxEnvelopeSize. It should not exceed the receiver's
	// own limit, which would then deny the envelope as malformed.
	MaxEnvelopeSize int
	// MaxBodySize bounds an administrative JSON body (413 beyond it). Zero
	// means DefaultMaxBodySize.
	MaxBodySize int
	// MaxBatchItems bounds the envelopes of one POST /v1/submit/batch (413
	// beyond it, nothing decided). Zero means api.MaxBatchItems.
	MaxBatchItems int
	// MaxBatchSize bounds a batch's body (413 beyond it, nothing
	// decided); each envelope in it is still bounded by MaxEnvelopeSize.
	// Zero means api.DefaultMaxBatchSize.
	MaxBatchSize int
	// MaxBatchesInFlight bounds the batch requests decided at once; the
	// others, once their bodies are read, wait for a turn, so that the
	// decisions batches hold (MaxBatchesInFlight times MaxBatchItems) are
	// bounded however many connections and HTTP/2 streams send them. Zero
	// means DefaultMaxBatchesInFlight.
	MaxBatchesInFlight int
	// Logger receives faults, refused callers and one line per committed
	// administrative change. Nil means slog.Default().
	Logger *slog.Logger
	// LogDecisions logs one line per submit decision as well (caller,
	// scope, epoch, grant, action, target, outcome, reason, audit seq;
	// never the request's bytes).
	LogDecisions bool
	// Requests, if set, is told about every request answered, for
	// metrics.
	Requests RequestObserver
}

// Handler serves one receiver's HTTP API (docs/design.md §12). It is safe for
// concurrent use.
type Handler struct {
	r       *kvfence.Receiver
	auth    Authenticator
	admins  []string
	maxEnv  int
	maxBody int
	// maxBatchItems and maxBatchSize are Options.MaxBatchItems and
	// MaxBatchSize, defaults applied.
	maxBatchItems int
	maxBatchSize  int
	// batchTurns holds a token for each batch request being read or
	// decided (Options.MaxBatchesInFlight).
	batchTurns chan struct{}
	log        *slog.Logger
	routes     map[string]route
	// obs and logDecisions are Options.Requests and LogDecisions.
	obs          RequestObserver
	logDecisions bool
}

// route is one endpoint: its method, whether it is administrative, and
// what serves it once the caller is known.
type route struct {
	method string
	admin  bool
	serve  func(w http.ResponseWriter, r *http.Request, caller string) error
}

// New returns a handler for opts.
func New(opts Options) (*Handler, error) {
	if opts.Receiver == nil {
		return nil, errors.New("server: Options.Receiver is required")
	}
	if opts.Authenticator == nil {
		return nil, errors.New("server: Options.Authenticator is required")
	}
	h := &Handler{r: opts.Receiver, auth: opts.Authenticator, admins: slices.Clone(opts.Admins),
		maxEnv: opts.MaxEnvelopeSize, maxBody: opts.MaxBodySize, log: opts.Logger,
		obs: opts.Requests, logDecisions: opts.LogDecisions,
		maxBatchItems: opts.MaxBatchItems, maxBatchSize: opts.MaxBatchSize}
	if h.maxBatchItems <= 0 {
		h.maxBatchItems = api.MaxBatchItems
	}
	if h.maxBatchSize <= 0 {
		h.maxBatchSize = api.DefaultMaxBatchSize
	}
	turns := opts.MaxBatchesInFlight
	if turns <= 0 {
		turns = DefaultMaxBatchesInFlight
	}
	h.batchTurns = make(chan struct{}, turns)
	if h.maxEnv <= 0 {
		h.maxEnv = kvfence.DefaultMaxEnvelopeSize
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodySize
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.routes = map[string]route{
		api.PathSubmit:   {http.MethodPost, false, h.submit},
		api.PathScopes:   {http.MethodPost, true, h.createScope},
		api.PathTargets:  {http.MethodPost, true, h.createTarget},
		api.PathActivate: {http.MethodPost, true, h.activate},
		api.PathHold:     {http.MethodPost, true, h.hold},
		api.PathStatus:   {http.MethodGet, true, h.status},
		api.PathTarget:   {http.MethodGet, true, h.target},
		api.PathReceipt:  {http.MethodGet, true, h.receipt},
		api.PathEvents:   {http.MethodGet, true, h.events},
	}
	h.routes[api.PathGrant] = route{http.MethodGet, true, h.grant}
	h.routes[api.PathTargetList] = route{http.MethodGet, true, h.targetList}
	h.routes[api.PathReceipts] = route{http.MethodGet, true, h.receipts}
	h.routes[api.PathVerifyChain] = route{http.MethodGet, true, h.verifyChain}
	h.routes[api.PathBackup] = route{http.MethodGet, true, h.backup}
	h.routes[api.PathGrantExtend] = route{http.MethodPost, true, h.extendGrant}
	h.routes[api.PathSubmitBatch] = route{http.MethodPost, false, h.submitBatch}
	return h, nil
}

// httpError is an answer other than a result: a status, a stable code and
// a message for the caller.
type httpError struct {
	status  int
	code    string
	message string
}

func (e *httpError) Error() string { return e.message }

func errorf(status int, code, format string, args ...any) error {
	return &httpError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// ServeHTTP authenticates the caller once, checks that it may use the
// endpoint, and serves it. A request refused because its connection is no
// longer trusted (ErrConnectionRevoked) is answered 401 and its
// connection closed. A panic is answered 500 and logged: it never
// becomes a decision.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.obs != nil {
		// Deferred first, so that it runs last: after a panic's answer.
		sw := &statusWriter{ResponseWriter: w}
		defer h.observe(sw, r, time.Now())
		w = sw
	}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.log.Error("panic while serving a request", "path", r.URL.Path, "panic", p)
			h.writeError(w, r, "", errorf(http.StatusInternalServerError, api.CodeInternal, "internal error"))
		}
	}()
	caller, err := h.auth.Authenticate(r)
	if err != nil {
		h.refuseCaller(w, r, err)
		return
	}
	// Even /healthz answers only a caller the channel identifies, so that
	// the admin socket tells a peer it does not admit nothing.
	if r.URL.Path == api.PathHealthz {
		h.healthz(w, r)
		return
	}
	rt, ok := h.routes[r.URL.Path]
	switch {
	case !ok:
		err = errorf(http.StatusNotFound, api.CodeNotFound, "no endpoint %s", r.URL.Path)
	case r.Method != rt.method:
		w.Header().Set("Allow", rt.method)
		err = errorf(http.StatusMethodNotAllowed, api.CodeMethod, "%s takes %s", r.URL.Path, rt.method)
	case rt.admin && !slices.Contains(h.admins, caller):
		h.log.Warn("refused a caller that is not an administrator", "path", r.URL.Path, "caller", caller)
		err = errorf(http.StatusForbidden, api.CodeForbidden, "%s is not an administrator of this receiver", caller)
	default:
		err = rt.serve(w, r, caller)
	}
	if errors.Is(err, ErrConnectionRevoked) {
		h.refuseCaller(w, r, err)
		return
	}
	if err != nil {
		h.writeError(w, r, caller, err)
	}
}

// refuseCaller answers a request whose caller the channel does not
// identify, or no longer does; a connection no longer trusted
// (ErrConnectionRevoked) is closed after the answer.
func (h *Handler) refuseCaller(w http.ResponseWriter, r *http.Request, err error) {
	revoked := errors.Is(err, ErrConnectionRevoked)
	if revoked && r.ProtoMajor < 2 {
		w.Header().Set("Connection", "close")
	}
	h.writeError(w, r, "", h.authError(r, err))
	if revoked {
		closeConn(w, r)
	}
}

// authError maps an Authenticator's error to its answer.
func (h *Handler) authError(r *http.Request, err error) error {
	switch {
	case errors.Is(err, ErrForbidden):
		h.log.Warn("refused a caller", "path", r.URL.Path, "error", err)
		return errorf(http.StatusForbidden, api.CodeForbidden, "%v", err)
	case errors.Is(err, ErrUnauthenticated):
		h.log.Warn("refused an unauthenticated caller", "path", r.URL.Path, "error", err)
		return errorf(http.StatusUnauthorized, api.CodeUnauthenticated, "%v", err)
	}
	return fmt.Errorf("authenticating the caller: %w", err)
}

// writeError answers err.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, caller string, err error) {
	he := h.errorAnswer(r, caller, err)
	setErrorCode(w, he.code)
	writeJSON(w, he.status, api.Error{Error: api.ErrorBody{Code: he.code, Message: he.message}})
}

// errorAnswer is the answer to err. A receiver's sentinel keeps its code;
// any other error is a fault: logged in full, answered 500 without its
// detail.
func (h *Handler) errorAnswer(r *http.Request, caller string, err error) *httpError {
	var he *httpError
	switch s, ok := api.SentinelOf(err); {
	case errors.As(err, &he):
	case ok:
		he = &httpError{status: s.Status, code: s.Code, message: err.Error()}
		if s.Status >= 500 {
			h.log.Error("receiver error", "path", r.URL.Path, "caller", caller, "error", err)
		}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		he = &httpError{status: http.StatusServiceUnavailable, code: api.CodeCanceled, message: err.Error()}
	case kvfence.IsIntegrityError(err):
		h.log.Error("integrity error", "path", r.URL.Path, "caller", caller, "error", err)
		he = &httpError{status: http.StatusInternalServerError, code: api.CodeIntegrity, message: err.Error()}
	default:
		h.log.Error("fault", "path", r.URL.Path, "caller", caller, "error", err)
		he = &httpError{status: http.StatusInternalServerError, code: api.CodeInternal, message: "internal error; see the server's log"}
	}
	return he
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only a programming error gets here: every body is plain data.
		status = http.StatusInternalServerError
		b.Reset()
		b.WriteString(`{"error":{"code":"internal","message":"encoding the response"}}` + "\n")
	}
	w.Header().Set("Content-Type", api.ContentJSON)
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// healthz answers 200 while the receiver is open: New takes an open
// receiver, which checked its anchor when it opened.
func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	if !slices.Contains(healthzMethods, r.Method) {
		w.Header().Set("Allow", strings.Join(healthzMethods, ", "))
		h.writeError(w, r, "", errorf(http.StatusMethodNotAllowed, api.CodeMethod, "/healthz takes GET"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "receiver": h.r.ID(), "audit_seq": h.r.Head().Seq})
}

// healthzMethods are the methods /healthz takes, in the order its Allow
// header names them.
var healthzMethods = []string{http.MethodGet, http.MethodHead}

// checkMediaType refuses a body of another media type than want.
func checkMediaType(r *http.Request, want string) error {
	// The exact media type, as the client sends it, needs no parsing (and
	// ParseMediaType allocates its parameter map on every call).
	if v := r.Header["Content-Type"]; len(v) == 1 && v[0] == want {
		return nil
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != want {
		return errorf(http.StatusUnsupportedMediaType, api.CodeMediaType, "the body must be %s", want)
	}
	return nil
}

// readBody reads the whole body with readBodyBytes, and then checks the
// connection's client certificate again (recheckChain): a body may arrive
// long after the headers were authenticated, and after a reload.
func readBody(r *http.Request, limit int) ([]byte, error) {
	b, err := readBodyBytes(r, limit)
	if err != nil {
		return nil, err
	}
	if err := recheckChain(r); err != nil {
		return nil, err
	}
	return b, nil
}

// readBodyBytes reads the whole body, refusing one over limit with 413
// before anything else looks at it.
func readBodyBytes(r *http.Request, limit int) ([]byte, error) {
	if r.ContentLength > int64(limit) {
		return nil, errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "the body is %d bytes, over the %d-byte limit", r.ContentLength, limit)
	}
	if r.ContentLength >= 0 {
		// A declared length is exactly what net/http lets the handler
		// read (a shorter body is an error), so one allocation of that
		// size replaces ReadAll's growing buffer.
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, errorf(http.StatusBadRequest, api.CodeBadRequest, "reading the body: %v", err)
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	if err != nil {
		return nil, errorf(http.StatusBadRequest, api.CodeBadRequest, "reading the body: %v", err)
	}
	if len(b) > limit {
		return nil, errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "the body is over the %d-byte limit", limit)
	}
	return b, nil
}

// decodeJSON reads a JSON body into v strictly (api.DecodeStrict): one
// object, every member named exactly, once, and known, nothing after it.
// encoding/json alone would match {"Scopes":...} to scopes and let the
// last of two members win, so that what the receiver acts on could differ
// from what the caller, a proxy or a log read in the same bytes.
func (h *Handler) decodeJSON(r *http.Request, v any) error {
	if err := checkMediaType(r, api.ContentJSON); err != nil {
		return err
	}
	b, err := readBody(r, h.maxBody)
	if err != nil {
		return err
	}
	if err := api.DecodeStrict(b, v); err != nil {
		return errorf(http.StatusBadRequest, api.CodeBadRequest, "%v", err)
	}
	return nil
}

// query returns the request's query values, refusing keys other than
// allowed and repeated keys.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	if r.ContentLength > 0 {
		return nil, errorf(http.StatusBadRequest, api.CodeBadRequest, "%s takes no body", r.URL.Path)
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, api.CodeBadRequest, "bad query: %v", err)
	}
	for k, v := range q {
		if !slices.Contains(allowed, k) {
			return nil, errorf(http.StatusBadRequest, api.CodeBadRequest, "unknown query parameter %q", k)
		}
		if len(v) != 1 {
			return nil, errorf(http.StatusBadRequest, api.CodeBadRequest, "query parameter %q given %d times", k, len(v))
		}
	}
	return q, nil
}

// submit decides an envelope as the authenticated caller: 200 for applied
// and already_applied, 403 for denied, the decision in both.
func (h *Handler) submit(w http.ResponseWriter, r *http.Request, caller string) error {
	if err := checkMediaType(r, api.ContentCBOR); err != nil {
		return err
	}
	env, err := readBody(r, h.maxEnv)
	if err != nil {
		return err
	}
	res, err := h.r.Submit(r.Context(), caller, env)
	if err != nil {
		return err
	}
	h.logDecision(r.Context(), caller, res)
	status := http.StatusOK
	if res.Outcome == kvfence.Denied {
		status = http.StatusForbidden
	}
	// The answer is encoded by hand into a pooled buffer: this runs once
	// per fenced write, and encoding/json's reflection and buffers were a
	// measurable share of what serving a submit costs. The bytes are the
	// same (api's tests hold the two encoders to each other).
	bp := answerPool.Get().(*[]byte)
	out := api.SubmitOf(res)
	*bp = out.AppendJSON((*bp)[:0])
	// Assigning the canonical key with a shared value skips Header.Set's
	// canonicalisation and allocation; net/http only reads it. Without an
	// explicit Content-Length, net/http sets it from the one buffered
	// write when the handler returns.
	w.Header()["Content-Type"] = contentTypeJSON
	w.WriteHeader(status)
	w.Write(*bp)
	if cap(*bp) <= maxPooledAnswer {
		answerPool.Put(bp)
	}
	return nil
}

// contentTypeJSON is the Content-Type header value of a JSON answer,
// shared by every submit answer and never modified.
var contentTypeJSON = []string{api.ContentJSON}

// answerPool holds buffers for submit answers; maxPooledAnswer keeps an
// answer with an unusually long detail from pinning a large buffer.
var answerPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledAnswer = 4 << 10

// afterCommit is the answer when reading back what a committed change
// made fails: the change took effect, so the caller must not be told that
// nothing happened (a fault, or the read's own error such as "closed"); it
// is told the outcome is unknown, and checks the state before repeating.
// The read's error is logged, not answered, as a fault's would be.
func (h *Handler) afterCommit(r *http.Request, caller, what string, err error) error {
	h.log.Error("reading back a committed change", "path", r.URL.Path, "caller", caller, "error", err)
	return fmt.Errorf("%w: %s, and reading it back for the answer failed; see the server's log", kvfence.ErrOutcomeUnknown, what)
}

func (h *Handler) createScope(w http.ResponseWriter, r *http.Request, caller string) error {
	var req api.ScopeCreateRequest
	if err := h.decodeJSON(r, &req); err != nil {
		return err
	}
	var opts kvfence.ScopeOptions
	if req.MaxGrantTTL != "" {
		d, err := time.ParseDuration(req.MaxGrantTTL)
		if err != nil || d <= 0 {
			return errorf(http.StatusBadRequest, api.CodeBadRequest, "max_grant_ttl %q is not a positive duration", req.MaxGrantTTL)
		}
		opts.MaxGrantTTL = d
	}
	if _, err := h.r.Admin().As(caller).CreateScopeWith(r.Context(), req.Scope, opts); err != nil {
		return err
	}
	st, err := h.r.Status(req.Scope)
	if err != nil {
		h.logChange(r.Context(), "create_scope", caller, slog.String("scope", req.Scope))
		return h.afterCommit(r, caller, "the scope was created", err)
	}
	h.logChange(r.Context(), "create_scope", caller, slog.String("scope", st.Scope), slog.Uint64("epoch", st.Epoch),
		slog.String("mode", string(st.Mode)), slog.Duration("max_grant_ttl", st.MaxGrantTTL))
	writeJSON(w, http.StatusOK, api.ScopeCreate{Scope: st.Scope, Epoch: st.Epoch, Mode: string(st.Mode),
		CreatedAt: api.Time(st.CreatedAt), MaxGrantTTL: st.MaxGrantTTL.String()})
	return nil
}

func (h *Handler) createTarget(w http.ResponseWriter, r *http.Request, caller string) error {
	var req api.TargetCreateRequest
	if err := h.decodeJSON(r, &req); err != nil {
		return err
	}
	spec, err := targetSpecOf(&req)
	if err != nil {
		return err
	}
	created, err := h.r.Admin().As(caller).CreateTargetSpec(r.Context(), spec)
	if err != nil {
		return err
	}
	t, err := h.r.Target(req.Target)
	if err != nil {
		h.logChange(r.Context(), "create_target", caller, slog.String("scope", req.Scope), slog.String("target", req.Target))
		return h.afterCommit(r, caller, "the target was created", err)
	}
	h.logChange(r.Context(), "create_target", caller, slog.String("scope", t.Scope), slog.String("target", t.Name),
		slog.Uint64("revision", t.Revision), slog.String("kind", string(t.Kind)))
	// The digest is of the value the creation stored: for a kubernetes
	// target none (the object holds it), as the admin returns it.
	sum := sha256.Sum256(created.Value)
	out := api.TargetCreate{Target: t.Name, Scope: t.Scope, Revision: t.Revision,
		ValueSHA256: hex.EncodeToString(sum[:]), Kind: string(t.Kind), TargetKey: t.Key, UID: t.UID}
	if t.Object != nil {
		out.Object = t.Object.String()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// targetSpecOf checks a target creation's members against its kind and
// returns the admin's spec. A func target is an embedder's, whose effect
// is code in its process: the served API never creates one.
func targetSpecOf(req *api.TargetCreateRequest) (kvfence.TargetSpec, error) {
	spec := kvfence.TargetSpec{Scope: req.Scope, Name: req.Target, Value: req.ValueB64, Kind: kvfence.TargetKind(req.Kind)}
	if req.TargetKey != "" && spec.Kind != kvfence.TargetEtcd {
		return spec, errorf(http.StatusBadRequest, api.CodeBadRequest, "target_key is for kind %s only", kvfence.TargetEtcd)
	}
	if req.Object != "" && spec.Kind != kvfence.TargetKubernetes {
		return spec, errorf(http.StatusBadRequest, api.CodeBadRequest, "object is for kind %s only", kvfence.TargetKubernetes)
	}
	switch spec.Kind {
	case "", kvfence.TargetInternal:
		spec.Kind = kvfence.TargetInternal
	case kvfence.TargetEtcd:
		if req.TargetKey == "" {
			return spec, errorf(http.StatusBadRequest, api.CodeBadRequest, "kind %s needs target_key, the application's etcd key", kvfence.TargetEtcd)
		}
		spec.Key = req.TargetKey
	case kvfence.TargetKubernetes:
		if req.ValueB64 != nil {
			return spec, errorf(http.StatusBadRequest, api.CodeBadRequest, "a target of kind %s takes no value_b64: the object holds it", kvfence.TargetKubernetes)
		}
		if req.Object == "" {
			return spec, errorf(http.StatusBadRequest, api.CodeBadRequest, "kind %s needs object, RESOURCE/NAMESPACE/NAME", kvfence.TargetKubernetes)
		}
		obj, err := kvfence.ParseObject(req.Object)
		if err != nil {
			return spec, err
		}
		spec.Object = &obj
		return spec, nil
	case kvfence.TargetFunc:
		return spec, fmt.Errorf("%w: a target of kind %s runs an embedder's effect in its own process; the served API creates %s, %s and %s targets",
			kvfence.ErrKindUnsupported, kvfence.TargetFunc, kvfence.TargetInternal, kvfence.TargetEtcd, kvfence.TargetKubernetes)
	default:
		return spec, errorf(http.StatusBadRequest, api.CodeBadRequest, "kind %q: one of %s, %s or %s", clipText(req.Kind, 32),
			kvfence.TargetInternal, kvfence.TargetEtcd, kvfence.TargetKubernetes)
	}
	if req.ValueB64 == nil {
		return spec, errorf(http.StatusBadRequest, api.CodeBadRequest, "value_b64 is required")
	}
	return spec, nil
}

func (h *Handler) activate(w http.ResponseWriter, r *http.Request, caller string) error {
	var req api.ActivateRequest
	if err := h.decodeJSON(r, &req); err != nil {
		return err
	}
	var ttl time.Duration
	if req.TTL != "" {
		var err error
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 {
			return errorf(http.StatusBadRequest, api.CodeBadRequest, "ttl %q is not a positive duration", req.TTL)
		}
	}
	g, err := h.r.Admin().As(caller).Activate(r.Context(), kvfence.ActivateRequest{Scope: req.Scope,
		Executor: req.Executor, Claim: req.Claim, Request: req.RequestB64, Epoch: req.Epoch, TTL: ttl,
		Decision: req.Decision})
	if err != nil {
		return err
	}
	// Activation opens a held scope at its epoch, never moving it.
	h.logChange(r.Context(), "activate", caller, slog.String("scope", g.Scope), slog.Uint64("epoch_before", g.Epoch),
		slog.Uint64("epoch_after", g.Epoch), slog.String("grant", g.ID), slog.String("executor", g.Executor),
		slog.String("claim", g.Claim), slog.String("action", g.Action), slog.Time("not_after", g.NotAfter),
		slog.String("decision", g.Decision), slog.Uint64("audit_seq", g.AuditSeq))
	writeJSON(w, http.StatusOK, api.ActivateOf(g))
	return nil
}

// extendGrant moves an active grant's end later (Admin.ExtendGrant).
func (h *Handler) extendGrant(w http.ResponseWriter, r *http.Request, caller string) error {
	var req api.GrantExtendRequest
	if err := h.decodeJSON(r, &req); err != nil {
		return err
	}
	ttl, err := time.ParseDuration(req.TTL)
	if err != nil || ttl <= 0 {
		return errorf(http.StatusBadRequest, api.CodeBadRequest, "ttl %q is not a positive duration", req.TTL)
	}
	g, err := h.r.Admin().As(caller).ExtendGrant(r.Context(), kvfence.ExtendRequest{Grant: req.Grant, TTL: ttl})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.GrantExtendOf(g))
	return nil
}

func (h *Handler) hold(w http.ResponseWriter, r *http.Request, caller string) error {
	var req api.HoldRequest
	if err := h.decodeJSON(r, &req); err != nil {
		return err
	}
	if req.All {
		if len(req.Scopes) != 0 {
			return errorf(http.StatusBadRequest, api.CodeBadRequest, "all and scopes do not go together")
		}
		// A hold of every open scope names no scope to be idempotent on or
		// to compare an epoch of; taking them and doing without would
		// leave the caller believing the hold was conditional.
		if req.HoldID != "" || req.ExpectEpoch != 0 {
			return errorf(http.StatusBadRequest, api.CodeBadRequest, "hold_id and expect_epoch do not go with all")
		}
		res, err := h.r.Admin().As(caller).HoldAll(r.Context(), req.Reason)
		if err != nil {
			return err
		}
		h.logChange(r.Context(), "hold_all", caller, append(heldAttrs(res.HoldResult),
			slog.Any("already_held", res.AlreadyHeld), slog.String("reason", req.Reason))...)
		writeJSON(w, http.StatusOK, api.HoldAllOf(res))
		return nil
	}
	res, err := h.r.Admin().As(caller).Hold(r.Context(), kvfence.HoldRequest{Scopes: req.Scopes, Reason: req.Reason,
		ID: req.HoldID, ExpectEpoch: req.ExpectEpoch})
	if err != nil {
		return err
	}
	h.logChange(r.Context(), "hold", caller, append(heldAttrs(res),
		slog.String("reason", req.Reason), slog.String("hold_id", req.HoldID))...)
	writeJSON(w, http.StatusOK, api.HoldOf(res))
	return nil
}

func (h *Handler) grant(w http.ResponseWriter, r *http.Request, _ string) error {
	q, err := query(r, "id")
	if err != nil {
		return err
	}
	if !q.Has("id") {
		return errorf(http.StatusBadRequest, api.CodeBadRequest, "id is required")
	}
	g, err := h.r.Grant(q.Get("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.GrantOf(g, g.Expired(h.r.Now())))
	return nil
}

func (h *Handler) targetList(w http.ResponseWriter, r *http.Request, _ string) error {
	q, err := query(r, "scope")
	if err != nil {
		return err
	}
	if q.Has("scope") && q.Get("scope") == "" {
		return errorf(http.StatusBadRequest, api.CodeBadRequest, "scope is empty")
	}
	ts, err := h.r.Targets(q.Get("scope"))
	if err != nil {
		return err
	}
	out := api.TargetList{Targets: []api.Target{}}
	for _, t := range ts {
		out.Targets = append(out.Targets, targetOf(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request, _ string) error {
	q, err := query(r, "scope")
	if err != nil {
		return err
	}
	// The head is read first: the scopes read after it are at least as new.
	out := api.Status{Scopes: []api.ScopeStatus{}, AuditSeq: h.r.Head().Seq, AnchorChecked: true}
	var scopes []kvfence.ScopeStatus
	if q.Has("scope") {
		st, err := h.r.Status(q.Get("scope"))
		if err != nil {
			return err
		}
		scopes = []kvfence.ScopeStatus{st}
	} else if scopes, err = h.r.Scopes(); err != nil {
		return err
	}
	for _, st := range scopes {
		out.Scopes = append(out.Scopes, api.ScopeStatusOf(st))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) target(w http.ResponseWriter, r *http.Request, _ string) error {
	q, err := query(r, "target")
	if err != nil {
		return err
	}
	if !q.Has("target") {
		return errorf(http.StatusBadRequest, api.CodeBadRequest, "target is required")
	}
	lt, err := h.r.ObserveTarget(r.Context(), q.Get("target"))
	if err != nil {
		return err
	}
	out := targetOf(lt.Target)
	if lt.Live != nil {
		out.Live = &api.LiveObject{ResourceVersion: lt.Live.Version, UID: lt.Live.UID, LastDispatch: lt.Live.Stamp.Receipt}
	}
	if lt.LiveErr != nil {
		out.LiveError = clipText(lt.LiveErr.Error(), 512)
		if se, ok := api.SentinelOf(lt.LiveErr); ok {
			out.LiveErrorCode = se.Code
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// targetOf is a target's JSON form.
func targetOf(t kvfence.Target) api.Target {
	out := api.Target{Target: t.Name, Scope: t.Scope, Revision: t.Revision, ValueB64: t.Value,
		Kind: string(t.Kind), Effect: t.Effect, TargetKey: t.Key, Writes: t.Writes, UID: t.UID}
	if out.Kind == "" {
		out.Kind = string(kvfence.TargetInternal)
	}
	if t.Object != nil {
		out.Object = t.Object.String()
	}
	if out.ValueB64 == nil {
		out.ValueB64 = []byte{}
	}
	if utf8.Valid(t.Value) {
		s := string(t.Value)
		out.Value = &s
	}
	return out
}

func (h *Handler) receipt(w http.ResponseWriter, r *http.Request, _ string) error {
	q, err := query(r, "scope", "action", "proof")
	if err != nil {
		return err
	}
	if !q.Has("scope") || !q.Has("action") {
		return errorf(http.StatusBadRequest, api.CodeBadRequest, "scope and action are required")
	}
	if q.Has("proof") {
		if q.Get("proof") != "1" {
			return errorf(http.StatusBadRequest, api.CodeBadRequest, "proof is 1 or absent")
		}
		// The receipt with its proof (receiptproof): the served receiver
		// holds the key that signs the checkpoint note.
		rp, err := h.r.ReceiptProof(q.Get("scope"), q.Get("action"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, receiptproof.Proof{Receipt: api.ReceiptOf(rp.Receipt), Entry: rp.Entry,
			Checkpoint: rp.Checkpoint, Inclusion: rp.Proof})
		return nil
	}
	rc, err := h.r.Receipt(q.Get("scope"), q.Get("action"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ReceiptOf(rc))
	return nil
}

// receipts answers the receipts of a scope applied under a claim's grants.
func (h *Handler) receipts(w http.ResponseWriter, r *http.Request, _ string) error {
	q, err := query(r, "scope", "claim")
	if err != nil {
		return err
	}
	for _, k := range []string{"scope", "claim"} {
		if q.Get(k) == "" {
			return errorf(http.StatusBadRequest, api.CodeBadRequest, "%s is required and not empty", k)
		}
	}
	rcs, err := h.r.ReceiptsByClaim(q.Get("scope"), q.Get("claim"))
	if err != nil {
		return err
	}
	out := api.Receipts{Receipts: []api.Receipt{}}
	for _, rc := range rcs {
		out.Receipts = append(out.Receipts, api.ReceiptOf(rc))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// events answers one page of the chain from since: at most limit entries.
// A caller reads on from the last seq + 1 until a page comes back short.
func (h *Handler) events(w http.ResponseWriter, r *http.Request, _ string) error {
	q, err := query(r, "since", "limit")
	if err != nil {
		return err
	}
	var since uint64
	limit := DefaultEventsLimit
	if q.Has("since") {
		if since, err = strconv.ParseUint(q.Get("since"), 10, 64); err != nil {
			return errorf(http.StatusBadRequest, api.CodeBadRequest, "since %q is not a seq", q.Get("since"))
		}
	}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > MaxEventsLimit {
			return errorf(http.StatusBadRequest, api.CodeBadRequest, "limit must be 1 to %d", MaxEventsLimit)
		}
		limit = n
	}
	out := api.Events{Events: []audit.EntryJSON{}}
	if err := h.r.Events(since, func(ev kvfence.Event) bool {
		out.Events = append(out.Events, ev.Entry.JSON(ev.Hash))
		return len(out.Events) < limit
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// clipText is s as valid UTF-8 of at most n bytes, for a message that
// repeats what a caller sent or a remote system said.
func clipText(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
