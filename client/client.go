// Package client is the Go client of a served kvfence receiver (docs/design.md
// §12): workers submit envelopes with it and operators administer the
// receiver with it, over mTLS or the local admin socket. Calls return
// kvfence's own types and, where an error corresponds to one of kvfence's
// sentinels, an error that errors.Is matches to it (ErrStorageBusy for 503
// storage_busy, ErrUnknownScope, ErrNotAcknowledged, ...), so that code
// written against an embedded receiver reads the same against a served one.
//
// The methods that kvfence.Admin or kvfence.Receiver share with Client take
// the same arguments (the client's first is a context; the embedded
// Submit's caller is the channel's identity here) and return the same
// results: CreateScope, CreateScopeWith, CreateTarget, ExtendGrant, Hold,
// HoldAll, Submit, Target, Targets, Receipt, ReceiptsByClaim, Events. Three
// return more, because a served caller cannot read what the receiver
// knows: Activate returns an Activation, the Grant with the request bytes
// it binds, for the worker's Assignment; Grant also says whether the grant
// expired by the receiver's clock; Status answers one scope or all, with
// the audit seq read before them (Receiver.Status and Receiver.Scopes).
//
// The client never tells the receiver who it is: the receiver takes the
// identity from the channel, the client certificate's SPIFFE ID or the
// socket's peer credentials. Nor does it take the receiver's word for who
// it is: over a unix socket it sends nothing until the listening process's
// uid and the socket file's owner are ones it trusts (Options.ServerUIDs).
//
// A call that may or may not have taken effect (the receiver's store lost
// its commit's answer, or the connection failed after a change was sent)
// is ErrOutcomeUnknown, never an error that reads "nothing happened";
// repeating the same envelope is safe.
//
// A worker is handed an Assignment (what Activate returned, with the
// request bytes), and submits it with SubmitAssignment, or builds the
// envelope with Assignment.Envelope: it never copies the scope, epoch,
// grant, executor and claim by hand.
package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/receiptproof"
)

// Client talks to one served receiver. It keeps connections open between
// calls and is safe for concurrent use.
type Client struct {
	base string
	// tr sends each request itself rather than through an http.Client:
	// the receiver never redirects, and following a redirect would re-send
	// an envelope somewhere the caller did not name, so the Client's
	// redirect machinery (which also copied every request's headers) has
	// nothing to do. A 3xx answer is ErrProtocol.
	tr *http.Transport
	// submitURL is base's submit endpoint, parsed once: a submit runs
	// once per fenced write, and parsing its URL every time was a share
	// of what the client spent on it. It is never modified.
	submitURL *url.URL
	// batch coalesces concurrent Submits; nil with
	// Options.DisableBatching.
	batch *batcher
	// noBatch is set once the receiver answered a batch 404: it predates
	// the endpoint, and every Submit then goes alone.
	noBatch atomic.Bool
}

// Options configures NewWith.
type Options struct {
	// TLS carries the client certificate and the CA that issued the
	// receiver's certificate, for an https receiver; it is ignored for a
	// unix socket.
	TLS *tls.Config
	// ServerUIDs are the uids trusted to serve a unix socket: before any
	// request is sent on a new connection, the uid of the process that
	// listens on it (its peer credentials) and the uid that owns the socket
	// file must both be one of them, or the call fails with
	// ErrUntrustedServer. Empty means the caller's own uid and root. It is
	// ignored for an https receiver, which its certificate identifies.
	ServerUIDs []uint32
	// DisableBatching sends every Submit in a request of its own, to
	// POST /v1/submit, even while others are waiting: for a receiver
	// behind something that must see each envelope in its own request.
	DisableBatching bool
}

// New returns a client for the receiver at rawURL: "https://HOST:PORT",
// with tlsConfig carrying the client certificate and the CA that issued
// the receiver's certificate, or "unix:///PATH" for the local admin socket
// (tlsConfig is then ignored), served by the caller's own uid or root. Plain
// http is refused: the receiver takes the caller's identity from the
// channel, and plain TCP carries none.
func New(rawURL string, tlsConfig *tls.Config) (*Client, error) {
	return NewWith(rawURL, Options{TLS: tlsConfig})
}

// NewWith is New with options.
func NewWith(rawURL string, opts Options) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	tr := &http.Transport{
		// Workers submit concurrently; each keeps its connection.
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// The receiver never compresses its answers: asking for gzip
		// would only add a header for it to read on every call.
		DisableCompression: true,
	}
	c := &Client{tr: tr}
	switch u.Scheme {
	case "https":
		if opts.TLS == nil {
			return nil, errors.New("client: an https receiver needs a TLS configuration with a client certificate")
		}
		if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, fmt.Errorf("client: %q: want https://HOST:PORT", rawURL)
		}
		tr.TLSClientConfig = opts.TLS.Clone()
		c.base = "https://" + u.Host
	case "unix":
		if u.Host != "" || u.Path == "" {
			return nil, fmt.Errorf("client: %q: want unix:///PATH", rawURL)
		}
		path := u.Path
		uids := slices.Clone(opts.ServerUIDs)
		if len(uids) == 0 {
			uids = []uint32{uint32(os.Getuid()), 0}
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialUnix(ctx, path, uids)
		}
		// The host is a placeholder: every connection goes to the socket.
		c.base = "http://kvfence-admin"
	default:
		return nil, fmt.Errorf("client: %q: the scheme must be https or unix", rawURL)
	}
	if c.submitURL, err = url.Parse(c.base + api.PathSubmit); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if !opts.DisableBatching {
		c.batch = newBatcher()
	}
	return c, nil
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// maxAnswer bounds an answer's body: the largest is a page of events.
const maxAnswer = 64 << 20

