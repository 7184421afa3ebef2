package ledger

import (
	"fmt"
	"testing"
)

// BenchmarkContainment_Read measures reading a containment with n entries
// of other actions' changes after its own: the read checks that none of
// them changed the record, scanning them as bytes.
func BenchmarkContainment_Read(b *testing.B) {
	for _, n := range []int{0, 1000, 4000} {
		b.Run(fmt.Sprint("after=", n), func(b *testing.B) {
			f := newFixture(b)
			l := f.open()
			defer l.Close()
			addRecv(b, l, "r1")
			superseded(b, l, "act", Boundary{"r1", "s"})
			begin(b, l, "act")
			approve(b, l, "busy")
			c := mustClaim(b, l, "busy", "w")
			for range n {
				if _, err := l.Heartbeat(ctx, c.Ref, "w", 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				if _, err := l.Containment("act"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
