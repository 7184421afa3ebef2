package kubetarget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/kvfence/kvfence/kubeclient"
	"github.com/kvfence/kvfence/kvfence"
)

// DefaultFenceRetryInterval is how long Fence waits before it reads the
// object again after a conflict, when Options leaves it zero.
const DefaultFenceRetryInterval = 20 * time.Millisecond

// MaxResponseBody bounds the API server's answer to one request: an
// object (etcd refuses requests over 1.5 MiB by default) with room to
// spare. A longer answer is an error.
const MaxResponseBody = 4 << 20

// Options configures a Dispatcher.
type Options struct {
	// Config is how to reach the API server, and as whom: the receiver's
	// identity, the only one deploy/kubernetes's admission policy lets
	// change a scoped object. Required.
	Config *kubeclient.Config
	// FenceRetryInterval is how long Fence waits after a conflict before
	// it reads the object again; zero is DefaultFenceRetryInterval.
	FenceRetryInterval time.Duration
}

// Dispatcher is the kvfence.Dispatcher of Kubernetes ConfigMaps. It is
// safe for concurrent use.
type Dispatcher struct {
	client     *http.Client
	base       *url.URL
	fenceRetry time.Duration
}

var _ kvfence.Dispatcher = (*Dispatcher)(nil)

// ErrNoConfig means Options.Config is nil, or a kubeconfig file was not
// named.
var ErrNoConfig = errors.New("kubetarget: no API server configuration")

// ErrUnguarded means Apply found the object without the label
// kvfence.dev/scope: the admission policy does not guard it, so other
// identities could change it behind the fence, and nothing was written.
var ErrUnguarded = errors.New("kubetarget: the object is not labelled " + LabelScope)

// ErrNoPrecondition means Apply was given an empty version or UID: an
// update without them would overwrite whatever the object holds.
var ErrNoPrecondition = errors.New("kubetarget: a write needs the version and UID it was decided on")

// New returns a Dispatcher that speaks JSON to the API server o.Config
// names.
func New(o Options) (*Dispatcher, error) {
	if o.Config == nil {
		return nil, ErrNoConfig
	}
	cfg := *o.Config
	if cfg.UserAgent == "" {
		cfg.UserAgent = "kvfence-kubetarget"
	}
	base, err := cfg.BaseURL()
	if err != nil {
		return nil, fmt.Errorf("kubetarget: %w", err)
	}
	client, err := cfg.HTTPClient()
	if err != nil {
		return nil, fmt.Errorf("kubetarget: %w", err)
	}
	d := &Dispatcher{client: client, base: base, fenceRetry: o.FenceRetryInterval}
	if d.fenceRetry <= 0 {
		d.fenceRetry = DefaultFenceRetryInterval
	}
	return d, nil
}

// FromKubeconfig returns a Dispatcher for the API server and identity of
// a kubeconfig file's context (kubeclient.LoadKubeconfig): the file's
// current context if context is empty. Only that file is read: neither
// $KUBECONFIG nor ~/.kube/config stands in for it.
func FromKubeconfig(path, context string) (*Dispatcher, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: the kubeconfig file's path is empty", ErrNoConfig)
	}
	cfg, err := kubeclient.LoadKubeconfig(path, context)
	if err != nil {
		return nil, fmt.Errorf("kubetarget: %w", err)
	}
	return New(Options{Config: cfg})
}

// InCluster returns a Dispatcher that acts as the pod's service account,
// from the token and CA that Kubernetes mounts in every pod.
func InCluster() (*Dispatcher, error) {
	cfg, err := kubeclient.InCluster()
	if err != nil {
		return nil, fmt.Errorf("kubetarget: %w", err)
	}
	return New(Options{Config: cfg})
}

// StatusError is an API server's answer other than success to one
// request. It wraps kvfence.ErrRemoteConflict for a 409 and
// kvfence.ErrRemoteNotFound for a 404, and nothing for any other status.
type StatusError struct {
	// Method and Path are the request's.
	Method, Path string
	// Code is the HTTP status.
	Code int
	// Message is the server's message, from its Status object.
	Message string
}

// Error returns the request, the status and the server's message.
func (e *StatusError) Error() string {
	return fmt.Sprintf("kubetarget: %s %s: %d %s: %s", e.Method, e.Path, e.Code, http.StatusText(e.Code), e.Message)
}

// Unwrap returns kvfence.ErrRemoteConflict for a 409,
// kvfence.ErrRemoteNotFound for a 404, and nil otherwise.
func (e *StatusError) Unwrap() error {
	switch e.Code {
	case http.StatusConflict:
		return kvfence.ErrRemoteConflict
	case http.StatusNotFound:
		return kvfence.ErrRemoteNotFound
	}
	return nil
}

