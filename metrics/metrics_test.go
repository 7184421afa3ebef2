package metrics_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

const scope = "configmap/prod/backup-policy"

// Ensure that the decisions counted per outcome and reason, the holds, the
// activations and the commit histograms agree with the audit chain, entry
// for entry, after a mix of decisions, some of them group-committed.
func TestMetrics_AgreeWithTheChain(t *testing.T) {
	dir := t.TempDir()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	path, anchor := filepath.Join(dir, "r.db"), audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "r", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Options{PerScope: true})
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg, r); err != nil {
		t.Fatal(err)
	}
	startSeq := r.Head().Seq
	ctx, admin := context.Background(), r.Admin()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = admin.CreateScope(ctx, scope)
	must(err)
	_, err = admin.CreateScope(ctx, "other")
	must(err)
	_, err = admin.CreateTarget(ctx, scope, scope, []byte(`{"n":1}`))
	must(err)
	req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "a1", Target: scope, Set: ptr([]byte(`{"n":2}`))})
	must(err)
	envelope := func(g kvfence.Grant, executor, claim string) []byte {
		b, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.ID,
			Executor: executor, Claim: claim, Request: req})
		must(err)
		return b
	}
	submit := func(caller string, env []byte) {
		t.Helper()
		if _, err := r.Submit(ctx, caller, env); err != nil {
			t.Fatal(err)
		}
	}
	gA, err := admin.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: "a", Claim: "ca", Request: req})
	must(err)
	envA := envelope(gA, "a", "ca")
	submit("b", envA)                       // executor_mismatch
	submit("a", envelope(gA, "a", "wrong")) // claim_mismatch
	submit("a", []byte{0xff})               // malformed_envelope
	submit("a", envA)                       // applied
	submit("a", envA)                       // already_applied
	_, err = admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope, "other"}, Reason: "incident"})
	must(err)
	gB, err := admin.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: "b", Claim: "cb", Request: req})
	must(err)
	// Many stale submits at once, so that some share a transaction.
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			env := envA // stale_or_unknown_epoch
			if i%2 == 1 {
				env = envelope(kvfence.Grant{ID: gA.ID, Epoch: gB.Epoch}, "a", "ca") // inactive_grant
			}
			if _, err := r.Submit(ctx, "a", env); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	submit("b", envelope(gB, "b", "cb")) // already_applied: same request, same action

	// What the chain says.
	want := map[string]float64{}
	var holds, activations, entries float64
	must(r.Events(startSeq+1, func(ev kvfence.Event) bool {
		entries++
		switch ev.Kind {
		case kvfence.KindSubmit:
			want[ev.Outcome+"/"+ev.Reason]++
		case kvfence.KindHold:
			holds++
		case kvfence.KindActivate:
			activations++
		}
		return true
	}))
	if len(want) < 7 {
		t.Fatalf("only %d kinds of decision in the chain: %v", len(want), want)
	}

	fams, err := reg.Gather()
	must(err)
	got := map[string]float64{}
	values := map[string]float64{}
	var commits, batchSum float64
	for _, f := range fams {
		for _, mt := range f.Metric {
			switch f.GetName() {
			case "kvfence_receiver_decisions_total":
				if v := mt.GetCounter().GetValue(); v != 0 {
					got[label(mt, "outcome")+"/"+label(mt, "reason")] = v
				}
			case "kvfence_receiver_commit_batch_size":
				commits, batchSum = float64(mt.GetHistogram().GetSampleCount()), mt.GetHistogram().GetSampleSum()
			case "kvfence_receiver_commit_duration_seconds":
				values[f.GetName()] = float64(mt.GetHistogram().GetSampleCount())
			case "kvfence_receiver_scope_epoch", "kvfence_receiver_scope_held":
				values[f.GetName()+"/"+label(mt, "scope")] = mt.GetGauge().GetValue()
			default:
				if mt.Counter != nil {
					values[f.GetName()] = mt.GetCounter().GetValue()
				} else if mt.Gauge != nil {
					values[f.GetName()] = mt.GetGauge().GetValue()
				}
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("decisions counted %v\nthe chain has    %v", got, want)
	}
	for name, v := range map[string]float64{
		"kvfence_receiver_holds_total":                 holds,
		"kvfence_receiver_activations_total":           activations,
		"kvfence_receiver_anchor_writes_total":         commits,
		"kvfence_receiver_anchor_write_failures_total": 0,
		"kvfence_receiver_commit_duration_seconds":     commits,
		"kvfence_receiver_audit_seq":                   float64(r.Head().Seq),
		"kvfence_receiver_scope_epoch/" + scope:        2,
		"kvfence_receiver_scope_held/" + scope:         0,
		"kvfence_receiver_scope_epoch/other":           2,
		"kvfence_receiver_scope_held/other":            1,
	} {
		if values[name] != v {
			t.Errorf("%s = %v, want %v", name, values[name], v)
		}
	}
	// Every call here wrote exactly one entry, except the hold of two
	// scopes, which wrote two.
	if batchSum != entries-1 {
		t.Errorf("batch sizes sum to %v over %v commits; %v entries were written", batchSum, commits, entries)
	}
	if values["kvfence_receiver_db_size_bytes"] <= 0 {
		t.Error("no database size")
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func ptr[T any](v T) *T { return &v }
