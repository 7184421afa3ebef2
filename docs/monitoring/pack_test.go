// Package monitoring_test holds the monitoring pack (the alert rules and
// the Grafana dashboard beside it) to Prometheus's own parsers and to the
// metrics a running receiver exports. It is a module of its own
// (docs/monitoring/go.mod) so that the Prometheus module it parses with
// stays out of kvfence's build list: a test-only dependency of the main
// module would still raise the versions that kvfence's binaries link.
package monitoring_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/metrics"
	"github.com/kvfence/kvfence/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v2"
)

const (
	rulesFile     = "kvfence-alerts.yml"
	dashboardFile = "kvfence-dashboard.json"
)

// The alerts the pack promises (docs/monitoring/README.md).
var wantAlerts = []string{"KvfenceAnchorWriteFailures", "KvfenceAnchorStale", "KvfenceStorageReserveReached",
	"KvfenceCertificateExpiringSoon", "KvfenceCertificateExpiringVerySoon", "KvfenceStaleRejectionSpike",
	"KvfenceCommitLatencyHigh"}

// targetLabels are added by Prometheus at scrape time, not exported.
var targetLabels = []string{"instance", "job"}

var promql = parser.NewParser(parser.Options{})

// selector is one metric a PromQL expression selects, with the label
// names its matchers name.
type selector struct {
	name   string
	labels []string
}

// selectors parses expr with Prometheus's parser and returns what it
// selects. A selector without a metric name is refused: the test could
// not hold it to the exported metrics.
func selectors(expr string) ([]selector, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []selector
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name == "" {
			bad = fmt.Errorf("%s: a selector without a metric name", vs)
			return nil
		}
		s := selector{name: vs.Name}
		for _, m := range vs.LabelMatchers {
			if m.Name != model.MetricNameLabel {
				s.labels = append(s.labels, m.Name)
			}
		}
		out = append(out, s)
		return nil
	})
	return out, bad
}

// ruleFile is the rule file format Prometheus loads (rulefmt.RuleGroups),
// alerting rules only. Decoded strictly: a field Prometheus would refuse
// as unknown is refused here too.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// templateFuncs are the names of the functions Prometheus gives alert
// templates, so that a template calling them parses (text/template checks
// that a called function exists, not what it does).
var templateFuncs = func() template.FuncMap {
	m := template.FuncMap{}
	for _, name := range []string{"humanize", "humanize1024", "humanizeDuration", "humanizePercentage",
		"humanizeTimestamp", "toTime", "toDuration", "first", "label", "value", "strvalue", "args", "reReplaceAll",
		"safeHtml", "match", "title", "toUpper", "toLower", "graphLink", "tableLink", "sortByLabel", "stripPort",
		"stripDomain", "pathPrefix", "externalURL", "parseDuration", "query", "now"} {
		m[name] = func(...any) any { return nil }
	}
	return m
}()

// ruleExprs reads a rule file as Prometheus loads one: strictly, with
// every group and alert named once, every expression parsed by
// Prometheus's parser, every duration, label name and annotation template
// checked. It returns each alert's expression by its name.
func ruleExprs(content []byte) (map[string]string, error) {
	var f ruleFile
	if err := yaml.UnmarshalStrict(content, &f); err != nil {
		return nil, err
	}
	if len(f.Groups) == 0 {
		return nil, errors.New("no rule groups")
	}
	out := map[string]string{}
	groups := map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" || groups[g.Name] {
			return nil, fmt.Errorf("group %q: empty or repeated name", g.Name)
		}
		groups[g.Name] = true
		for _, d := range []string{g.Interval} {
			if _, err := model.ParseDuration(d); d != "" && err != nil {
				return nil, fmt.Errorf("group %s: interval: %w", g.Name, err)
			}
		}
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				return nil, fmt.Errorf("group %s: a rule without alert or expr", g.Name)
			}
			if _, dup := out[r.Alert]; dup {
				return nil, fmt.Errorf("alert %s defined twice", r.Alert)
			}
			if _, err := promql.ParseExpr(r.Expr); err != nil {
				return nil, fmt.Errorf("alert %s: expr: %w", r.Alert, err)
			}
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if _, err := model.ParseDuration(d); d != "" && err != nil {
					return nil, fmt.Errorf("alert %s: %w", r.Alert, err)
				}
			}
			for k := range r.Labels {
				if !model.LegacyValidation.IsValidLabelName(k) {
					return nil, fmt.Errorf("alert %s: label name %q", r.Alert, k)
				}
			}
			for k, v := range r.Annotations {
				if !model.LegacyValidation.IsValidLabelName(k) {
					return nil, fmt.Errorf("alert %s: annotation name %q", r.Alert, k)
				}
				// Prometheus defines $labels, $value and $externalLabels
				// before the template it expands.
				src := "{{$labels := .Labels}}{{$value := .Value}}{{$externalLabels := .ExternalLabels}}" + v
				if _, err := template.New(k).Funcs(templateFuncs).Option("missingkey=zero").Parse(src); err != nil {
					return nil, fmt.Errorf("alert %s: annotation %s: %w", r.Alert, k, err)
				}
			}
			out[r.Alert] = r.Expr
		}
	}
	return out, nil
}

