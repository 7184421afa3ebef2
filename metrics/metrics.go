// Package metrics exports a kvfence receiver's measurements in the
// Prometheus format, through github.com/prometheus/client_golang. It is a
// package of its own so that an embedder of kvfence that wants no metrics
// links no metrics library: the receiver only knows kvfence.Observer.
//
// Names follow etcd's style: namespace kvfence, subsystem receiver,
// counters ending in _total, durations in _seconds, and no label whose
// values are unbounded. Per-scope gauges (a label per scope name) exist
// only when Options.PerScope asks for them, since the number of scopes is
// the operator's to bound.
//
//	kvfence_receiver_decisions_total{outcome,reason}  Submit decisions recorded
//	kvfence_receiver_holds_total                      scopes held
//	kvfence_receiver_activations_total                grants activated
//	kvfence_receiver_commit_duration_seconds          transaction start to anchor durable
//	kvfence_receiver_commit_batch_size                write calls per transaction
//	kvfence_receiver_anchor_writes_total              anchor writes attempted
//	kvfence_receiver_anchor_write_failures_total      anchor writes that failed
//	kvfence_receiver_anchor_last_success_timestamp_seconds
//	                                                  when an anchor write last succeeded
//	kvfence_receiver_anchor_write_failing             1 while the last anchor write failed
//	kvfence_receiver_anchor_write_in_progress_seconds age of the anchor write in progress
//	kvfence_receiver_audit_seq                        the audit chain's head seq
//	kvfence_receiver_db_size_bytes                    the database file's size (bbolt only)
//	kvfence_receiver_scopes{mode}                     scopes open and held
//	kvfence_receiver_scope_epoch{scope}               per scope, opt-in
//	kvfence_receiver_scope_held{scope}                1 when held, opt-in
//	kvfence_http_requests_total{route,code,error}     served HTTP requests
//	kvfence_http_request_duration_seconds{route}      their handling time
//	kvfence_tls_certificate_expiry_timestamp_seconds  the serving certificate's NotAfter
//	kvfence_build_info{version,revision,goversion,engine}  always 1
//
// The db_size_bytes gauge exists only for a receiver in a database file: a
// receiver on an engine store (etcd) has no file of its own to measure,
// and etcd exports its own database size. The scope gauges read every
// scope's control record, in one read transaction that takes no write
// lock; the counts by mode may be reused for a while on a receiver with
// many scopes (scopeCollector).
//
// A decision is counted when its transaction commits, whether or not its
// anchor write then succeeds, so that the counters agree with the audit
// chain rather than with the answers callers received.
package metrics

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/kvfence"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures New.
type Options struct {
	// PerScope adds the per-scope epoch and held gauges, one series per
	// scope per gauge, read from the receiver at each scrape.
	PerScope bool
	// Version, Revision and Engine are kvfence_build_info's labels: the
	// binary's version and VCS revision, and the store the receiver runs
	// on ("bbolt", "etcd"). An empty Version is shown as "unknown".
	Version, Revision, Engine string
	// CertificateExpiry, if set, is read at each scrape for
	// kvfence_tls_certificate_expiry_timestamp_seconds: the NotAfter of
	// the certificate the server presents now, so that a reload shows at
	// the next scrape. A zero time leaves the gauge out of that scrape.
	CertificateExpiry func() time.Time
}

// Metrics is a kvfence.Observer that counts what a receiver commits, and a
// set of collectors that read its state at each scrape. Its
// ObserveRequest method counts the requests of a server.Handler.
type Metrics struct {
	opts          Options
	decisions     *prometheus.CounterVec
	holds         prometheus.Counter
	activations   prometheus.Counter
	commitSeconds prometheus.Histogram
	batchSize     prometheus.Histogram
	anchorWrites  prometheus.Counter
	anchorFails   prometheus.Counter
	// anchorOK is the unix time, in nanoseconds, of the last anchor write
	// that succeeded; 0 until one has.
	anchorOK       atomic.Int64
	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
}

const (
	namespace = "kvfence"
	subsystem = "receiver"
)

// reasons are the denial codes whose series exist from the start, so that
// a rate over a reason that has not happened yet is 0, not absent.
var reasons = []kvfence.Reason{kvfence.ReasonMalformedEnvelope, kvfence.ReasonMalformedRequest,
	kvfence.ReasonUnknownScope, kvfence.ReasonReceiverHeld, kvfence.ReasonStaleEpoch, kvfence.ReasonInactiveGrant,
	kvfence.ReasonUnknownGrant, kvfence.ReasonExecutorMismatch, kvfence.ReasonClaimMismatch,
	kvfence.ReasonRequestMismatch, kvfence.ReasonGrantNotYetValid, kvfence.ReasonGrantExpired,
	kvfence.ReasonActionReuseConflict, kvfence.ReasonUnknownTarget, kvfence.ReasonPreconditionFailed}

