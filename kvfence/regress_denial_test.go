package kvfence

import (
	"strings"
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that a denial for a malformed request names an unknown scope only
// by length and digest. decide denies a malformed request before check 1
// (does the scope exist?), and entry then stores env.Scope verbatim, so an
// envelope whose request does not decode gets up to 512 bytes of its own
// text into the chain, over the bound TestDenial_EntrySizeBounded states.
func TestRegress_MalformedRequestUnknownScopeVerbatim(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	long := strings.Repeat("\u00e9", 256) // 512 bytes, no such scope
	env := f.envelope(&Envelope{V: 1, Scope: long, Epoch: 1, Grant: strings.Repeat("ab", 16),
		Executor: "worker-a", Claim: "c", Request: []byte{0xa0}})
	res := f.submit("worker-a", env)
	wantDenied(t, res, ReasonMalformedRequest)
	n := entrySize(t, f.r, res.AuditSeq)
	e := eventAt(t, f.r, res.AuditSeq)
	bound := maxDenialEntry + len("worker-a")
	t.Logf("%d-byte entry (bound %d), scope %d bytes", n, bound, len(e.Scope))
	if strings.Contains(e.Note+e.Scope+e.Grant+e.Action+e.Target, "\u00e9\u00e9\u00e9") || n > bound {
		t.Fatalf("a denial stores an unmatched scope verbatim: %d-byte entry (bound %d), scope %q...", n, bound, e.Scope[:12])
	}
}