// grafanaVars are the dashboard variables a panel's expression may use,
// with a value of the kind Grafana puts in their place before it sends
// the query: the parser sees what Prometheus will.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$instance", "receiver-1:9100")

var anyVar = regexp.MustCompile(`\$\{?\w+`)

// labelValuesQuery is a query variable's form, label_values(metric, label).
var labelValuesQuery = regexp.MustCompile(`^label_values\((\w+), *(\w+)\)$`)

// dashboardExprs returns every panel target's expression (rows' panels
// included) after the variables' substitution, by panel title and refId,
// and the metrics that the query variables name.
func dashboardExprs(content []byte) (map[string]string, []selector, error) {
	var d struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(bytes.NewReader(content))
	if err := dec.Decode(&d); err != nil {
		return nil, nil, err
	}
	if len(d.Panels) == 0 {
		return nil, nil, errors.New("no panels")
	}
	out := map[string]string{}
	var walk func([]dashPanel) error
	walk = func(ps []dashPanel) error {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				return fmt.Errorf("panel %q has no query", p.Title)
			}
			for _, t := range p.Targets {
				expr := grafanaVars.Replace(t.Expr)
				if v := anyVar.FindString(expr); v != "" {
					return fmt.Errorf("panel %q uses %s, which the test does not substitute", p.Title, v)
				}
				out[p.Title+"/"+t.RefID] = expr
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, nil, err
	}
	var vars []selector
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			return nil, nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		m := labelValuesQuery.FindStringSubmatch(q.Query)
		if m == nil {
			return nil, nil, fmt.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
		}
		vars = append(vars, selector{name: m[1], labels: []string{m[2]}})
	}
	return out, vars, nil
}

type dashPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// exported maps each series name a scrape carries (a histogram's
// _bucket, _sum and _count as well as its base name) to the label names
// it carries.
type exported map[string][]string

// missing returns why s is not in e, or "".
func (e exported) missing(s selector) string {
	labels, ok := e[s.name]
	if !ok {
		return fmt.Sprintf("metric %s is not exported", s.name)
	}
	for _, l := range s.labels {
		if !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
			return fmt.Sprintf("metric %s has no label %q (it has %v)", s.name, l, labels)
		}
	}
	return ""
}

// parseExposition reads a scrape in the text format.
func parseExposition(r io.Reader) (exported, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := exported{}
	for name, f := range fams {
		var labels []string
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		names := []string{name}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names = append(names, name+"_bucket", name+"_sum", name+"_count")
			labels = append(labels, "le")
		case dto.MetricType_SUMMARY:
			names = append(names, name+"_sum", name+"_count")
			labels = append(labels, "quantile")
		}
		for _, n := range names {
			out[n] = labels
		}
	}
	return out, nil
}

// fixedCaller is the identity every request of the test's server has:
// the test is about the metrics, not the authentication.
type fixedCaller string

func (c fixedCaller) Authenticate(*http.Request) (string, error) { return string(c), nil }

// scrapeRunningReceiver serves a receiver with its metrics as kvfence serve
// does, sends it some traffic (scopes, an activation, an applied submit,
// stale ones, a hold, an unknown path) and returns what its metrics
// handler then exports.
func scrapeRunningReceiver(t *testing.T) exported {
	t.Helper()
	dir := t.TempDir()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	path, anchor := filepath.Join(dir, "r.db"), audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "r", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Options{Version: "v0.0.0-test", Engine: "bbolt",
		CertificateExpiry: func() time.Time { return time.Now().Add(90 * 24 * time.Hour) }})
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	const admin = "spiffe://example.org/ops/alice"
	h, err := server.New(server.Options{Receiver: r, Authenticator: fixedCaller(admin), Admins: []string{admin},
		Logger: slog.New(slog.DiscardHandler), Requests: m})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(h)
	t.Cleanup(api.Close)
	reg := prometheus.NewRegistry()
	if err := m.Register(reg, r); err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	scrape := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(scrape.Close)

	traffic(t, api.URL, admin)

	resp, err := http.Get(scrape.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	ex, err := parseExposition(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// traffic exercises the served API as an operator and its worker would.
func traffic(t *testing.T, base, caller string) {
	t.Helper()
	call := func(method, path, ctype string, body []byte, want int) []byte {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
		}
		return b
	}
	postJSON := func(path string, v any, want int) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return call(http.MethodPost, path, api.ContentJSON, b, want)
	}
	const scope = "configmap/prod/app"
	postJSON(api.PathScopes, map[string]any{"scope": scope}, 200)
	postJSON(api.PathTargets, map[string]any{"scope": scope, "target": scope, "value_b64": []byte(`{}`)}, 200)
	val := []byte(`{"n":1}`)
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "a1", Target: scope, Set: &val})
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Grant string `json:"grant"`
		Epoch uint64 `json:"epoch"`
	}
	if err := json.Unmarshal(postJSON(api.PathActivate, map[string]any{"scope": scope, "executor": caller,
		"claim": "c1", "request_b64": req}, 200), &g); err != nil {
		t.Fatal(err)
	}
	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.Grant,
		Executor: caller, Claim: "c1", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	call(http.MethodPost, api.PathSubmit, api.ContentCBOR, env, 200)
	postJSON(api.PathHold, map[string]any{"scopes": []string{scope}, "reason": "test"}, 200)
	for range 3 {
		call(http.MethodPost, api.PathSubmit, api.ContentCBOR, env, 403) // stale
	}
	call(http.MethodGet, api.PathStatus, "", nil, 200)
	call(http.MethodGet, "/no/such/path", "", nil, 404)
}