// durationBuckets span 100µs to about 3s: a commit or a request on a
// healthy disk takes milliseconds, one waiting on a slow anchor seconds.
var durationBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16)

// New returns the metrics, not yet registered.
func New(opts Options) *Metrics {
	m := &Metrics{opts: opts,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "decisions_total", Help: "Submit decisions recorded in the audit chain, by outcome and denial reason."},
			[]string{"outcome", "reason"}),
		holds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "holds_total", Help: "Scopes held (a hold of several scopes counts each)."}),
		activations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "activations_total", Help: "Grants activated."}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "commit_duration_seconds", Help: "Time from the start of a write transaction to its anchor write's end.",
			Buckets: durationBuckets}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "commit_batch_size", Help: "Write calls group-committed in one transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		anchorWrites: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "anchor_writes_total", Help: "Anchor writes attempted, one per committed transaction."}),
		anchorFails: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "anchor_write_failures_total", Help: "Anchor writes that failed; their calls were not acknowledged."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "http",
			Name: "requests_total",
			Help: "HTTP requests answered, by route (a registered path, or \"other\"), status code and error code (empty for a result)."},
			[]string{"route", "code", "error"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "http",
			Name: "request_duration_seconds", Help: "Time from a request's arrival at the handler to its answer, by route.",
			Buckets: durationBuckets}, []string{"route"}),
	}
	m.decisions.WithLabelValues(string(kvfence.Applied), "")
	m.decisions.WithLabelValues(string(kvfence.AlreadyApplied), "")
	for _, r := range reasons {
		m.decisions.WithLabelValues(string(kvfence.Denied), string(r))
	}
	return m
}

// ObserveRequest counts one answered HTTP request. route must come from a
// bounded set (server.Handler passes a registered path or "other", never
// the path a caller sent), and so must errCode; they become label values.
// It implements server.RequestObserver.
func (m *Metrics) ObserveRequest(route string, status int, errCode string, d time.Duration) {
	m.requests.WithLabelValues(route, statusText(status), errCode).Inc()
	m.requestSeconds.WithLabelValues(route).Observe(d.Seconds())
}

// statusTexts holds the label value of every status a server can send, so
// that counting a request formats no number.
var statusTexts = func() []string {
	s := make([]string, 600)
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func statusText(status int) string {
	if status >= 0 && status < len(statusTexts) {
		return statusTexts[status]
	}
	return "other"
}

// Committed counts one committed transaction. It implements
// kvfence.Observer.
func (m *Metrics) Committed(s kvfence.CommitStats) {
	for _, d := range s.Decisions {
		m.decisions.WithLabelValues(string(d.Outcome), string(d.Reason)).Inc()
	}
	m.holds.Add(float64(s.HeldScopes))
	m.activations.Add(float64(s.Activations))
	m.commitSeconds.Observe(s.Duration.Seconds())
	m.batchSize.Observe(float64(s.Calls))
	if s.Anchored {
		m.anchorWrites.Inc()
		if s.AnchorErr != nil {
			m.anchorFails.Inc()
		} else {
			m.anchorOK.Store(time.Now().UnixNano())
		}
	}
}

// Register registers the metrics with reg, together with the gauges that
// read r at each scrape: its audit seq, its anchor writes' state, its
// scopes by mode, its file's size (for a receiver in a database file)
// and, with Options.PerScope, each scope's epoch and mode; and
// kvfence_build_info and, with Options.CertificateExpiry, the
// certificate's expiry.
func (m *Metrics) Register(reg prometheus.Registerer, r *kvfence.Receiver) error {
	version := m.opts.Version
	if version == "" {
		version = "unknown"
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "build_info",
		Help: "Always 1; its labels name the build and the store it runs on.",
		ConstLabels: prometheus.Labels{"version": version, "revision": m.opts.Revision,
			"goversion": runtime.Version(), "engine": m.opts.Engine}})
	build.Set(1)
	cs := []prometheus.Collector{m.decisions, m.holds, m.activations, m.commitSeconds, m.batchSize,
		m.anchorWrites, m.anchorFails, m.requests, m.requestSeconds, build,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "audit_seq", Help: "The audit chain's head seq."}, func() float64 { return float64(r.Head().Seq) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "anchor_last_success_timestamp_seconds",
			Help: "Unix time at which an anchor write last succeeded; 0 if none has since the metrics began."},
			func() float64 { return float64(m.anchorOK.Load()) / 1e9 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "anchor_write_failing",
			Help: "1 while the last anchor write failed and none has succeeded since: commits are not acknowledged."},
			func() float64 { return boolValue(r.Readiness().AnchorWriteFailed) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "anchor_write_in_progress_seconds",
			Help: "How long the anchor write in progress has been running; 0 when none is."},
			func() float64 {
				since := r.Readiness().AnchorWriteSince
				if since.IsZero() {
					return 0
				}
				return time.Since(since).Seconds()
			}),
		&scopeCollector{r: r, perScope: m.opts.PerScope},
	}
	if path := r.Path(); path != "" {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "db_size_bytes", Help: "The receiver database file's size."}, func() float64 {
			fi, err := os.Stat(path)
			if err != nil {
				return 0
			}
			return float64(fi.Size())
		}))
	}
	if m.opts.CertificateExpiry != nil {
		cs = append(cs, &expiryCollector{notAfter: m.opts.CertificateExpiry})
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var expiryDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "tls", "certificate_expiry_timestamp_seconds"),
	"Unix time at which the certificate the server presents expires (its NotAfter).", nil, nil)

