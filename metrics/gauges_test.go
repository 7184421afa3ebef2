package metrics_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine/boltengine"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// flakyAnchor is a file anchor whose writes fail while fail is set, and
// wait for release while block is set.
type flakyAnchor struct {
	audit.FileAnchor
	fail    atomic.Bool
	block   atomic.Bool
	release chan struct{}
}

func (a *flakyAnchor) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	if a.block.Load() {
		<-a.release
	}
	if a.fail.Load() {
		return errors.New("anchor volume unavailable")
	}
	return a.FileAnchor.Store(old, next)
}

// gathered is one scrape: each series by its name and labels.
type gathered map[string]*dto.Metric

func scrape(t *testing.T, reg *prometheus.Registry) gathered {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := gathered{}
	for _, f := range fams {
		for _, m := range f.Metric {
			key := f.GetName()
			for _, l := range m.Label {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			out[key] = m
		}
	}
	return out
}

func (g gathered) gauge(t *testing.T, key string) float64 {
	t.Helper()
	m, ok := g[key]
	if !ok {
		t.Fatalf("no series %s", key)
	}
	return m.GetGauge().GetValue()
}

// newReceiver initialises a receiver at dir with anchor a and opens it
// with m as its observer.
func newReceiver(t *testing.T, dir string, a audit.AnchorStore, m *metrics.Metrics) *kvfence.Receiver {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	path := filepath.Join(dir, "r.db")
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "r", Key: key, Anchor: a}); err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: a, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// Ensure that the anchor gauges follow the anchor writes: the time of the
// last success moves only on a success, anchor_write_failing is 1 from a
// failed write until one succeeds, and an anchor write that does not
// return shows as in progress.
func TestMetrics_AnchorGauges(t *testing.T) {
	dir := t.TempDir()
	a := &flakyAnchor{FileAnchor: audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}, release: make(chan struct{})}
	m := metrics.New(metrics.Options{})
	r := newReceiver(t, dir, a, m)
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg, r); err != nil {
		t.Fatal(err)
	}
	const (
		last       = "kvfence_receiver_anchor_last_success_timestamp_seconds"
		failing    = "kvfence_receiver_anchor_write_failing"
		inProgress = "kvfence_receiver_anchor_write_in_progress_seconds"
	)
	g := scrape(t, reg)
	if g.gauge(t, last) != 0 || g.gauge(t, failing) != 0 || g.gauge(t, inProgress) != 0 {
		t.Fatalf("before any write: %v %v %v", g.gauge(t, last), g.gauge(t, failing), g.gauge(t, inProgress))
	}
	ctx := context.Background()
	before := float64(time.Now().UnixNano()) / 1e9
	if _, err := r.Admin().CreateScope(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	after := float64(time.Now().UnixNano()) / 1e9
	g = scrape(t, reg)
	ok1 := g.gauge(t, last)
	if ok1 < before || ok1 > after || g.gauge(t, failing) != 0 {
		t.Fatalf("after a success: last %v not in [%v, %v], failing %v", ok1, before, after, g.gauge(t, failing))
	}

	a.fail.Store(true)
	if _, err := r.Admin().CreateScope(ctx, "s2"); !errors.Is(err, kvfence.ErrNotAcknowledged) {
		t.Fatalf("create with a failing anchor: %v", err)
	}
	g = scrape(t, reg)
	if g.gauge(t, failing) != 1 || g.gauge(t, last) != ok1 {
		t.Fatalf("after a failure: failing %v, last %v (was %v)", g.gauge(t, failing), g.gauge(t, last), ok1)
	}

	// A write that hangs: in progress, and counted from its start.
	a.fail.Store(false)
	a.block.Store(true)
	done := make(chan error, 1)
	go func() { _, err := r.Admin().CreateScope(ctx, "s3"); done <- err }()
	for deadline := time.Now().Add(10 * time.Second); r.Readiness().AnchorWriteSince.IsZero(); {
		if time.Now().After(deadline) {
			t.Fatal("the anchor write did not start")
		}
		runtime.Gosched()
	}
	if v := scrape(t, reg).gauge(t, inProgress); v <= 0 {
		t.Fatalf("hung write: in progress %v", v)
	}
	a.block.Store(false)
	close(a.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	g = scrape(t, reg)
	if g.gauge(t, failing) != 0 || g.gauge(t, inProgress) != 0 || g.gauge(t, last) < ok1 {
		t.Fatalf("after recovery: failing %v, in progress %v, last %v", g.gauge(t, failing), g.gauge(t, inProgress),
			g.gauge(t, last))
	}
}

// Ensure that kvfence_receiver_scopes counts the scopes open and held as
// activations and holds move them, with both modes present from the
// start.
func TestMetrics_ScopesByMode(t *testing.T) {
	dir := t.TempDir()
	m := metrics.New(metrics.Options{})
	r := newReceiver(t, dir, audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}, m)
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg, r); err != nil {
		t.Fatal(err)
	}
	check := func(open, held float64) {
		t.Helper()
		g := scrape(t, reg)
		if o, h := g.gauge(t, "kvfence_receiver_scopes,mode=open"), g.gauge(t, "kvfence_receiver_scopes,mode=held"); o != open || h != held {
			t.Fatalf("open %v held %v, want %v %v", o, h, open, held)
		}
	}
	check(0, 0)
	ctx, admin := context.Background(), r.Admin()
	for _, s := range []string{"a", "b", "c"} {
		if _, err := admin.CreateScope(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CreateTarget(ctx, s, s+"-t", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	check(0, 3)
	for _, s := range []string{"a", "b"} {
		req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "x", Target: s + "-t", Set: ptr([]byte(`{}`))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Activate(ctx, kvfence.ActivateRequest{Scope: s, Executor: "w", Claim: "c", Request: req}); err != nil {
			t.Fatal(err)
		}
	}
	check(2, 1)
	if _, err := admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{"a"}, Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	check(1, 2)
}

// Ensure that kvfence_build_info carries the options' labels and the Go
// version, that the certificate's expiry is read at each scrape (so that
// a reload shows at the next one), and that the requests are counted by
// route, status and error code, with their durations.
func TestMetrics_BuildCertificateRequests(t *testing.T) {
	dir := t.TempDir()
	var notAfter atomic.Int64
	notAfter.Store(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).Unix())
	m := metrics.New(metrics.Options{Version: "v1.2.3", Revision: "abc", Engine: "bbolt",
		CertificateExpiry: func() time.Time { return time.Unix(notAfter.Load(), 0) }})
	r := newReceiver(t, dir, audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}, m)
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg, r); err != nil {
		t.Fatal(err)
	}
	m.ObserveRequest("/v1/submit", 200, "", 3*time.Millisecond)
	m.ObserveRequest("/v1/submit", 200, "", time.Millisecond)
	m.ObserveRequest("/v1/submit", 503, "storage_reserve", time.Millisecond)
	m.ObserveRequest("other", 404, "no_such_endpoint", time.Millisecond)
	g := scrape(t, reg)
	if v := g.gauge(t, "kvfence_build_info,engine=bbolt,goversion="+runtime.Version()+",revision=abc,version=v1.2.3"); v != 1 {
		t.Fatalf("build_info %v", v)
	}
	const expiry = "kvfence_tls_certificate_expiry_timestamp_seconds"
	if v := g.gauge(t, expiry); v != float64(notAfter.Load()) {
		t.Fatalf("expiry %v", v)
	}
	notAfter.Add(86400)
	if v := scrape(t, reg).gauge(t, expiry); v != float64(notAfter.Load()) {
		t.Fatalf("expiry after a reload %v, want %v", v, notAfter.Load())
	}
	for key, want := range map[string]float64{
		"kvfence_http_requests_total,code=200,error=,route=/v1/submit":                2,
		"kvfence_http_requests_total,code=503,error=storage_reserve,route=/v1/submit": 1,
		"kvfence_http_requests_total,code=404,error=no_such_endpoint,route=other":     1,
	} {
		if m, ok := g[key]; !ok || m.GetCounter().GetValue() != want {
			t.Errorf("%s = %v, want %v", key, m.GetCounter().GetValue(), want)
		}
	}
	h := g["kvfence_http_request_duration_seconds,route=/v1/submit"].GetHistogram()
	if h.GetSampleCount() != 3 || h.GetSampleSum() < 0.0049 || h.GetSampleSum() > 0.0051 {
		t.Fatalf("submit durations: %d samples summing to %v", h.GetSampleCount(), h.GetSampleSum())
	}
}