// do sends one request and never retries it; a status other than 2xx is
// a *StatusError, a failure without a status another error.
func (d *Dispatcher) do(ctx context.Context, method, path string, body []byte) (*object, error) {
	u := *d.base
	u.Path += path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("kubetarget: %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		// Without a way to rewind the body the transport cannot send an
		// update twice: Go's HTTP/2 transport replays a request whose
		// stream the server reset with PROTOCOL_ERROR, which it may do
		// after applying it, and the replay's 409 would record a write
		// that landed as a conflict. A reset is then an error, and the
		// outcome unknown.
		req.GetBody = nil
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubetarget: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody+1))
	if rerr == nil && len(raw) > MaxResponseBody {
		rerr = fmt.Errorf("the answer is longer than %d bytes", MaxResponseBody)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The status is the server's verdict even if its message cannot
		// be read.
		var st struct {
			Message string `json:"message"`
		}
		switch {
		case rerr != nil:
			st.Message = "reading the answer: " + rerr.Error()
		case json.Unmarshal(raw, &st) != nil || st.Message == "":
			st.Message = string(raw)
		}
		if st.Message == "" {
			st.Message = "no message"
		}
		return nil, &StatusError{Method: method, Path: path, Code: resp.StatusCode, Message: kubeclient.Printable(st.Message)}
	}
	if rerr != nil {
		// Success, but the object did not come: for a write, which state
		// it left is not known, so this is not a *StatusError.
		return nil, fmt.Errorf("kubetarget: %s %s: %d, but %w", method, path, resp.StatusCode, rerr)
	}
	o, err := decodeObject(raw)
	if err != nil {
		return nil, fmt.Errorf("kubetarget: %s %s: %w", method, path, err)
	}
	return o, nil
}

// CheckValue returns value, a ConfigMap's data, in canonical form
// (CanonicalValue), so that a receiver decides, dispatches and later
// compares the value the object will hold; a value that is not a
// ConfigMap's data is an error wrapping ErrInvalidValue, and the request
// is denied before anything is dispatched. It makes Dispatcher a
// kvfence.ValueChecker.
func (d *Dispatcher) CheckValue(value []byte) ([]byte, error) { return CanonicalValue(value) }

// Read returns the ConfigMap's version, UID, data as canonical JSON and
// stamp; kvfence.ErrRemoteNotFound if it does not exist.
func (d *Dispatcher) Read(ctx context.Context, obj kvfence.RemoteObject) (kvfence.RemoteState, error) {
	path, err := objectPath(obj)
	if err != nil {
		return kvfence.RemoteState{}, err
	}
	o, err := d.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return kvfence.RemoteState{}, err
	}
	return o.state(), nil
}

// Apply reads the ConfigMap and sends one update of it with data
// in.Value, the stamp in.Stamp, and metadata.resourceVersion and
// metadata.uid in.Precondition and in.UID, so that the API server refuses
// it (409, kvfence.ErrRemoteConflict) unless the object is still the one
// the decision read. Labels, other annotations, binaryData and all other
// fields are sent back as read. It returns the state the update left.
// Nothing is sent for an input that is invalid or an object without the
// label kvfence.dev/scope (ErrUnguarded).
func (d *Dispatcher) Apply(ctx context.Context, in kvfence.DispatchInput) (kvfence.RemoteState, error) {
	path, err := objectPath(in.Object)
	if err != nil {
		return kvfence.RemoteState{}, err
	}
	if in.Precondition == "" || in.UID == "" {
		return kvfence.RemoteState{}, ErrNoPrecondition
	}
	data, err := DecodeData(in.Value)
	if err != nil {
		return kvfence.RemoteState{}, err
	}
	if in.Stamp.Grant == "" {
		// A stamp without a grant is a fencing write's: a value written
		// under it would read back as a fence.
		return kvfence.RemoteState{}, fmt.Errorf("%w: a value is written under a grant; the stamp names none", ErrInvalidStamp)
	}
	stamp, err := StampAnnotations(in.Stamp)
	if err != nil {
		return kvfence.RemoteState{}, err
	}
	cur, err := d.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return kvfence.RemoteState{}, err
	}
	if _, ok := cur.labels[LabelScope]; !ok {
		return kvfence.RemoteState{}, fmt.Errorf("%w: %s", ErrUnguarded, path)
	}
	// The preconditions are the decision's, not the read's: if the object
	// moved on since the decision, the server refuses the update.
	body, err := cur.updateBody(in.Precondition, in.UID, stamp, data)
	if err != nil {
		return kvfence.RemoteState{}, fmt.Errorf("kubetarget: %w", err)
	}
	o, err := d.do(ctx, http.MethodPut, path, body)
	if err != nil {
		return kvfence.RemoteState{}, err
	}
	return o.state(), nil
}

// Fence writes stamp on the ConfigMap under the version and UID it has
// just read, changing nothing else, so that its resourceVersion moves on
// and every update still in flight with an older precondition fails. On
// a conflict it reads again and retries until ctx ends; any other failure
// ends it at once. It returns the state it left.
func (d *Dispatcher) Fence(ctx context.Context, obj kvfence.RemoteObject, stamp kvfence.Stamp) (kvfence.RemoteState, error) {
	path, err := objectPath(obj)
	if err != nil {
		return kvfence.RemoteState{}, err
	}
	ann, err := StampAnnotations(stamp)
	if err != nil {
		return kvfence.RemoteState{}, err
	}
	for {
		cur, err := d.do(ctx, http.MethodGet, path, nil)
		if err != nil {
			return kvfence.RemoteState{}, err
		}
		body, err := cur.updateBody(cur.resourceVersion, cur.uid, ann, nil)
		if err != nil {
			return kvfence.RemoteState{}, fmt.Errorf("kubetarget: %w", err)
		}
		o, err := d.do(ctx, http.MethodPut, path, body)
		if err == nil {
			return o.state(), nil
		}
		if !errors.Is(err, kvfence.ErrRemoteConflict) {
			return kvfence.RemoteState{}, err
		}
		select {
		case <-ctx.Done():
			// Not ErrRemoteConflict: the object is not fenced.
			return kvfence.RemoteState{}, fmt.Errorf("kubetarget: fencing %s: %w (last: %v)", path, ctx.Err(), err)
		case <-time.After(d.fenceRetry):
		}
	}
}