// call sends one request and decodes a 2xx answer into out. An error
// answer becomes an *Error; for submit, okStatus lists the statuses whose
// body is a result (403 is a denial there).
func (c *Client) call(ctx context.Context, method, path, ctype string, body []byte, out any, okStatus ...int) error {
	_, err := c.callStatus(ctx, method, path, ctype, body, out, okStatus...)
	return err
}

// callStatus is call that also returns the status of an answer decoded
// into out.
func (c *Client) callStatus(ctx context.Context, method, path, ctype string, body []byte, out any, okStatus ...int) (int, error) {
	status, raw, err := c.roundTrip(ctx, method, path, ctype, body)
	if err != nil {
		return 0, err
	}
	ok := status == http.StatusOK
	for _, s := range okStatus {
		ok = ok || status == s
	}
	if !ok {
		return 0, answerError(method, path, status, raw)
	}
	var probe struct {
		Error *api.ErrorBody `json:"error"`
	}
	// In valid JSON the bytes "error" with both quotes occur only as
	// a key or as that exact string value (inside a longer string the
	// quotes are escaped), so an answer without them carries no error
	// object and is not decoded twice.
	if bytes.Contains(raw, errorKey) && api.DecodeAnswer(raw, &probe) == nil && probe.Error != nil {
		return 0, errorOf(status, *probe.Error)
	}
	// A submit answer in the receiver's own canonical form is read
	// without reflection; any other form goes to encoding/json.
	if sub, isSubmit := out.(*api.Submit); isSubmit {
		if v, ok := api.ParseSubmitJSON(raw); ok {
			*sub = v
			return status, nil
		}
	}
	// Strictly, but for members a newer receiver may add: a member
	// given twice, or in another case, is read one way here and
	// another way by encoding/json, a proxy or a log.
	if err := api.DecodeAnswer(raw, out); err != nil {
		return 0, fmt.Errorf("%w: %s %s: %v", ErrProtocol, method, path, err)
	}
	return status, nil
}

// roundTrip sends one request and returns the answer's status and body.
// Its errors say whether a change may have been applied.
func (c *Client) roundTrip(ctx context.Context, method, path, ctype string, body []byte) (int, []byte, error) {
	// A change whose request was written and whose answer was then lost
	// may have been applied: the receiver decides a request it has read
	// whether or not its answer gets back. Only a change that was never
	// written (no connection, a refused server) failed with nothing done.
	// The trace goes into the context the request is made with, so that
	// the request is not copied again to carry it.
	change := method != http.MethodGet && method != http.MethodHead
	var wrote *wroteTrace
	if change {
		wrote = newWroteTrace()
		ctx = httptrace.WithClientTrace(ctx, &wrote.trace)
	}
	req, err := c.newRequest(ctx, method, path, body)
	if err != nil {
		return 0, nil, fmt.Errorf("client: %w", err)
	}
	// The headers are one of a few shared, never-modified maps instead of
	// a map filled per request: a RoundTripper only reads them, and on a
	// submit the per-request map was a good part of the client's garbage.
	switch ctype {
	case api.ContentCBOR:
		req.Header = cborHeader
	case api.ContentJSON:
		req.Header = jsonHeader
	case "":
		req.Header = acceptHeader
	default:
		req.Header = http.Header{}
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Accept", api.ContentJSON)
	}
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		if change && wrote.wrote.Load() && !errors.Is(err, ErrUntrustedServer) {
			return 0, nil, fmt.Errorf("%w: %s %s: the connection failed after the request was sent: %w", ErrOutcomeUnknown, method, path, err)
		}
		return 0, nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	// The whole body is read so that the connection can be reused.
	raw, err := readAnswer(resp)
	resp.Body.Close()
	if err != nil {
		if change {
			return 0, nil, fmt.Errorf("%w: %s %s: reading the answer: %w", ErrOutcomeUnknown, method, path, err)
		}
		return 0, nil, fmt.Errorf("client: %s %s: reading the answer: %w", method, path, err)
	}
	if len(raw) > maxAnswer {
		return 0, nil, fmt.Errorf("%w: %s %s: answer over %d bytes", ErrProtocol, method, path, maxAnswer)
	}
	return resp.StatusCode, raw, nil
}

