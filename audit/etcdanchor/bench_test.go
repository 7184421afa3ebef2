package etcdanchor

import (
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/etcdproc"
)

// BenchmarkStore measures one anchor write, each naming the previous
// anchor as old, as a receiver writes them, on a 3-member loopback cluster
// that fsyncs.
func BenchmarkStore(b *testing.B) {
	c := etcdproc.Start(b, 3)
	s, err := Open(Address{Endpoints: c.Endpoints(), Key: "/kvfence-bench/anchor"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var cur *audit.SignedCheckpoint
	scs := make([]audit.SignedCheckpoint, b.N)
	for i := range scs {
		scs[i] = at(b, uint64(i+1))
	}
	b.ResetTimer()
	for i := range b.N {
		if err := s.Store(cur, scs[i]); err != nil {
			b.Fatal(err)
		}
		cur = &scs[i]
	}
}
