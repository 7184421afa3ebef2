package metrics_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/metrics"
	"github.com/kvfence/kvfence/server"
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics are the receiver's Observer, so they count what its
// transactions commit, and they are registered with the receiver so that
// the gauges read its state at each scrape. Here a denial is counted.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "metrics-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "receiver.db")
	anchor := audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)) // a real key comes from keyfile
	// Only the public half of the recovery key, held apart, is recorded.
	recovery := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize)).Public().(ed25519.PublicKey)
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "example", Key: key, Anchor: anchor,
		RecoveryKey: recovery}); err != nil {
		log.Fatal(err)
	}
	m := metrics.New(metrics.Options{})
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor, Observer: m})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg, r); err != nil {
		log.Fatal(err)
	}

	env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: "no-such-scope", Epoch: 1,
		Grant: "g", Executor: "worker-a", Claim: "c", Request: []byte("not a request")})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := r.Submit(context.Background(), "worker-a", env); err != nil {
		log.Fatal(err)
	}

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "kvfence_receiver_decisions_total":
			for _, s := range f.GetMetric() {
				if v := s.GetCounter().GetValue(); v > 0 {
					fmt.Println(f.GetName(), s.GetLabel()[0].GetValue(), s.GetLabel()[1].GetValue(), v)
				}
			}
		case "kvfence_receiver_audit_seq":
			fmt.Println(f.GetName(), f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output:
	// kvfence_receiver_audit_seq 2
	// kvfence_receiver_decisions_total denied malformed_request 1
}

// The metrics also count a served receiver's requests: given to
// server.Options as its Requests observer, they label each request by
// the route it was for, a path the handler serves or "other", never by
// the path the caller sent.
func ExampleMetrics_ObserveRequest() {
	dir, err := os.MkdirTemp("", "metrics-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "receiver.db")
	anchor := audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)) // a real key comes from keyfile
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "example", Key: key, Anchor: anchor}); err != nil {
		log.Fatal(err)
	}
	m := metrics.New(metrics.Options{Version: "v1.0.0", Engine: "bbolt"})
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor, Observer: m})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg, r); err != nil {
		log.Fatal(err)
	}
	h, err := server.New(server.Options{Receiver: r, Authenticator: server.UnixPeer{UIDs: []uint32{0}},
		Requests: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range []string{"/v1/status", "/v1/no-such-endpoint-" + strings.Repeat("x", 20)} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
	}
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "kvfence_http_requests_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			fmt.Println(strings.Join(labels, " "), s.GetCounter().GetValue())
		}
	}
	// Output:
	// code=401 error=unauthenticated route=/v1/status 1
	// code=401 error=unauthenticated route=other 1
}