// answerError is the error of an answer whose status is not a result's.
func answerError(method, path string, status int, raw []byte) error {
	var e api.Error
	if err := api.DecodeAnswer(raw, &e); err != nil || e.Error.Code == "" {
		cause := statusErr(status)
		// The receiver answers every error with its error object: a
		// server error without one came from something between (a proxy
		// that gave up waiting), after which a change may have applied.
		if method != http.MethodGet && method != http.MethodHead && status >= 500 {
			cause = ErrOutcomeUnknown
		}
		return &Error{Status: status, Code: "", Message: strings.TrimSpace(string(raw)), err: cause}
	}
	return errorOf(status, e.Error)
}

// Request headers by body type, shared by every request and never
// modified. An empty User-Agent has net/http send none: the receiver
// reads none, and it would be one more header to parse on every call.
var (
	cborHeader   = http.Header{"Content-Type": {api.ContentCBOR}, "Accept": {api.ContentJSON}, "User-Agent": {""}}
	jsonHeader   = http.Header{"Content-Type": {api.ContentJSON}, "Accept": {api.ContentJSON}, "User-Agent": {""}}
	acceptHeader = http.Header{"Accept": {api.ContentJSON}, "User-Agent": {""}}
)

// newRequest returns the request for path with body (none if nil). A
// submit's is built on the URL parsed once by NewWith; any other goes
// through http.NewRequestWithContext. Either can be sent again by the
// transport (GetBody) when a reused connection turns out closed before
// anything was written on it.
func (c *Client) newRequest(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	if path != api.PathSubmit {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		return http.NewRequestWithContext(ctx, method, c.base+path, rd)
	}
	req := &http.Request{Method: method, URL: c.submitURL, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Host: c.submitURL.Host, ContentLength: int64(len(body))}
	// An empty body is http.NoBody, as NewRequestWithContext makes it: a
	// length of 0 with another body would be sent chunked.
	if len(body) > 0 {
		req.Body = newBodyReader(body)
		req.GetBody = func() (io.ReadCloser, error) { return newBodyReader(body), nil }
	} else {
		req.Body = http.NoBody
		req.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	return req.WithContext(ctx), nil
}

// bodyReader is a request body over bytes the caller keeps: one
// allocation where bytes.NewReader and io.NopCloser made two.
type bodyReader struct{ bytes.Reader }

func newBodyReader(b []byte) *bodyReader {
	r := new(bodyReader)
	r.Reset(b)
	return r
}

// Close does nothing: the bytes are the caller's.
func (*bodyReader) Close() error { return nil }

// wroteTrace records whether a request's headers were written: a change
// whose request was written may have been applied, whatever happens to
// its answer. The flag and the trace share one allocation.
type wroteTrace struct {
	wrote atomic.Bool
	trace httptrace.ClientTrace
}

func newWroteTrace() *wroteTrace {
	t := new(wroteTrace)
	t.trace.WroteHeaders = t.markWrote
	return t
}

func (t *wroteTrace) markWrote() { t.wrote.Store(true) }

// errorKey is the key of an error answer's object, quotes included.
var errorKey = []byte(`"error"`)

// readAnswer reads an answer's body, at most maxAnswer+1 bytes: at once
// into a buffer of its size when the receiver declared one, as it does for
// every answer but a long page of events.
func readAnswer(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= maxAnswer {
		b := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
}

// errorOf maps an error answer to its sentinel.
func errorOf(status int, b api.ErrorBody) error {
	e := &Error{Status: status, Code: b.Code, Message: b.Message}
	if b.Code == api.CodeOutcomeUnknown {
		// The client's own sentinel, which also matches kvfence's.
		e.err = ErrOutcomeUnknown
		return e
	}
	if s, ok := api.SentinelByCode(b.Code); ok {
		e.err = s.Err
		return e
	}
	switch b.Code {
	case api.CodeUnauthenticated:
		e.err = ErrUnauthenticated
	case api.CodeForbidden:
		e.err = ErrForbidden
	case api.CodeTooLarge:
		e.err = ErrTooLarge
	case api.CodeIntegrity:
		e.err = ErrIntegrity
	case api.CodeCanceled:
		e.err = context.Canceled
	default:
		e.err = statusErr(status)
	}
	return e
}

func statusErr(status int) error {
	switch {
	case status == http.StatusUnauthorized:
		return ErrUnauthenticated
	case status == http.StatusForbidden:
		return ErrForbidden
	case status == http.StatusRequestEntityTooLarge:
		return ErrTooLarge
	case status >= 400 && status < 500:
		return ErrBadRequest
	case status >= 500:
		return ErrServer
	}
	return ErrProtocol
}

func (c *Client) postJSON(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return c.call(ctx, http.MethodPost, path, api.ContentJSON, body, out)
}

// Submit sends an envelope and returns the receiver's decision: a denial
// is a Result with Outcome Denied, not an error. An error means nothing
// was decided on this call's account, or (ErrNotAcknowledged) that the
// decision committed unacknowledged, or (ErrOutcomeUnknown) that it may or
// may not have been applied; retrying the same envelope is safe in every
// case, as an applied one answers already_applied.
//
// Submits made on one Client while others are waiting for their answers
// go to the receiver together, in one request (POST /v1/submit/batch),
// unless Options.DisableBatching; each gets its own decision or error, as
// if it had been sent alone. A receiver without that endpoint is then sent
// every envelope alone.
func (c *Client) Submit(ctx context.Context, envelope []byte) (kvfence.Result, error) {
	if c.batch == nil || c.noBatch.Load() || api.BatchItemSize(len(envelope)) > maxBatchedEnvelope {
		return c.submitOne(ctx, envelope)
	}
	return c.submitBatched(ctx, envelope)
}

// submitOne sends an envelope alone, to /v1/submit.
func (c *Client) submitOne(ctx context.Context, envelope []byte) (kvfence.Result, error) {
	var out api.Submit
	status, err := c.callStatus(ctx, http.MethodPost, api.PathSubmit, api.ContentCBOR, envelope, &out, http.StatusForbidden)
	if err != nil {
		return kvfence.Result{}, err
	}
	return submitResult(status, out)
}

// submitResult is the decision of a submit answer with its status.
func submitResult(status int, out api.Submit) (kvfence.Result, error) {
	res, err := out.Result()
	if err != nil {
		return kvfence.Result{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	// The receiver answers a denial with 403 and a decision that applied
	// with 200: an answer whose status and outcome disagree is not its
	// decision, and a 403 is never taken for applied.
	if (status == http.StatusForbidden) != (res.Outcome == kvfence.Denied) {
		return kvfence.Result{}, fmt.Errorf("%w: HTTP %d with outcome %q", ErrProtocol, status, res.Outcome)
	}
	return res, nil
}

// SubmitAssignment builds the assignment's envelope and submits it.
func (c *Client) SubmitAssignment(ctx context.Context, a Assignment) (kvfence.Result, error) {
	env, err := a.Envelope()
	if err != nil {
		return kvfence.Result{}, err
	}
	return c.Submit(ctx, env)
}

// CreateScope creates a protected scope at epoch 1, held, and returns its
// status as created (scope, epoch, mode, creation time, maximum grant
// lifetime).
func (c *Client) CreateScope(ctx context.Context, scope string) (kvfence.ScopeStatus, error) {
	return c.CreateScopeWith(ctx, scope, kvfence.ScopeOptions{})
}

// CreateScopeWith creates a scope as CreateScope does, with options.
func (c *Client) CreateScopeWith(ctx context.Context, scope string, opts kvfence.ScopeOptions) (kvfence.ScopeStatus, error) {
	req := api.ScopeCreateRequest{Scope: scope}
	if opts.MaxGrantTTL != 0 {
		req.MaxGrantTTL = opts.MaxGrantTTL.String()
	}
	var out api.ScopeCreate
	if err := c.postJSON(ctx, api.PathScopes, req, &out); err != nil {
		return kvfence.ScopeStatus{}, err
	}
	created, err := api.ParseTime(out.CreatedAt)
	if err != nil {
		return kvfence.ScopeStatus{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	st := kvfence.ScopeStatus{Scope: out.Scope, Epoch: out.Epoch, Mode: kvfence.Mode(out.Mode), CreatedAt: created}
	// A receiver that predates the maximum sends none.
	if out.MaxGrantTTL != "" {
		if st.MaxGrantTTL, err = time.ParseDuration(out.MaxGrantTTL); err != nil {
			return kvfence.ScopeStatus{}, fmt.Errorf("%w: max_grant_ttl: %v", ErrProtocol, err)
		}
	}
	return st, nil
}

// CreateTarget creates a target in an existing scope at revision 1 and
// returns it, after checking that the receiver stored value's digest.
// CreateTargetSpec creates a target of another kind.
func (c *Client) CreateTarget(ctx context.Context, scope, target string, value []byte) (kvfence.Target, error) {
	return c.CreateTargetSpec(ctx, kvfence.TargetSpec{Scope: scope, Name: target, Value: value})
}

// CreateTargetSpec creates a target of kind internal, etcd (spec.Key; the
// receiver must be on the etcd engine, else kvfence.ErrKindUnsupported)
// or kubernetes (spec.Object, a core v1 object, which the receiver reads
// through its own identity: kvfence.ErrNoDispatcher when it has none) and
// returns it as created. A func target (spec.Effect) is an embedder's and
// is never created through a served receiver: kvfence.ErrKindUnsupported,
// without a call. The answer is checked against the spec: the stored
// value's digest (except for a kubernetes target, whose object holds the
// value), the kind, and the key or object.
func (c *Client) CreateTargetSpec(ctx context.Context, spec kvfence.TargetSpec) (kvfence.Target, error) {
	if spec.Effect != "" || spec.Kind == kvfence.TargetFunc {
		return kvfence.Target{}, fmt.Errorf("%w: a target of kind %s is an embedder's and is never created through a served receiver", kvfence.ErrKindUnsupported, kvfence.TargetFunc)
	}
	kind := spec.Kind
	if kind == "" {
		kind = kvfence.TargetInternal
	}
	req := api.TargetCreateRequest{Scope: spec.Scope, Target: spec.Name, Kind: string(kind), TargetKey: spec.Key}
	if kind != kvfence.TargetKubernetes {
		req.ValueB64 = spec.Value
		if req.ValueB64 == nil {
			req.ValueB64 = []byte{}
		}
	} else if spec.Value != nil {
		return kvfence.Target{}, fmt.Errorf("%w: a target of kind %s takes no value: the object holds it", kvfence.ErrInvalidArgument, kind)
	}
	if spec.Object != nil {
		if spec.Object.Group != "" || spec.Object.Version != "v1" {
			return kvfence.Target{}, fmt.Errorf("%w: object %s: a served receiver names core v1 objects only (RESOURCE/NAMESPACE/NAME)", kvfence.ErrInvalidArgument, spec.Object)
		}
		req.Object = spec.Object.String()
	}
	var out api.TargetCreate
	if err := c.postJSON(ctx, api.PathTargets, req, &out); err != nil {
		return kvfence.Target{}, err
	}
	if out.Kind != string(kind) || out.TargetKey != req.TargetKey || out.Object != req.Object || out.Target != spec.Name || out.Scope != spec.Scope {
		return kvfence.Target{}, fmt.Errorf("%w: asked for target %q of scope %q, kind %s, key %q, object %q; the receiver created %q of scope %q, kind %q, key %q, object %q",
			ErrProtocol, spec.Name, spec.Scope, kind, req.TargetKey, req.Object, out.Target, out.Scope, out.Kind, out.TargetKey, out.Object)
	}
	t := kvfence.Target{Name: out.Target, Scope: out.Scope, Revision: out.Revision, Kind: kind, Key: out.TargetKey, UID: out.UID}
	if kind == kvfence.TargetKubernetes {
		obj := *spec.Object
		t.Object, t.Value = &obj, []byte{}
		if out.UID == "" {
			return kvfence.Target{}, fmt.Errorf("%w: the receiver created kubernetes target %q without the object's uid", ErrProtocol, out.Target)
		}
		return t, nil
	}
	sum := sha256.Sum256(req.ValueB64)
	if out.ValueSHA256 != fmt.Sprintf("%x", sum) {
		return kvfence.Target{}, fmt.Errorf("%w: the receiver stored a value with sha256 %s, sent %x", ErrProtocol, out.ValueSHA256, sum)
	}
	t.Value = req.ValueB64
	if kind == kvfence.TargetEtcd {
		t.Writes = 1
	}
	return t, nil
}

// Activation is what Activate returns: the grant, and the request bytes
// it binds, which together are what a worker needs.
type Activation struct {
	// Grant is the grant the receiver minted.
	kvfence.Grant
	// Request is the exact request bytes the grant binds.
	Request []byte
}

// Assignment returns what the activated worker is handed.
func (a Activation) Assignment() Assignment {
	return Assignment{Scope: a.Scope, Epoch: a.Epoch, Grant: a.ID, Executor: a.Executor, Claim: a.Claim,
		Request: append([]byte(nil), a.Request...)}
}

// Activate mints a grant for a held scope at its current epoch and opens
// the scope with it. req.NotBefore and req.NotAfter are not sent: the
// receiver's clock sets the window, from now for req.TTL (zero: its
// default). It checks that the grant binds the request bytes it sent.
func (c *Client) Activate(ctx context.Context, req kvfence.ActivateRequest) (Activation, error) {
	if !req.NotBefore.IsZero() || !req.NotAfter.IsZero() {
		return Activation{}, fmt.Errorf("%w: a served receiver sets the window from its own clock; give TTL", kvfence.ErrInvalidArgument)
	}
	in := api.ActivateRequest{Scope: req.Scope, Executor: req.Executor, Claim: req.Claim, RequestB64: req.Request,
		Decision: req.Decision, Epoch: req.Epoch}
	if req.TTL != 0 {
		in.TTL = req.TTL.String()
	}
	var out api.Activate
	if err := c.postJSON(ctx, api.PathActivate, in, &out); err != nil {
		return Activation{}, err
	}
	g, err := out.ToGrant()
	if err != nil {
		return Activation{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if g.RequestSHA256 != sha256.Sum256(req.Request) {
		return Activation{}, fmt.Errorf("%w: the grant binds request sha256 %x, not the bytes sent", ErrProtocol, g.RequestSHA256)
	}
	return Activation{Grant: g, Request: append([]byte(nil), req.Request...)}, nil
}

// ExtendGrant moves the active grant req.Grant's end of validity to the
// receiver's now plus req.TTL, within its scope's maximum from the grant's
// activation (Admin.ExtendGrant), and returns the grant as it now stands.
// The answer must name the grant asked for.
func (c *Client) ExtendGrant(ctx context.Context, req kvfence.ExtendRequest) (kvfence.Grant, error) {
	if req.TTL <= 0 {
		return kvfence.Grant{}, fmt.Errorf("%w: the ttl of an extension must be positive, got %s", kvfence.ErrInvalidWindow, req.TTL)
	}
	var out api.GrantExtend
	if err := c.postJSON(ctx, api.PathGrantExtend, api.GrantExtendRequest{Grant: req.Grant, TTL: req.TTL.String()}, &out); err != nil {
		return kvfence.Grant{}, err
	}
	g, err := out.ToGrant()
	if err != nil {
		return kvfence.Grant{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if g.ID != req.Grant || g.NotAfter.IsZero() {
		return kvfence.Grant{}, fmt.Errorf("%w: asked to extend grant %s, the receiver answered for %q ending %s", ErrProtocol, req.Grant, g.ID, g.NotAfter)
	}
	return g, nil
}

// Hold advances the epoch of every named scope and holds it, all or none.
// With req.ID the hold is idempotent: a repeat returns the first hold's
// result with Repeated set. The answer must carry the receiver's signed
// checkpoint and, for each scope asked for and no other, an
// acknowledgment of that scope's hold with req.ID, each field as its
// signed bytes say; else it is ErrProtocol. The signatures are not
// checked here (that needs the receiver's public key): a coordinator
// verifies them with the key it pinned.
func (c *Client) Hold(ctx context.Context, req kvfence.HoldRequest) (kvfence.HoldResult, error) {
	var out api.Hold
	body := api.HoldRequest{Scopes: req.Scopes, Reason: req.Reason, HoldID: req.ID, ExpectEpoch: req.ExpectEpoch}
	if err := c.postJSON(ctx, api.PathHold, body, &out); err != nil {
		return kvfence.HoldResult{}, err
	}
	res, err := out.Result()
	if err != nil {
		return kvfence.HoldResult{}, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if err := holdAnswers(req, res); err != nil {
		return kvfence.HoldResult{}, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return res, nil
}

// holdAnswers checks that a hold's result answers req: a checkpoint, and
// one acknowledged part per scope asked for, each with req's hold id. A
// repeat must carry them as well, since the first result is what it
// returns.
func holdAnswers(req kvfence.HoldRequest, res kvfence.HoldResult) error {
	if res.Checkpoint == (audit.SignedCheckpoint{}) {
		return errors.New("the hold's answer carries no signed checkpoint")
	}
	if len(res.Scopes) != len(req.Scopes) {
		return fmt.Errorf("asked to hold %d scopes, the answer holds %d", len(req.Scopes), len(res.Scopes))
	}
	seen := make(map[string]bool, len(res.Scopes))
	for _, s := range res.Scopes {
		switch {
		case !slices.Contains(req.Scopes, s.Scope) || seen[s.Scope]:
			return fmt.Errorf("the answer holds scope %q, which was not asked for or is there twice", s.Scope)
		case s.Ack.IsZero():
			return fmt.Errorf("scope %q's hold carries no signed acknowledgment", s.Scope)
		case s.Ack.HoldID != req.ID:
			return fmt.Errorf("scope %q's acknowledgment is of hold id %q, not %q", s.Scope, s.Ack.HoldID, req.ID)
		case req.ExpectEpoch != 0 && s.PreviousEpoch != req.ExpectEpoch:
			return fmt.Errorf("scope %q was held from epoch %d, not the expected %d", s.Scope, s.PreviousEpoch, req.ExpectEpoch)
		}
		seen[s.Scope] = true
	}
	return nil
}

// HoldAll holds every open scope in one transaction (Admin.HoldAll).
func (c *Client) HoldAll(ctx context.Context, reason string) (kvfence.HoldAllResult, error) {
	var out api.HoldAll
	if err := c.postJSON(ctx, api.PathHold, api.HoldRequest{Reason: reason, All: true}, &out); err != nil {
		return kvfence.HoldAllResult{}, err
	}
	res, err := out.Result()
	if err != nil {
		return kvfence.HoldAllResult{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return kvfence.HoldAllResult{HoldResult: res, AlreadyHeld: out.AlreadyHeld}, nil
}

// Grant returns a stored grant and whether its window was over by the
// receiver's clock.
func (c *Client) Grant(ctx context.Context, id string) (kvfence.Grant, bool, error) {
	var out api.Grant
	if err := c.call(ctx, http.MethodGet, api.PathGrant+"?id="+url.QueryEscape(id), "", nil, &out); err != nil {
		return kvfence.Grant{}, false, err
	}
	g, expired, err := out.ToGrant()
	if err != nil {
		return kvfence.Grant{}, false, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if g.ID != id {
		return kvfence.Grant{}, false, fmt.Errorf("%w: asked for grant %q, got %q", ErrProtocol, id, g.ID)
	}
	return g, expired, nil
}

// Targets returns the targets of scope, or of every scope when scope is "".
func (c *Client) Targets(ctx context.Context, scope string) ([]kvfence.Target, error) {
	path := api.PathTargetList
	if scope != "" {
		path += "?scope=" + url.QueryEscape(scope)
	}
	var out api.TargetList
	if err := c.call(ctx, http.MethodGet, path, "", nil, &out); err != nil {
		return nil, err
	}
	ts := []kvfence.Target{}
	for _, t := range out.Targets {
		if scope != "" && t.Scope != scope {
			return nil, fmt.Errorf("%w: asked for scope %q's targets, got one of %q", ErrProtocol, scope, t.Scope)
		}
		tt, err := targetFrom(t)
		if err != nil {
			return nil, err
		}
		ts = append(ts, tt)
	}
	return ts, nil
}

// Status is the control state of scopes and the audit head's seq read
// before them.
type Status struct {
	// Scopes is the control state of the scopes asked for, ordered by name.
	Scopes []kvfence.ScopeStatus
	// AuditSeq is the audit chain head's seq, read before the scopes.
	AuditSeq uint64
}

// Status returns the control state of scope, or of every scope when scope
// is "".
func (c *Client) Status(ctx context.Context, scope string) (Status, error) {
	path := api.PathStatus
	if scope != "" {
		path += "?scope=" + url.QueryEscape(scope)
	}
	var out api.Status
	if err := c.call(ctx, http.MethodGet, path, "", nil, &out); err != nil {
		return Status{}, err
	}
	st := Status{AuditSeq: out.AuditSeq}
	for _, s := range out.Scopes {
		ss, err := s.Status()
		if err != nil {
			return Status{}, fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		st.Scopes = append(st.Scopes, ss)
	}
	return st, nil
}

// Target returns a target's value and revision, kind, and key or object.
// A kubernetes target's value is its object's, when the receiver read it
// (ObserveTarget says whether it did).
func (c *Client) Target(ctx context.Context, name string) (kvfence.Target, error) {
	lt, err := c.ObserveTarget(ctx, name)
	return lt.Target, err
}

// ObserveTarget returns a target as Target does and, for a kubernetes
// target, its object as the receiver read it now (Live), or why the
// receiver did not (LiveErr, which wraps kvfence.ErrNoDispatcher when the
// receiver has no identity for the kind).
func (c *Client) ObserveTarget(ctx context.Context, name string) (kvfence.LiveTarget, error) {
	var out api.Target
	if err := c.call(ctx, http.MethodGet, api.PathTarget+"?target="+url.QueryEscape(name), "", nil, &out); err != nil {
		return kvfence.LiveTarget{}, err
	}
	if out.Target != name {
		return kvfence.LiveTarget{}, fmt.Errorf("%w: asked for target %q, got %q", ErrProtocol, name, out.Target)
	}
	t, err := targetFrom(out)
	if err != nil {
		return kvfence.LiveTarget{}, err
	}
	lt := kvfence.LiveTarget{Target: t}
	switch {
	case out.Live != nil && t.Object != nil:
		lt.Live = &kvfence.RemoteState{Version: out.Live.ResourceVersion, UID: out.Live.UID, Value: t.Value,
			Stamp: kvfence.Stamp{Receipt: out.Live.LastDispatch}}
	case out.Live != nil:
		return kvfence.LiveTarget{}, fmt.Errorf("%w: target %q of kind %s has a live object", ErrProtocol, name, t.Kind)
	case out.LiveError != "":
		lt.LiveErr = errors.New("receiver: " + out.LiveError)
		if se, ok := api.SentinelByCode(out.LiveErrorCode); ok {
			lt.LiveErr = fmt.Errorf("%w: %s", se.Err, out.LiveError)
		}
	}
	return lt, nil
}

// targetFrom is the target an answer describes; an object that is not
// RESOURCE/NAMESPACE/NAME, or a kind that names what it does not have,
// is ErrProtocol.
func targetFrom(t api.Target) (kvfence.Target, error) {
	out := kvfence.Target{Name: t.Target, Scope: t.Scope, Revision: t.Revision, Value: t.ValueB64,
		Kind: kvfence.TargetKind(t.Kind), Effect: t.Effect, Key: t.TargetKey, Writes: t.Writes, UID: t.UID}
	if out.Kind == "" {
		// A receiver from before kinds answered none: every target was internal.
		out.Kind = kvfence.TargetInternal
	}
	if (t.Object != "") != (out.Kind == kvfence.TargetKubernetes) || (t.TargetKey != "") != (out.Kind == kvfence.TargetEtcd) {
		return kvfence.Target{}, fmt.Errorf("%w: target %q of kind %q with key %q and object %q", ErrProtocol, t.Target, t.Kind, t.TargetKey, t.Object)
	}
	if t.Object != "" {
		obj, err := kvfence.ParseObject(t.Object)
		if err != nil {
			return kvfence.Target{}, fmt.Errorf("%w: target %q: %v", ErrProtocol, t.Target, err)
		}
		out.Object = &obj
	}
	return out, nil
}

// Receipt returns the receipt of an applied action.
func (c *Client) Receipt(ctx context.Context, scope, action string) (kvfence.Receipt, error) {
	var out api.Receipt
	q := "?scope=" + url.QueryEscape(scope) + "&action=" + url.QueryEscape(action)
	if err := c.call(ctx, http.MethodGet, api.PathReceipt+q, "", nil, &out); err != nil {
		return kvfence.Receipt{}, err
	}
	rc, err := out.ToReceipt()
	if err != nil {
		return kvfence.Receipt{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return rc, nil
}

// ReceiptProof returns the receipt of an applied action with its proof
// (GET /v1/receipt?proof=1), as Receiver.ReceiptProof does. It is parsed
// strictly (receiptproof.Parse) but not verified: receiptproof.Verify does
// that with the receiver's public key.
func (c *Client) ReceiptProof(ctx context.Context, scope, action string) (kvfence.ReceiptProof, error) {
	var out receiptproof.Proof
	q := "?scope=" + url.QueryEscape(scope) + "&action=" + url.QueryEscape(action) + "&proof=1"
	if err := c.call(ctx, http.MethodGet, api.PathReceipt+q, "", nil, &out); err != nil {
		return kvfence.ReceiptProof{}, err
	}
	rc, err := out.Receipt.ToReceipt()
	if err != nil {
		return kvfence.ReceiptProof{}, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	body, _, ok := strings.Cut(string(out.Checkpoint), "\n\n")
	cp, err := checkpoint.Parse([]byte(body + "\n"))
	if !ok || err != nil {
		return kvfence.ReceiptProof{}, fmt.Errorf("%w: the receipt proof's checkpoint note: %v", ErrProtocol, err)
	}
	return kvfence.ReceiptProof{Receipt: rc, Entry: out.Entry, Checkpoint: out.Checkpoint, TreeSize: cp.Size, Proof: out.Inclusion}, nil
}

// eventsPage is the page size Events asks for.
const eventsPage = 1000

// Events calls fn for each audit entry with seq >= since, in order, until
// fn returns false, reading the chain a page at a time. Each entry is
// re-encoded and must hash to the hash the receiver sent, and each links
// to the one before it, so fn sees exactly the chain the receiver holds
// from the first entry it was sent.
func (c *Client) Events(ctx context.Context, since uint64, fn func(kvfence.Event) bool) error {
	var prev *kvfence.Event
	for {
		var out api.Events
		path := api.PathEvents + "?since=" + strconv.FormatUint(since, 10) + "&limit=" + strconv.Itoa(eventsPage)
		if err := c.call(ctx, http.MethodGet, path, "", nil, &out); err != nil {
			return err
		}
		for _, e := range out.Events {
			ev, err := api.Event(e)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrProtocol, err)
			}
			if ev.Seq < since || (prev != nil && (ev.Seq != prev.Seq+1 || !bytes.Equal(ev.Prev, prev.Hash[:]))) {
				return fmt.Errorf("%w: entry %d does not follow the entry before it", ErrProtocol, ev.Seq)
			}
			prev = &ev
			if !fn(ev) {
				return nil
			}
		}
		if len(out.Events) < eventsPage {
			return nil
		}
		since = prev.Seq + 1
	}
}

// Healthz reports whether the receiver is serving.
func (c *Client) Healthz(ctx context.Context) error {
	var out map[string]any
	return c.call(ctx, http.MethodGet, api.PathHealthz, "", nil, &out)
}

// ReceiptsByClaim returns the receipts of scope applied under grants that
// carried the ledger claim ref claim (Receiver.ReceiptsByClaim), oldest
// first. An answer with a receipt of another scope, or out of audit
// order, is ErrProtocol.
func (c *Client) ReceiptsByClaim(ctx context.Context, scope, claim string) ([]kvfence.Receipt, error) {
	var out api.Receipts
	q := "?scope=" + url.QueryEscape(scope) + "&claim=" + url.QueryEscape(claim)
	if err := c.call(ctx, http.MethodGet, api.PathReceipts+q, "", nil, &out); err != nil {
		return nil, err
	}
	rcs := make([]kvfence.Receipt, 0, len(out.Receipts))
	for _, r := range out.Receipts {
		rc, err := r.ToReceipt()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		if rc.Scope != scope {
			return nil, fmt.Errorf("%w: asked for scope %q's receipts, got one of %q", ErrProtocol, scope, rc.Scope)
		}
		if n := len(rcs); n > 0 && rc.AuditSeq <= rcs[n-1].AuditSeq {
			return nil, fmt.Errorf("%w: receipt at seq %d follows one at %d; the receipts are not oldest first",
				ErrProtocol, rc.AuditSeq, rcs[n-1].AuditSeq)
		}
		rcs = append(rcs, rc)
	}
	return rcs, nil
}