// check holds a rule file and a dashboard to Prometheus's parsers and to
// what ex exports, and returns every problem found.
func check(rules, dashboard []byte, ex exported) []string {
	var problems []string
	exprs, err := ruleExprs(rules)
	if err != nil {
		return []string{"rules: " + err.Error()}
	}
	for _, a := range wantAlerts {
		if _, ok := exprs[a]; !ok {
			problems = append(problems, "rules: no alert "+a)
		}
	}
	panels, vars, err := dashboardExprs(dashboard)
	if err != nil {
		return append(problems, "dashboard: "+err.Error())
	}
	for _, v := range vars {
		if why := ex.missing(v); why != "" {
			problems = append(problems, "dashboard variable: "+why)
		}
	}
	for what, all := range map[string]map[string]string{"rule": exprs, "panel": panels} {
		for name, expr := range all {
			sels, err := selectors(expr)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s %s: %v", what, name, err))
				continue
			}
			if len(sels) == 0 {
				problems = append(problems, fmt.Sprintf("%s %s: selects no metric", what, name))
			}
			for _, s := range sels {
				if why := ex.missing(s); why != "" {
					problems = append(problems, fmt.Sprintf("%s %s: %s", what, name, why))
				}
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// Ensure that the pack's rule file is in the format Prometheus loads, that
// every expression in it and in the dashboard parses, and that every
// metric and label they name is exported by a running receiver after
// some traffic.
func TestPack(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dashboard, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	ex := scrapeRunningReceiver(t)
	for _, p := range check(rules, dashboard, ex) {
		t.Error(p)
	}
}

// Ensure that check finds what it is for: a misspelt metric, a label the
// metric does not have, an expression Prometheus cannot parse, an unknown
// field in a rule, a missing alert, a dashboard variable the test cannot
// stand in for, and a misspelt metric in a panel.
func TestCheckFindsProblems(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dashboard, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	ex := scrapeRunningReceiver(t)
	for _, tc := range []struct {
		name               string
		rules, dashboard   string
		from, to, wantText string
	}{
		{"misspelt metric in a rule", "rules", "", "kvfence_receiver_anchor_write_failures_total",
			"kvfence_receiver_anchor_write_failure_total", "metric kvfence_receiver_anchor_write_failure_total is not exported"},
		{"unknown label in a rule", "rules", "", `{error="storage_reserve"}`, `{err="storage_reserve"}`,
			`has no label "err"`},
		{"unparsable rule expression", "rules", "", "> 0.5", "> > 0.5", "parse error"},
		{"unknown field in a rule", "rules", "", "        for: 10m", "        for: 10m\n        fro: 10m", "field fro not found"},
		{"missing alert", "rules", "", "alert: KvfenceCommitLatencyHigh", "alert: KvfenceCommitLatency", "no alert KvfenceCommitLatencyHigh"},
		{"misspelt metric in a panel", "", "dashboard", "kvfence_receiver_scopes{", "kvfence_receiver_scope{",
			"metric kvfence_receiver_scope is not exported"},
		{"unparsable panel expression", "", "dashboard", "sum by (mode)", "sum by mode", "parse error"},
		{"unknown variable in a panel", "", "dashboard", "[$__rate_interval]", "[$__interval]", "does not substitute"},
		{"misspelt histogram suffix", "", "dashboard", "kvfence_receiver_commit_batch_size_sum", "kvfence_receiver_commit_batch_size_total",
			"metric kvfence_receiver_commit_batch_size_total is not exported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, d := string(rules), string(dashboard)
			if tc.rules != "" {
				if !strings.Contains(r, tc.from) {
					t.Fatalf("the rules have no %q", tc.from)
				}
				r = strings.Replace(r, tc.from, tc.to, 1)
			} else {
				if !strings.Contains(d, tc.from) {
					t.Fatalf("the dashboard has no %q", tc.from)
				}
				d = strings.Replace(d, tc.from, tc.to, 1)
			}
			problems := check([]byte(r), []byte(d), ex)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.wantText) }) {
				t.Fatalf("problems %q, want one with %q", problems, tc.wantText)
			}
		})
	}
}
