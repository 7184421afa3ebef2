package lab

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// observationField returns the field of o whose JSON key is key.
func observationField(t *testing.T, o *Observations, key string) reflect.Value {
	t.Helper()
	v := reflect.ValueOf(o).Elem()
	for i := range v.NumField() {
		if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); tag == key {
			return v.Field(i)
		}
	}
	t.Fatalf("no observation has the key %q", key)
	return reflect.Value{}
}

// expectedObservations sets every observation to its expected value.
func expectedObservations(t *testing.T) Observations {
	t.Helper()
	var o Observations
	for _, e := range expectations {
		f := observationField(t, &o, e.key)
		v := reflect.ValueOf(e.expected)
		if f.Kind() == reflect.Pointer {
			p := reflect.New(v.Type())
			p.Elem().Set(v)
			v = p
		}
		f.Set(v)
	}
	return o
}

// Ensure that every summary key has exactly one expectation, so that no
// key is left without its expected value and meaning.
func TestExpectations_CoverEveryKey(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range expectations {
		if seen[e.key] {
			t.Errorf("%s: two expectations", e.key)
		}
		seen[e.key] = true
		if e.meaning == "" || (e.kind != KindSuccess && e.kind != KindCounterexample && e.kind != KindLimit) {
			t.Errorf("%s: kind %q, meaning %q", e.key, e.kind, e.meaning)
		}
		if e.kind == KindCounterexample && !strings.HasPrefix(e.meaning, "counterexample kept on purpose") {
			t.Errorf("%s: a counterexample's meaning must say it is kept on purpose: %q", e.key, e.meaning)
		}
	}
	typ := reflect.TypeFor[Observations]()
	for i := range typ.NumField() {
		key, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if !seen[key] {
			t.Errorf("summary key %s has no expectation", key)
		}
		delete(seen, key)
	}
	for key := range seen {
		t.Errorf("expectation %s names no summary key", key)
	}
}

// Ensure that a summary whose observations are all the expected ones is
// judged as expected, with each check's expected value, kind and meaning,
// in summary.json's shape beside the flat keys.
func TestJudge_AsExpected(t *testing.T) {
	s := Summary{Observations: expectedObservations(t)}
	s.judge()
	if s.Verdict != VerdictAsExpected || len(s.Unexpected()) != 0 || !strings.HasPrefix(s.VerdictDetail, "all 26 checks as expected") {
		t.Fatalf("verdict %s: %s; unexpected %v", s.Verdict, s.VerdictDetail, s.Unexpected())
	}
	raw, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	c, _ := m["checks"].(map[string]any)["restored_receiver_copy_accepted_old_grant"].(map[string]any)
	if m["restored_receiver_copy_accepted_old_grant"] != true || m["stale_worker_accepted"] != false || m["verdict"] != VerdictAsExpected ||
		c["observed"] != true || c["expected"] != true || c["as_expected"] != true || c["kind"] != KindCounterexample ||
		!strings.HasPrefix(c["meaning"].(string), "counterexample kept on purpose") {
		t.Fatalf("summary.json shape: %s", raw)
	}
	if st := s.Checks["stale_worker_accepted"]; st.Observed != false || st.Expected != false || st.Kind != KindSuccess || !st.AsExpected {
		t.Fatalf("stale_worker_accepted check: %+v", st)
	}
}

// Ensure that any one observation other than its expected value fails the
// overall verdict and is named, for every key.
func TestJudge_UnexpectedObservationFails(t *testing.T) {
	for _, e := range expectations {
		t.Run(e.key, func(t *testing.T) {
			o := expectedObservations(t)
			f := observationField(t, &o, e.key)
			switch f.Kind() {
			case reflect.Bool:
				f.SetBool(!f.Bool())
			case reflect.Uint64:
				f.SetUint(f.Uint() + 1)
			case reflect.String:
				f.SetString("assessed")
			case reflect.Pointer:
				f.Elem().SetBool(!f.Elem().Bool())
			default:
				t.Fatalf("unhandled kind %s", f.Kind())
			}
			s := Summary{Observations: o}
			s.judge()
			if s.Verdict != VerdictNotAsExpected || !reflect.DeepEqual(s.Unexpected(), []string{e.key}) ||
				!strings.Contains(s.VerdictDetail, e.key+" (observed") || s.Checks[e.key].AsExpected {
				t.Fatalf("verdict %s: %s; unexpected %v", s.Verdict, s.VerdictDetail, s.Unexpected())
			}
			var b strings.Builder
			writeVerdict(&b, &s)
			if !strings.Contains(b.String(), "NOT as expected") || !strings.Contains(b.String(), e.key) {
				t.Fatalf("report verdict:\n%s", b.String())
			}
		})
	}
}

// Ensure that the checks of a demonstration that did not run are marked
// not run and count neither way: the verdict covers the rest, its detail
// names them, and the CLI's exit code (Unexpected) does not fail on them;
// a wrong observation elsewhere still fails the verdict; and a check of a
// demonstration that ran but left its observation unset is not as
// expected.
func TestJudge_NotRun(t *testing.T) {
	kube := []string{"k8s_stale_worker_changed_object", "k8s_direct_write_by_worker_accepted", "k8s_current_worker_applied", "k8s_lost_update"}
	o := expectedObservations(t)
	o.K8sStaleWorkerChangedObject, o.K8sDirectWriteByWorkerAccepted, o.K8sCurrentWorkerApplied, o.K8sLostUpdate = nil, nil, nil, nil
	s := Summary{Observations: o, NotRun: map[string]string{kubeDemonstration: "not run: no kube-apiserver"}}
	s.judge()
	if s.Verdict != VerdictAsExpected || len(s.Unexpected()) != 0 || !strings.HasPrefix(s.VerdictDetail, "all 22 checks as expected") ||
		!strings.Contains(s.VerdictDetail, "4 checks NOT RUN") || !strings.Contains(s.VerdictDetail, "no kube-apiserver") {
		t.Fatalf("verdict %s: %s; unexpected %v", s.Verdict, s.VerdictDetail, s.Unexpected())
	}
	for _, k := range kube {
		if c := s.Checks[k]; c.NotRun == "" || c.AsExpected || c.Observed != nil {
			t.Errorf("%s: %+v, want not run", k, c)
		}
	}
	raw, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"k8s_lost_update":null`) || !strings.Contains(string(raw), `"not_run":{"08-kubernetes-target":`) {
		t.Fatalf("summary.json: %s", raw)
	}

	s.StaleWorkerAccepted = true
	s.judge()
	if s.Verdict != VerdictNotAsExpected || !reflect.DeepEqual(s.Unexpected(), []string{"stale_worker_accepted"}) {
		t.Fatalf("a wrong observation beside checks not run: %s: %s", s.Verdict, s.VerdictDetail)
	}

	ran := Summary{Observations: o}
	ran.judge()
	if ran.Verdict != VerdictNotAsExpected || !reflect.DeepEqual(ran.Unexpected(), kube) {
		t.Fatalf("unset observations of a demonstration that ran: %s: %s", ran.Verdict, ran.VerdictDetail)
	}
}
