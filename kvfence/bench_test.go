package kvfence

import (
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// BenchmarkSubmit measures one durable fenced decision (a write transaction
// with its audit entry and checkpoint) with the anchor in memory and in a
// file, so the difference is what the external anchor costs. The decision
// is an identical retry (already_applied), which writes as much as an
// applied request minus the target and receipt puts.
func BenchmarkSubmit(b *testing.B) {
	for _, bc := range []struct {
		name   string
		anchor func(dir string) audit.AnchorStore
	}{
		{"anchor=memory", func(string) audit.AnchorStore { return &audit.MemAnchor{} }},
		{"anchor=file", func(dir string) audit.AnchorStore { return audit.FileAnchor{Path: filepath.Join(dir, "a")} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixture(b, defect.Variant{})
			// Reopen the fixture's receiver on a fresh anchor store of
			// this case's kind.
			f.r.Close()
			dir := b.TempDir()
			f.path = filepath.Join(dir, "r.db")
			store := bc.anchor(dir)
			if err := Init(f.path, &InitOptions{ReceiverID: "bench", Key: testKey, Anchor: store}); err != nil {
				b.Fatal(err)
			}
			r, err := Open(f.path, &Options{Key: testKey, Anchor: store, Now: f.clock.Now})
			if err != nil {
				b.Fatal(err)
			}
			f.r, f.admin = r, r.Admin()
			if err := f.admin.CreateScope(f.ctx, fixScope); err != nil {
				b.Fatal(err)
			}
			if err := f.admin.CreateTarget(f.ctx, fixScope, fixTarget, []byte(fixValue)); err != nil {
				b.Fatal(err)
			}
			a := f.activate("worker-a", "claim-1", f.patchRequest("act"))
			if res, err := r.Submit(f.ctx, "worker-a", a.envelope); err != nil || res.Outcome != Applied {
				b.Fatal(res, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := r.Submit(f.ctx, "worker-a", a.envelope)
				if err != nil || res.Outcome != AlreadyApplied {
					b.Fatal(res, err)
				}
			}
		})
	}
}
