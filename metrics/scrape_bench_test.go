package metrics_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkScrape measures one gather of a receiver's metrics, which reads
// every scope for kvfence_receiver_scopes, at several numbers of scopes.
// The setup writes without fsync; the scrape only reads.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("scopes=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			_, key, _ := ed25519.GenerateKey(rand.Reader)
			path, anchor := filepath.Join(dir, "r.db"), audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
			if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "r", Key: key, Anchor: anchor}); err != nil {
				b.Fatal(err)
			}
			m := metrics.New(metrics.Options{})
			r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor, Observer: m, NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			for i := range n {
				if _, err := r.Admin().CreateScope(context.Background(), fmt.Sprintf("scope-%06d", i)); err != nil {
					b.Fatal(err)
				}
			}
			reg := prometheus.NewRegistry()
			if err := m.Register(reg, r); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
