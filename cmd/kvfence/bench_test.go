package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/bench"
	"github.com/kvfence/kvfence/internal/etcdtest"
)

// Ensure that a short bench run prints every row once per writer count in
// the documented JSON shape, each with a positive rate, and writes a
// well-formed SVG chart naming every row.
func TestBench(t *testing.T) {
	c := newCLI(t)
	out := c.json(0, "bench", "--duration", "50ms", "--writers", "1", "--dir", c.dir, "--plot", c.path("bench.svg"),
		"--etcd", strings.Join(etcdtest.Start(t).Endpoints(), ","))
	golden(t, "bench-shape.json", jsonShape(t, c.last))
	results, _ := out["results"].([]any)
	if len(results) != len(bench.Rows()) {
		t.Fatalf("%d results, want %d:\n%s", len(results), len(bench.Rows()), c.last)
	}
	for i, r := range results {
		row := r.(map[string]any)
		if row["name"] != bench.Rows()[i] || row["writers"] != 1.0 {
			t.Errorf("result %d: %v", i, row)
		}
		for _, k := range []string{"ops_per_s", "p50_us", "p99_us"} {
			if v, _ := row[k].(float64); v <= 0 {
				t.Errorf("%s: %s = %v, want > 0", row["name"], k, row[k])
			}
		}
		if v, ok := row["fsyncs_per_op"].(float64); !ok || v < 0 {
			t.Errorf("%s: fsyncs_per_op = %v", row["name"], row["fsyncs_per_op"])
		}
	}
	svg, err := os.ReadFile(c.path("bench.svg"))
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("bench.svg is not well-formed XML: %v", err)
		}
	}
	for _, name := range bench.Rows() {
		if !bytes.Contains(svg, []byte(">"+name+"<")) {
			t.Errorf("bench.svg has no legend for %s", name)
		}
	}
	// Nothing is left behind in --dir but the chart.
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "kvfence-bench-") {
			t.Errorf("%s left behind", e.Name())
		}
	}
}

// Ensure that the text output is a table with a header and the rows asked
// for, and that bad arguments are usage errors.
func TestBenchText(t *testing.T) {
	c := newCLI(t)
	r := c.must(0, "bench", "--duration", "10ms", "--writers", "2,1", "--rows", "fdatasync,bbolt_nosync_not_durable",
		"--repeat", "2", "--dir", c.dir)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 7 || !strings.HasPrefix(lines[1], "name ") || !strings.HasSuffix(lines[1], "ops/s of each pass") ||
		!strings.HasPrefix(lines[2], "fdatasync ") || !strings.HasPrefix(lines[4], "bbolt_nosync_not_durable ") ||
		!strings.HasPrefix(lines[6], "peak heap") {
		t.Fatalf("output:\n%s", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("stderr is not a terminal, yet got:\n%s", r.stderr)
	}
	for _, tt := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--writers", "0"}, "--writers"},
		{[]string{"--writers", "1,x"}, "--writers"},
		{[]string{"--writers", ""}, "--writers"},
		{[]string{"--duration", "0s"}, "--duration must be positive"},
		{[]string{"--repeat", "0"}, "--repeat must be at least 1"},
		{[]string{"--rows", "bbolt_nosync"}, "unknown row"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--rows", "etcd_txn"}, "needs an etcd cluster"},
		{[]string{"--etcd", "127.0.0.1:2379"}, "want http://HOST:PORT"},
		{[]string{"--etcd", "ftp://127.0.0.1:2379"}, "want http://HOST:PORT"},
		{[]string{"--etcd", "http://127.0.0.1:2379/x"}, "--etcd"},
		{[]string{"--etcd", "http://u@127.0.0.1:2379"}, "user information"},
		{[]string{"--etcd", "http://127.0.0.1:2379,http://127.0.0.1:2379"}, "named twice"},
		{[]string{"--etcd", "http://127.0.0.1:2379,https://127.0.0.1:2380"}, "mixes"},
		{[]string{"--etcd", "http://127.0.0.1:2379", "--etcd-ca", "ca.pem"}, "use https://"},
		{[]string{"--etcd", "https://127.0.0.1:2379", "--etcd-key", "k.pem"}, "go together"},
		{[]string{"--etcd-ca", "ca.pem"}, "go with --etcd"},
	} {
		r := c.must(ExitUsage, append([]string{"bench", "--dir", c.dir}, tt.args...)...)
		if !strings.Contains(r.stderr, tt.stderr) {
			t.Errorf("bench %v: stderr %q, want %q", tt.args, r.stderr, tt.stderr)
		}
	}
	c.must(ExitError, "bench", "--dir", c.path("missing"), "--duration", "10ms", "--rows", "fdatasync")
}

// jsonShape replaces every number, string and boolean in a JSON document
// with its type's name, keeping the keys, so that a golden file fixes the
// shape of output whose values differ between runs.
func jsonShape(t *testing.T, doc string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	var shape func(any) any
	shape = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				v[k] = shape(e)
			}
			return v
		case []any:
			// One element stands for all: they share a shape.
			if len(v) > 0 {
				return []any{shape(v[0])}
			}
			return v
		case float64:
			return "number"
		case string:
			return "string"
		case bool:
			return "bool"
		default:
			return v
		}
	}
	var b strings.Builder
	if err := writeJSON(&b, shape(v)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Ensure that bench's help describes every row it can run.
func TestBenchUsageNamesEveryRow(t *testing.T) {
	c := newCLI(t)
	r := c.must(0, "bench", "-h")
	for _, name := range bench.Rows() {
		found := false
		for _, line := range strings.Split(r.stderr, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == name {
				found = true
			}
		}
		if !found {
			t.Errorf("bench -h does not describe row %s:\n%s", name, r.stderr)
		}
	}
}
