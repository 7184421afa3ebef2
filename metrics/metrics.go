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
//	kvfence_receiver_audit_seq                        the audit chain's head seq
//	kvfence_receiver_db_size_bytes                    the database file's size
//	kvfence_receiver_scope_epoch{scope}               per scope, opt-in
//	kvfence_receiver_scope_held{scope}                1 when held, opt-in
//
// A decision is counted when its transaction commits, whether or not its
// anchor write then succeeds, so that the counters agree with the audit
// chain rather than with the answers callers received.
package metrics

import (
	"os"

	"github.com/kvfence/kvfence/kvfence"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures New.
type Options struct {
	// PerScope adds the per-scope epoch and held gauges, one series per
	// scope per gauge, read from the receiver at each scrape.
	PerScope bool
}

// Metrics is a kvfence.Observer that counts what a receiver commits, and a
// set of collectors that read its state at each scrape.
type Metrics struct {
	opts          Options
	decisions     *prometheus.CounterVec
	holds         prometheus.Counter
	activations   prometheus.Counter
	commitSeconds prometheus.Histogram
	batchSize     prometheus.Histogram
	anchorWrites  prometheus.Counter
	anchorFails   prometheus.Counter
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
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "commit_batch_size", Help: "Write calls group-committed in one transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		anchorWrites: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "anchor_writes_total", Help: "Anchor writes attempted, one per committed transaction."}),
		anchorFails: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "anchor_write_failures_total", Help: "Anchor writes that failed; their calls were not acknowledged."}),
	}
	m.decisions.WithLabelValues(string(kvfence.Applied), "")
	m.decisions.WithLabelValues(string(kvfence.AlreadyApplied), "")
	for _, r := range reasons {
		m.decisions.WithLabelValues(string(kvfence.Denied), string(r))
	}
	return m
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
		}
	}
}

// Register registers the metrics with reg, together with the gauges that
// read r at each scrape: its audit seq, its file's size and, with
// Options.PerScope, each scope's epoch and mode.
func (m *Metrics) Register(reg prometheus.Registerer, r *kvfence.Receiver) error {
	cs := []prometheus.Collector{m.decisions, m.holds, m.activations, m.commitSeconds, m.batchSize,
		m.anchorWrites, m.anchorFails,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "audit_seq", Help: "The audit chain's head seq."}, func() float64 { return float64(r.Head().Seq) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "db_size_bytes", Help: "The receiver database file's size."}, func() float64 {
			fi, err := os.Stat(r.Path())
			if err != nil {
				return 0
			}
			return float64(fi.Size())
		}),
	}
	if m.opts.PerScope {
		cs = append(cs, &scopeCollector{r: r})
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

var (
	scopeEpochDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "scope_epoch"),
		"A scope's current epoch.", []string{"scope"}, nil)
	scopeHeldDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "scope_held"),
		"1 when a scope is held, 0 when it is open.", []string{"scope"}, nil)
	scopeErrDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "scope_read_errors"),
		"Errors reading the scopes.", nil, nil)
)

// scopeCollector reads every scope's control record at each scrape.
type scopeCollector struct{ r *kvfence.Receiver }

func (c *scopeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- scopeEpochDesc
	ch <- scopeHeldDesc
}

func (c *scopeCollector) Collect(ch chan<- prometheus.Metric) {
	scopes, err := c.r.Scopes()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(scopeErrDesc, err)
		return
	}
	for _, s := range scopes {
		held := 0.0
		if s.Mode == kvfence.ModeHeld {
			held = 1
		}
		ch <- prometheus.MustNewConstMetric(scopeEpochDesc, prometheus.GaugeValue, float64(s.Epoch), s.Scope)
		ch <- prometheus.MustNewConstMetric(scopeHeldDesc, prometheus.GaugeValue, held, s.Scope)
	}
}