// Ensure that a receiver on an engine store, which has no database file
// of its own (etcd), exports no db_size_bytes, rather than a size of 0;
// and that one in a file exports its size.
func TestMetrics_DBSizeOnlyForAFile(t *testing.T) {
	dir := t.TempDir()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	path, anchor := filepath.Join(dir, "r.db"), audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "r", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	for _, file := range []bool{true, false} {
		var r *kvfence.Receiver
		var err error
		if file {
			r, err = kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
		} else {
			e, oerr := boltengine.OpenFile(path, boltengine.FileOptions{})
			if oerr != nil {
				t.Fatal(oerr)
			}
			r, err = kvfence.OpenEngine(e, &kvfence.Options{Key: key, Anchor: anchor})
		}
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewPedanticRegistry()
		if err := metrics.New(metrics.Options{}).Register(reg, r); err != nil {
			t.Fatal(err)
		}
		m, ok := scrape(t, reg)["kvfence_receiver_db_size_bytes"]
		switch {
		case file && (!ok || m.GetGauge().GetValue() <= 0):
			t.Errorf("a database file: db_size_bytes %v", m)
		case !file && ok:
			t.Errorf("an engine store: db_size_bytes exported as %v", m.GetGauge().GetValue())
		}
		r.Close()
	}
}