// expiryCollector reads the serving certificate's expiry at each scrape.
type expiryCollector struct{ notAfter func() time.Time }

func (c *expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- expiryDesc }

func (c *expiryCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.notAfter()
	if t.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(t.Unix()))
}

var (
	scopesDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "scopes"),
		"Scopes by mode: open (a grant is active) or held.", []string{"mode"}, nil)
	scopeEpochDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "scope_epoch"),
		"A scope's current epoch.", []string{"scope"}, nil)
	scopeHeldDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "scope_held"),
		"1 when a scope is held, 0 when it is open.", []string{"scope"}, nil)
	scopeErrDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "scope_read_errors"),
		"Errors reading the scopes.", nil, nil)
)

// scopeCollector reads every scope's control record at each scrape, once
// for the counts by mode and, with perScope, the per-scope gauges.
//
// Without perScope, a count that took long is reused for a while: reading
// every scope costs about 10µs a scope (BenchmarkScrape), so a receiver
// of a million scopes would otherwise spend ten seconds of every scrape
// interval on it. A count that took over countSlow is reused until it is
// countReuse times as old as it took to make, which keeps the reading
// under a tenth of the time, and a small receiver's count always current.
type scopeCollector struct {
	r        *kvfence.Receiver
	perScope bool

	mu         sync.Mutex
	open, held float64
	countedAt  time.Time
	countTook  time.Duration
	countErr   error
}

const (
	countSlow  = 10 * time.Millisecond
	countReuse = 10
)

func (c *scopeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- scopesDesc
	if c.perScope {
		ch <- scopeEpochDesc
		ch <- scopeHeldDesc
	}
}

func (c *scopeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perScope || c.countTook < countSlow || time.Since(c.countedAt) >= countReuse*c.countTook {
		c.count(ch)
	}
	if c.countErr != nil {
		ch <- prometheus.NewInvalidMetric(scopeErrDesc, c.countErr)
		return
	}
	ch <- prometheus.MustNewConstMetric(scopesDesc, prometheus.GaugeValue, c.open, string(kvfence.ModeOpen))
	ch <- prometheus.MustNewConstMetric(scopesDesc, prometheus.GaugeValue, c.held, string(kvfence.ModeHeld))
}

// count reads the scopes, and sends the per-scope gauges with perScope.
func (c *scopeCollector) count(ch chan<- prometheus.Metric) {
	start := time.Now()
	scopes, err := c.r.Scopes()
	c.countedAt, c.countTook, c.countErr = start, time.Since(start), err
	if err != nil {
		return
	}
	c.open, c.held = 0, 0
	for _, s := range scopes {
		isHeld := s.Mode != kvfence.ModeOpen
		if isHeld {
			c.held++
		} else {
			c.open++
		}
		if c.perScope {
			ch <- prometheus.MustNewConstMetric(scopeEpochDesc, prometheus.GaugeValue, float64(s.Epoch), s.Scope)
			ch <- prometheus.MustNewConstMetric(scopeHeldDesc, prometheus.GaugeValue, boolValue(isHeld), s.Scope)
		}
	}
}
