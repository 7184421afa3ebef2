package kvfence

import (
	"bytes"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that a grant read back names the activate entry that created it.
func TestGrant_AuditSeq(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
	f.hold("next")
	b := f.activate("worker-b", "claim-2", f.patchRequest("act-2"))
	for _, reopen := range []bool{false, true} {
		if reopen {
			f.reopen()
		}
		g, err := f.r.Grant(b.grant.ID)
		if err != nil {
			t.Fatal(err)
		}
		if g.AuditSeq == 0 || g.AuditSeq != b.grant.AuditSeq {
			t.Fatalf("Grant(%s).AuditSeq = %d, Activate said %d", b.grant.ID, g.AuditSeq, b.grant.AuditSeq)
		}
		var found bool
		f.r.Events(g.AuditSeq, func(e Event) bool {
			found = e.Seq == g.AuditSeq && e.Kind == KindActivate && e.Grant == g.ID
			return false
		})
		if !found {
			t.Fatalf("audit entry %d is not the activation of grant %s", g.AuditSeq, g.ID)
		}
	}
}

// Ensure that the record of a grant activated before its audit seq was
// kept encodes as it did, so that its state digest is unchanged, and still
// decodes.
func TestGrantRecord_WithoutAuditSeq(t *testing.T) {
	old := grantRecord{ID: "g", Scope: "s", Epoch: 1, Executor: "w", Claim: "c", Action: "a",
		RequestSHA256: make([]byte, 32), NotBefore: 1, NotAfter: 2, CreatedAt: 1}
	raw, err := encodeCanonical(&old)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("audit_seq")) {
		t.Fatalf("a grant record without an audit seq encodes the key: %x", raw)
	}
	var got grantRecord
	if err := decodeRecord(bucketGrants, []byte("g"), raw, &got); err != nil || got.AuditSeq != 0 {
		t.Fatalf("decode = %+v, %v", got, err)
	}
	withSeq := old
	withSeq.AuditSeq = 9
	raw2, _ := encodeCanonical(&withSeq)
	if err := decodeRecord(bucketGrants, []byte("g"), raw2, &got); err != nil || got.AuditSeq != 9 {
		t.Fatalf("decode = %+v, %v", got, err)
	}
}

// Ensure that Status and Scopes carry the active grant and say when its
// window is over by the receiver's clock.
func TestStatus_ActiveGrant(t *testing.T) {
	for _, tc := range []struct {
		name        string
		after       time.Duration // clock moves after activation
		hold        bool
		wantGrant   bool
		wantExpired bool
	}{
		{"open, fresh", 0, false, true, false},
		{"open, a nanosecond before expiry", DefaultGrantTTL - time.Nanosecond, false, true, false},
		{"open, at expiry", DefaultGrantTTL, false, true, true},
		{"open, long expired", 48 * time.Hour, false, true, true},
		{"held", 0, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			a := f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
			if tc.hold {
				f.hold("done")
			}
			f.clock.Add(tc.after)
			st, err := f.r.Status(fixScope)
			if err != nil {
				t.Fatal(err)
			}
			all, err := f.r.Scopes()
			if err != nil || len(all) != 1 {
				t.Fatalf("Scopes = %v, %v", all, err)
			}
			for _, st := range []ScopeStatus{st, all[0]} {
				if (st.Grant != nil) != tc.wantGrant || st.GrantExpired != tc.wantExpired {
					t.Fatalf("status grant %+v expired %v, want grant %v expired %v", st.Grant, st.GrantExpired, tc.wantGrant, tc.wantExpired)
				}
				if st.Grant == nil {
					continue
				}
				g := st.Grant
				if g.ID != a.grant.ID || g.Executor != "worker-a" || g.Claim != "claim-1" || g.Action != "act-1" ||
					!g.NotAfter.Equal(a.grant.NotAfter) || g.AuditSeq != a.grant.AuditSeq {
					t.Fatalf("status grant %+v, activated %+v", g, a.grant)
				}
			}
		})
	}
}
