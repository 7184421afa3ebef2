package ledger

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	bolt "go.etcd.io/bbolt"
)

// fakeRecv is a receiver's signing side: it signs hold acknowledgments and
// checkpoints as a receiver would.
type fakeRecv struct {
	name, id string
	priv     ed25519.PrivateKey
}

func keyFor(label string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("test receiver key " + label))
	return ed25519.NewKeyFromSeed(seed[:])
}

// addRecv registers a served receiver named name with its own key.
func addRecv(t testing.TB, l *Ledger, name string) *fakeRecv {
	t.Helper()
	r := &fakeRecv{name: name, id: "id-" + name, priv: keyFor(name)}
	if _, err := l.AddReceiver(ctx, AddReceiverRequest{Name: name, Server: "https://" + name + ".example:8443", ReceiverID: r.id,
		PublicKey: r.priv.Public().(ed25519.PublicKey), Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	return r
}

// ackFor returns the acknowledged result of boundary b, its hold taking
// the scope from prev to prev+1, signed by r.
func (r *fakeRecv) ackFor(t testing.TB, b BoundaryContainment, prev uint64) BoundaryContainment {
	t.Helper()
	at := time.Date(2026, 1, 1, 12, 0, int(prev), 0, time.UTC)
	cp := audit.Checkpoint{Root: audit.Hash{0x7e}, Receiver: r.id, Seq: 40 + prev, Head: sha256.Sum256([]byte(b.HoldID)), EpochHighWater: prev + 1, At: at.UnixNano()}
	a := audit.HoldAck{Receiver: r.id, Scope: b.Scope, HoldID: b.HoldID, PreviousEpoch: prev, Epoch: prev + 1, AuditSeq: 39 + prev,
		RequestedAt: at.UnixNano() - 1, At: at.UnixNano(), CheckpointSeq: cp.Seq, CheckpointHead: cp.Head}
	return r.signed(t, b, a, cp)
}

// signed returns b acknowledged by a and cp, both signed by r, with the
// result's epochs and time taken from a.
func (r *fakeRecv) signed(t testing.TB, b BoundaryContainment, a audit.HoldAck, cp audit.Checkpoint) BoundaryContainment {
	t.Helper()
	sa, err := audit.SignHoldAck(r.priv, a)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := audit.Sign(r.priv, cp)
	if err != nil {
		t.Fatal(err)
	}
	b.Ack, err = sa.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if b.Checkpoint, err = sc.Marshal(); err != nil {
		t.Fatal(err)
	}
	b.Result, b.PreviousEpoch, b.InstalledEpoch = BoundaryAcknowledged, a.PreviousEpoch, a.Epoch
	b.AcknowledgedAt, b.HoldRequestedAt = time.Unix(0, a.At).UTC(), time.Unix(0, a.RequestedAt).UTC()
	return b
}

// superseded approves action with bounds, claims it for worker-a and takes
// it over for worker-b; it returns worker-a's claim.
func superseded(t testing.TB, l *Ledger, action string, bounds ...Boundary) Claim {
	t.Helper()
	if _, err := l.Approve(ctx, ApproveRequest{Action: action, RequestSHA256: sha256.Sum256([]byte(action)), Approver: "alice",
		TTL: time.Hour, Boundaries: bounds}); err != nil {
		t.Fatal(err)
	}
	old := mustClaim(t, l, action, "worker-a")
	if _, err := l.Takeover(ctx, TakeoverRequest{Action: action, Operator: "op", Reason: "paused", Worker: "worker-b"}); err != nil {
		t.Fatal(err)
	}
	return old
}

func begin(t testing.TB, l *Ledger, action string) Containment {
	t.Helper()
	c, err := l.BeginContainment(ctx, action, "worker-a paused")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// unchanged fails the test if the ledger's head moved: a refusal writes
// nothing.
func unchanged(t testing.TB, l *Ledger, before audit.Head, what string) {
	t.Helper()
	if h := l.Head(); h != before {
		t.Fatalf("%s: head moved from %d to %d on a refusal", what, before.Seq, h.Seq)
	}
}

// Ensure that AddReceiver refuses each malformed registration, a second
// registration of a name and a key pinned for another name, writing nothing.
func TestAddReceiver_Refusals(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	first := addRecv(t, l, "r1")
	pub := keyFor("other").Public().(ed25519.PublicKey)
	ok := AddReceiverRequest{Name: "r2", Server: "https://r2.example:8443", ReceiverID: "id-r2", PublicKey: pub, Operator: "op"}
	mod := func(fn func(r *AddReceiverRequest)) AddReceiverRequest { r := ok; fn(&r); return r }
	for _, tc := range []struct {
		name string
		req  AddReceiverRequest
		want error
	}{
		{"no name", mod(func(r *AddReceiverRequest) { r.Name = "" }), ErrInvalidArgument},
		{"control in name", mod(func(r *AddReceiverRequest) { r.Name = "r\x1b2" }), ErrInvalidArgument},
		{"no receiver id", mod(func(r *AddReceiverRequest) { r.ReceiverID = "" }), ErrInvalidArgument},
		{"no operator", mod(func(r *AddReceiverRequest) { r.Operator = "" }), ErrInvalidArgument},
		{"server and db", mod(func(r *AddReceiverRequest) { r.DB, r.Anchor = "/x.db", "/x.anchor" }), ErrInvalidArgument},
		{"neither", mod(func(r *AddReceiverRequest) { r.Server = "" }), ErrInvalidArgument},
		{"server and db, no anchor", mod(func(r *AddReceiverRequest) { r.DB = "/x.db" }), ErrInvalidArgument},
		{"http", mod(func(r *AddReceiverRequest) { r.Server = "http://r2.example:8443" }), ErrInvalidArgument},
		{"https with path", mod(func(r *AddReceiverRequest) { r.Server = "https://r2.example/v1" }), ErrInvalidArgument},
		{"https with user", mod(func(r *AddReceiverRequest) { r.Server = "https://u@r2.example" }), ErrInvalidArgument},
		{"https without host", mod(func(r *AddReceiverRequest) { r.Server = "https:///x" }), ErrInvalidArgument},
		{"unix without path", mod(func(r *AddReceiverRequest) { r.Server = "unix://host" }), ErrInvalidArgument},
		{"server with anchor", mod(func(r *AddReceiverRequest) { r.Anchor = "/x.anchor" }), ErrInvalidArgument},
		{"db without anchor", mod(func(r *AddReceiverRequest) { r.Server, r.DB = "", "/x.db" }), ErrInvalidArgument},
		{"short key", mod(func(r *AddReceiverRequest) { r.PublicKey = pub[:31] }), ErrInvalidArgument},
		{"name taken", mod(func(r *AddReceiverRequest) { r.Name = "r1" }), ErrReceiverExists},
		{"key pinned", mod(func(r *AddReceiverRequest) { r.PublicKey = first.priv.Public().(ed25519.PublicKey) }), ErrReceiverKeyPinned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := l.Head()
			_, err := l.AddReceiver(ctx, tc.req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("AddReceiver: %v, want %v", err, tc.want)
			}
			unchanged(t, l, before, tc.name)
		})
	}
	if _, err := l.AddReceiver(ctx, mod(func(r *AddReceiverRequest) { r.Server, r.DB, r.Anchor = "", "/srv/r.db", "/srv/r.anchor" })); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddReceiver(ctx, AddReceiverRequest{Name: "r3", Server: "unix:///run/kvfence.sock", ReceiverID: "id-r3",
		PublicKey: keyFor("r3").Public().(ed25519.PublicKey), Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	rs, err := l.Receivers()
	if err != nil || len(rs) != 3 || rs[0].Name != "r1" || rs[1].DB != "/srv/r.db" || rs[2].Server != "unix:///run/kvfence.sock" ||
		!rs[1].PublicKey.Equal(pub) || rs[0].AddedBy != "op" || rs[0].AuditSeq == 0 {
		t.Fatalf("Receivers = %+v, %v", rs, err)
	}
	if _, err := l.Receiver("nope"); !errors.Is(err, ErrUnknownReceiver) {
		t.Fatalf("Receiver(nope): %v, want ErrUnknownReceiver", err)
	}
	var found bool
	if err := l.Events(0, func(e Event) bool {
		found = found || (e.Entry.Kind == KindReceiver && e.Entry.Target == "r1" && strings.Contains(e.Entry.Note, "id-r1"))
		return true
	}); err != nil || !found {
		t.Fatalf("no receiver entry for r1 (%v)", err)
	}
}

// Ensure that an approval's boundaries name registered receivers, each
// once, and are returned and recorded in the approval's entry.
func TestApprove_Boundaries(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	addRecv(t, l, "r1")
	addRecv(t, l, "r2")
	req := func(bs ...Boundary) ApproveRequest {
		return ApproveRequest{Action: "act", RequestSHA256: sha256.Sum256([]byte("act")), Approver: "alice", TTL: time.Hour, Boundaries: bs}
	}
	many := make([]Boundary, MaxBoundaries+1)
	for i := range many {
		many[i] = Boundary{"r1", fmt.Sprint("s", i)}
	}
	for _, tc := range []struct {
		name string
		req  ApproveRequest
		want error
	}{
		{"unknown receiver", req(Boundary{"r1", "s"}, Boundary{"r9", "s"}), ErrUnknownReceiver},
		{"twice", req(Boundary{"r1", "s"}, Boundary{"r1", "s"}), ErrInvalidArgument},
		{"empty scope", req(Boundary{"r1", ""}), ErrInvalidArgument},
		{"empty receiver", req(Boundary{"", "s"}), ErrInvalidArgument},
		{"too many", req(many...), ErrInvalidArgument},
	} {
		before := l.Head()
		if _, err := l.Approve(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		}
		unchanged(t, l, before, tc.name)
	}
	want := []Boundary{{"r1", "s:1"}, {"r2", "s"}, {"r1", "s2"}}
	a, err := l.Approve(ctx, req(want...))
	if err != nil || fmt.Sprint(a.Boundaries) != fmt.Sprint(want) {
		t.Fatalf("Approve = %+v, %v", a, err)
	}
	v, err := l.Action("act")
	if err != nil || fmt.Sprint(v.Approval.Boundaries) != fmt.Sprint(want) {
		t.Fatalf("Action = %+v, %v", v.Approval, err)
	}
	vs, err := l.Actions()
	if err != nil || len(vs) != 1 || len(vs[0].Approval.Boundaries) != 3 {
		t.Fatalf("Actions = %+v, %v", vs, err)
	}
	var note string
	l.Events(a.AuditSeq, func(e Event) bool { note = e.Entry.Note; return false })
	if note != `boundaries "r1":"s:1" "r2":"s" "r1":"s2"` {
		t.Fatalf("approval note = %q", note)
	}
}

// Ensure that BeginContainment needs an approval with boundaries and a
// superseded claim, creates every boundary pending with its hold id, and
// returns the existing record, first reason kept, without writing.
func TestBeginContainment(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	addRecv(t, l, "r1")
	addRecv(t, l, "r2")
	approve(t, l, "bare")
	mustClaim(t, l, "bare", "w")
	if _, err := l.Takeover(ctx, TakeoverRequest{Action: "bare", Operator: "op", Reason: "x", Worker: "w2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Approve(ctx, ApproveRequest{Action: "live", RequestSHA256: sha256.Sum256([]byte("live")), Approver: "alice",
		TTL: time.Hour, Boundaries: []Boundary{{"r1", "s"}}}); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, l, "live", "w")
	for _, tc := range []struct {
		action string
		want   error
	}{{"none", ErrNotApproved}, {"bare", ErrNoBoundaries}, {"live", ErrNoClaim}} {
		before := l.Head()
		if _, err := l.BeginContainment(ctx, tc.action, "r"); !errors.Is(err, tc.want) {
			t.Fatalf("%s: %v, want %v", tc.action, err, tc.want)
		}
		unchanged(t, l, before, tc.action)
	}
	if _, err := l.BeginContainment(ctx, "live", ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("no reason: %v", err)
	}
	if _, err := l.Containment("act"); !errors.Is(err, ErrNoContainment) {
		t.Fatalf("Containment before: %v, want ErrNoContainment", err)
	}
	old := superseded(t, l, "act", Boundary{"r1", "s1"}, Boundary{"r2", "s2"})
	c := begin(t, l, "act")
	if c.ID != ContainmentID("ledger-test", "act", old.Ref) || c.SupersededClaim != old.Ref || c.State != ContainmentNone ||
		len(c.Boundaries) != 2 || c.Reason != "worker-a paused" {
		t.Fatalf("containment = %+v", c)
	}
	for _, b := range c.Boundaries {
		if b.Result != BoundaryPending || b.HoldID != HoldID(c.ID, b.Receiver, b.Scope) {
			t.Fatalf("boundary = %+v", b)
		}
	}
	before := l.Head()
	again, err := l.BeginContainment(ctx, "act", "another reason")
	if err != nil || again.Reason != "worker-a paused" || again.ID != c.ID || again.AuditSeq != c.AuditSeq {
		t.Fatalf("second BeginContainment = %+v, %v", again, err)
	}
	unchanged(t, l, before, "second BeginContainment")
	got, err := l.Containment("act")
	if err != nil || got.ID != c.ID {
		t.Fatalf("Containment = %+v, %v", got, err)
	}
}

// Ensure that the ids are deterministic, domain-separated, valid hold ids.
func TestContainmentIDs(t *testing.T) {
	a, b := ContainmentID("l", "act", "c-1"), ContainmentID("l", "act", "c-2")
	if a == b || a != ContainmentID("l", "act", "c-1") || ContainmentID("la", "ct", "c-1") == a || ContainmentID("l", "actc-1", "") == a {
		t.Fatal("containment ids collide or are not deterministic")
	}
	h := HoldID(a, "r", "s")
	if h == HoldID(a, "rs", "") || h == HoldID(b, "r", "s") || h == a[1:] || len(h) > audit.MaxHoldIDLen {
		t.Fatalf("hold id %q", h)
	}
	if err := checkIdents("hold id", h, "containment id", a); err != nil {
		t.Fatal(err)
	}
}

// containedFixture is a containment of action "act" at two boundaries of r1
// and one of r2.
func containedFixture(t *testing.T) (*fixture, *Ledger, map[string]*fakeRecv, Claim, Containment) {
	f := newFixture(t)
	l := f.open()
	t.Cleanup(func() { l.Close() })
	rs := map[string]*fakeRecv{"r1": addRecv(t, l, "r1"), "r2": addRecv(t, l, "r2")}
	old := superseded(t, l, "act", Boundary{"r1", "a"}, Boundary{"r1", "b"}, Boundary{"r2", "a"})
	return f, l, rs, old, begin(t, l, "act")
}

// Ensure that RecordBoundaries refuses results for boundaries the record
// does not have, with other hold ids, twice in a call or with results a
// hold attempt does not give, and every acknowledgment that does not
// verify under the boundary's pinned key: nothing is written.
func TestRecordBoundaries_Refusals(t *testing.T) {
	_, l, rs, _, c := containedFixture(t)
	r1a, r1b, r2a := c.Boundaries[0], c.Boundaries[1], c.Boundaries[2]
	good := rs["r1"].ackFor(t, r1a, 4)
	stranger := &fakeRecv{name: "r1", id: "id-r1", priv: keyFor("stranger")}
	mutAck := func(fn func(a *audit.HoldAck, cp *audit.Checkpoint)) BoundaryContainment {
		at := good.AcknowledgedAt.UnixNano()
		cp := audit.Checkpoint{Root: audit.Hash{0x7e}, Receiver: "id-r1", Seq: 44, Head: sha256.Sum256([]byte(r1a.HoldID)), EpochHighWater: 5, At: at}
		a := audit.HoldAck{Receiver: "id-r1", Scope: r1a.Scope, HoldID: r1a.HoldID, PreviousEpoch: 4, Epoch: 5, AuditSeq: 43,
			RequestedAt: at - 1, At: at, CheckpointSeq: 44, CheckpointHead: cp.Head}
		fn(&a, &cp)
		return rs["r1"].signed(t, r1a, a, cp)
	}
	with := func(b BoundaryContainment, fn func(b *BoundaryContainment)) BoundaryContainment { fn(&b); return b }
	failed := func(b BoundaryContainment) BoundaryContainment { b.Result = BoundaryFailed; return b }
	for _, tc := range []struct {
		name    string
		results []BoundaryContainment
		want    error
	}{
		{"none", nil, ErrInvalidArgument},
		{"unknown boundary", []BoundaryContainment{failed(BoundaryContainment{Receiver: "r2", Scope: "b", HoldID: HoldID(c.ID, "r2", "b")})}, ErrInvalidArgument},
		{"other hold id", []BoundaryContainment{failed(with(r1a, func(b *BoundaryContainment) { b.HoldID = r1b.HoldID }))}, ErrInvalidArgument},
		{"twice", []BoundaryContainment{failed(r1a), failed(r1a)}, ErrInvalidArgument},
		{"pending", []BoundaryContainment{r1a}, ErrInvalidArgument},
		{"alternate", []BoundaryContainment{with(r1a, func(b *BoundaryContainment) { b.Result = BoundaryAlternate })}, ErrInvalidArgument},
		{"too many effects", []BoundaryContainment{with(failed(r1a), func(b *BoundaryContainment) { b.Outstanding = make([]Effect, MaxOutstanding+1) })}, ErrInvalidArgument},
		{"effect not UTF-8", []BoundaryContainment{with(failed(r1a), func(b *BoundaryContainment) { b.Outstanding = []Effect{{Target: "\xff"}} })}, ErrInvalidArgument},
		{"ack too large", []BoundaryContainment{with(failed(r1a), func(b *BoundaryContainment) { b.Ack = make([]byte, audit.MaxHoldAckSize+1) })}, ErrInvalidArgument},
		{"error too long", []BoundaryContainment{with(failed(r1a), func(b *BoundaryContainment) { b.Error = strings.Repeat("e", 1025) })}, ErrInvalidArgument},
		{"control in error code", []BoundaryContainment{with(failed(r1a), func(b *BoundaryContainment) { b.ErrorCode = "x\n" })}, ErrInvalidArgument},
		{"control in error", []BoundaryContainment{with(failed(r1a), func(b *BoundaryContainment) { b.Error = "x\x1b[2J" })}, ErrInvalidArgument},
		{"acknowledged without ack", []BoundaryContainment{with(good, func(b *BoundaryContainment) { b.Ack = nil })}, ErrUnverifiedAcknowledgment},
		{"garbage ack", []BoundaryContainment{with(good, func(b *BoundaryContainment) { b.Ack = []byte{0xa0} })}, ErrUnverifiedAcknowledgment},
		{"garbage checkpoint", []BoundaryContainment{with(good, func(b *BoundaryContainment) { b.Checkpoint = []byte{0xa0} })}, ErrUnverifiedAcknowledgment},
		{"other key", []BoundaryContainment{stranger.ackFor(t, r1a, 4)}, ErrUnverifiedAcknowledgment},
		{"ack by another key", []BoundaryContainment{with(good, func(b *BoundaryContainment) { b.Ack = stranger.ackFor(t, r1a, 4).Ack })}, ErrUnverifiedAcknowledgment},
		{"checkpoint by another key", []BoundaryContainment{with(good, func(b *BoundaryContainment) {
			b.Checkpoint = stranger.ackFor(t, r1a, 4).Checkpoint
		})}, ErrUnverifiedAcknowledgment},
		{"other receiver's ack", []BoundaryContainment{with(rs["r2"].ackFor(t, r2a, 4), func(b *BoundaryContainment) {
			b.Receiver, b.Scope, b.HoldID = r1a.Receiver, r1a.Scope, r1a.HoldID
		})}, ErrUnverifiedAcknowledgment},
		{"other receiver id", []BoundaryContainment{mutAck(func(a *audit.HoldAck, cp *audit.Checkpoint) { a.Receiver, cp.Receiver = "id-r2", "id-r2" })}, ErrUnverifiedAcknowledgment},
		{"checkpoint of other receiver id", []BoundaryContainment{mutAck(func(a *audit.HoldAck, cp *audit.Checkpoint) { cp.Receiver = "id-r2" })}, ErrUnverifiedAcknowledgment},
		{"other scope", []BoundaryContainment{mutAck(func(a *audit.HoldAck, cp *audit.Checkpoint) { a.Scope = "b" })}, ErrUnverifiedAcknowledgment},
		{"other hold id", []BoundaryContainment{mutAck(func(a *audit.HoldAck, cp *audit.Checkpoint) { a.HoldID = r1b.HoldID })}, ErrUnverifiedAcknowledgment},
		{"no hold id", []BoundaryContainment{mutAck(func(a *audit.HoldAck, cp *audit.Checkpoint) { a.HoldID = "" })}, ErrUnverifiedAcknowledgment},
		{"checkpoint does not cover", []BoundaryContainment{mutAck(func(a *audit.HoldAck, cp *audit.Checkpoint) { cp.Seq++ })}, ErrUnverifiedAcknowledgment},
		{"tampered installed epoch", []BoundaryContainment{with(good, func(b *BoundaryContainment) { b.InstalledEpoch++ })}, ErrUnverifiedAcknowledgment},
		{"tampered previous epoch", []BoundaryContainment{with(good, func(b *BoundaryContainment) { b.PreviousEpoch-- })}, ErrUnverifiedAcknowledgment},
		{"tampered time", []BoundaryContainment{with(good, func(b *BoundaryContainment) { b.AcknowledgedAt = b.AcknowledgedAt.Add(time.Second) })}, ErrUnverifiedAcknowledgment},
		{"one forged among good", []BoundaryContainment{rs["r2"].ackFor(t, r2a, 1), stranger.ackFor(t, r1a, 4)}, ErrUnverifiedAcknowledgment},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := l.Head()
			if _, err := l.RecordBoundaries(ctx, c.ID, tc.results); !errors.Is(err, tc.want) {
				t.Fatalf("RecordBoundaries: %v, want %v", err, tc.want)
			}
			unchanged(t, l, before, tc.name)
		})
	}
	if _, err := l.RecordBoundaries(ctx, ContainmentID("ledger-test", "act", "c-other"), []BoundaryContainment{failed(r1a)}); !errors.Is(err, ErrNoContainment) {
		t.Fatalf("unknown containment: %v", err)
	}
	got, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{good})
	if err != nil || got.Boundaries[0].Result != BoundaryAcknowledged || got.Boundaries[0].InstalledEpoch != 5 || got.State != ContainmentPartial {
		t.Fatalf("good ack = %+v, %v", got, err)
	}
	// What was recorded verifies again, as a later check would do it.
	pinned, _ := l.Receiver("r1")
	if _, _, err := got.Boundaries[0].VerifyAcknowledgment(pinned); err != nil {
		t.Fatal(err)
	}
	// r1 signs a hold under the hold id of r2's boundary (hold ids are in
	// the record for anyone to read): checked against r1's pinned key it
	// would verify, but r1 does not answer for r2's boundary.
	if _, _, err := rs["r1"].ackFor(t, r2a, 0).VerifyAcknowledgment(pinned); !errors.Is(err, ErrUnverifiedAcknowledgment) {
		t.Fatalf("r2's boundary answered by r1: %v", err)
	}
}

// Ensure that a recorded acknowledgment or alternate is never downgraded,
// that a second acknowledgment must name the same epoch, and that attempts
// are counted.
func TestRecordBoundaries_Monotonic(t *testing.T) {
	_, l, rs, _, c := containedFixture(t)
	r1a, r1b := c.Boundaries[0], c.Boundaries[1]
	record := func(rs ...BoundaryContainment) (Containment, error) { return l.RecordBoundaries(ctx, c.ID, rs) }
	ack := rs["r1"].ackFor(t, r1a, 4)
	if _, err := record(ack); err != nil {
		t.Fatal(err)
	}
	for _, res := range []BoundaryResult{BoundaryFailed, BoundaryTimeout, BoundaryUnknown, BoundaryUnverified} {
		worse := r1a
		worse.Result, worse.Error = res, "later"
		got, err := record(worse)
		if err != nil || got.Boundaries[0].Result != BoundaryAcknowledged || got.Boundaries[0].InstalledEpoch != 5 ||
			got.Boundaries[0].Error != "" {
			t.Fatalf("%s after acknowledged: %+v, %v", res, got.Boundaries[0], err)
		}
	}
	before := l.Head()
	if _, err := record(rs["r1"].ackFor(t, r1a, 6)); !errors.Is(err, ErrAcknowledgmentConflict) {
		t.Fatalf("second ack of another epoch: %v", err)
	}
	unchanged(t, l, before, "conflicting ack")
	// The same acknowledgment again is a rerun's reading of an
	// acknowledged boundary, not a hold attempt.
	got, err := record(ack)
	if err != nil || got.Boundaries[0].Attempts != 5 || got.Boundaries[0].InstalledEpoch != 5 {
		t.Fatalf("same ack again: %+v, %v", got.Boundaries[0], err)
	}
	// An alternate stays an alternate until an acknowledgment.
	if _, err := l.RecordAlternate(ctx, AlternateRequest{Action: "act", Receiver: "r1", Scope: "b", Operator: "op", Reason: "fw"}); err != nil {
		t.Fatal(err)
	}
	timeout := r1b
	timeout.Result = BoundaryTimeout
	if got, err := record(timeout); err != nil || got.Boundaries[1].Result != BoundaryAlternate {
		t.Fatalf("timeout after alternate: %+v, %v", got.Boundaries[1], err)
	}
	got, err = record(rs["r1"].ackFor(t, r1b, 2))
	if err != nil || got.Boundaries[1].Result != BoundaryAcknowledged || got.Boundaries[1].Alternate == nil {
		t.Fatalf("ack after alternate: %+v, %v", got.Boundaries[1], err)
	}
	// A result that is not an acknowledgment records no epoch.
	r2 := c.Boundaries[2]
	r2.Result, r2.InstalledEpoch, r2.PreviousEpoch = BoundaryUnverified, 9, 8
	if got, err := record(r2); err != nil || got.Boundaries[2].InstalledEpoch != 0 || got.Boundaries[2].Result != BoundaryUnverified {
		t.Fatalf("unverified result: %+v, %v", got.Boundaries[2], err)
	}
}

// allResults are the results a boundary can end a step in.
var allResults = []BoundaryResult{BoundaryPending, BoundaryAcknowledged, BoundaryFailed, BoundaryTimeout, BoundaryUnknown,
	BoundaryUnverified, BoundaryAlternate}

// Ensure that for every combination of results at 1 to 4 boundaries the
// derived state says what the containment rules say.
func TestDeriveState_AllCombinations(t *testing.T) {
	counts := map[ContainmentState]int{}
	for n := 1; n <= 4; n++ {
		total := 1
		for range n {
			total *= len(allResults)
		}
		for k := range total {
			bs := make([]boundaryContainmentRecord, n)
			x := k
			for i := range bs {
				bs[i].Result = allResults[x%len(allResults)]
				x /= len(allResults)
			}
			all, contained, someAlt := true, true, false
			some := false
			for _, b := range bs {
				all = all && b.Result == BoundaryAcknowledged
				isC := b.Result == BoundaryAcknowledged || b.Result == BoundaryAlternate
				contained = contained && isC
				some = some || isC
				someAlt = someAlt || b.Result == BoundaryAlternate
			}
			got := deriveState(bs)
			counts[got]++
			ok := (got == ContainmentFull) == all &&
				(got == ContainmentFullWithAlternate) == (contained && someAlt) &&
				(got == ContainmentPartial) == (some && !contained) &&
				(got == ContainmentNone) == !some
			if !ok {
				t.Fatalf("results %v: state %s", bs, got)
			}
		}
	}
	if len(counts) != 4 {
		t.Fatalf("not every state reached: %v", counts)
	}
}

// Ensure that the states the ledger stores follow the results recorded
// through its own calls, for every combination of acknowledged, failed
// and alternate at 1 to 3 boundaries.
func TestContainment_StateThroughLedger(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	defer l.Close()
	r := addRecv(t, l, "r")
	kinds := []BoundaryResult{BoundaryAcknowledged, BoundaryFailed, BoundaryAlternate}
	for n := 1; n <= 3; n++ {
		total := 1
		for range n {
			total *= len(kinds)
		}
		for k := range total {
			action := fmt.Sprintf("act-%d-%d", n, k)
			var bounds []Boundary
			for i := range n {
				bounds = append(bounds, Boundary{"r", fmt.Sprint("s", i)})
			}
			superseded(t, l, action, bounds...)
			c := begin(t, l, action)
			want := make([]boundaryContainmentRecord, n)
			var results []BoundaryContainment
			x := k
			for i, b := range c.Boundaries {
				res := kinds[x%len(kinds)]
				x /= len(kinds)
				want[i].Result = res
				switch res {
				case BoundaryAcknowledged:
					results = append(results, r.ackFor(t, b, uint64(i)))
				case BoundaryFailed:
					b.Result, b.ErrorCode = BoundaryFailed, "unavailable"
					results = append(results, b)
				case BoundaryAlternate:
					if _, err := l.RecordAlternate(ctx, AlternateRequest{Action: action, Receiver: "r", Scope: b.Scope, Operator: "op", Reason: "fw"}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if len(results) > 0 {
				if _, err := l.RecordBoundaries(ctx, c.ID, results); err != nil {
					t.Fatal(err)
				}
			}
			got, err := l.Containment(action)
			if err != nil || got.State != deriveState(want) {
				t.Fatalf("%s: state %s, want %s (%v)", action, got.State, deriveState(want), err)
			}
		}
	}
}

// Ensure that RecordAlternate needs a containment, a boundary of it that
// did not acknowledge, and an unambiguous scope.
func TestRecordAlternate_Refusals(t *testing.T) {
	_, l, rs, _, c := containedFixture(t)
	if _, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{rs["r2"].ackFor(t, c.Boundaries[2], 0)}); err != nil {
		t.Fatal(err)
	}
	req := AlternateRequest{Action: "act", Receiver: "r1", Scope: "a", Operator: "op", Reason: "firewall rule"}
	mod := func(fn func(r *AlternateRequest)) AlternateRequest { r := req; fn(&r); return r }
	for _, tc := range []struct {
		name string
		req  AlternateRequest
		want error
	}{
		{"no operator", mod(func(r *AlternateRequest) { r.Operator = "" }), ErrInvalidArgument},
		{"no reason", mod(func(r *AlternateRequest) { r.Reason = "" }), ErrInvalidArgument},
		{"no containment", mod(func(r *AlternateRequest) { r.Action = "other" }), ErrNoContainment},
		{"not a boundary", mod(func(r *AlternateRequest) { r.Scope = "zz" }), ErrInvalidArgument},
		{"unknown receiver", mod(func(r *AlternateRequest) { r.Receiver, r.Scope = "r9", "" }), ErrInvalidArgument},
		{"ambiguous scope", mod(func(r *AlternateRequest) { r.Scope = "" }), ErrInvalidArgument},
		{"acknowledged", mod(func(r *AlternateRequest) { r.Receiver, r.Scope = "r2", "" }), ErrAlreadyAcknowledged},
	} {
		before := l.Head()
		if _, err := l.RecordAlternate(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		}
		unchanged(t, l, before, tc.name)
	}
	got, err := l.RecordAlternate(ctx, req)
	if err != nil || got.Boundaries[0].Result != BoundaryAlternate || got.Boundaries[0].Alternate.Reason != "firewall rule" ||
		got.State != ContainmentPartial {
		t.Fatalf("alternate = %+v, %v", got, err)
	}
}

// Ensure that a successor is recorded only after full containment and
// reconciliation, each grant at an acknowledged boundary and its installed
// epoch.
func TestRecordSuccessor_Refusals(t *testing.T) {
	_, l, rs, old, c := containedFixture(t)
	grant := func(b BoundaryContainment, epoch uint64) SuccessorGrant {
		return SuccessorGrant{Receiver: b.Receiver, Scope: b.Scope, Grant: "g-" + b.Scope, Epoch: epoch, Executor: "worker-b",
			Claim: "c-b", Decision: "dec-1"}
	}
	acks := []BoundaryContainment{rs["r1"].ackFor(t, c.Boundaries[0], 4), rs["r1"].ackFor(t, c.Boundaries[1], 0)}
	if _, err := l.RecordBoundaries(ctx, c.ID, acks); err != nil {
		t.Fatal(err)
	}
	try := func(name string, want error, gs ...SuccessorGrant) {
		t.Helper()
		before := l.Head()
		if _, err := l.RecordSuccessor(ctx, c.ID, gs); !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", name, err, want)
		}
		unchanged(t, l, before, name)
	}
	try("partial", ErrNotContained, grant(c.Boundaries[0], 5))
	if _, err := l.RecordAlternate(ctx, AlternateRequest{Action: "act", Receiver: "r2", Operator: "op", Reason: "fw"}); err != nil {
		t.Fatal(err)
	}
	try("not reconciled", ErrNotReconciled, grant(c.Boundaries[0], 5))
	if _, err := l.Reconcile(ctx, old.Ref, "op", StateFailed); err != nil {
		t.Fatal(err)
	}
	try("no grants", ErrInvalidArgument)
	try("wrong epoch", ErrInvalidArgument, grant(c.Boundaries[0], 4))
	try("alternate boundary", ErrInvalidArgument, grant(c.Boundaries[2], 0))
	try("not a boundary", ErrInvalidArgument, grant(BoundaryContainment{Receiver: "r2", Scope: "zz"}, 1))
	try("twice", ErrInvalidArgument, grant(c.Boundaries[0], 5), grant(c.Boundaries[0], 5))
	try("no decision", ErrInvalidArgument, func() SuccessorGrant { g := grant(c.Boundaries[0], 5); g.Decision = ""; return g }())
	got, err := l.RecordSuccessor(ctx, c.ID, []SuccessorGrant{grant(c.Boundaries[0], 5), grant(c.Boundaries[1], 1)})
	if err != nil || len(got.Successor) != 2 || got.State != ContainmentFullWithAlternate || got.Successor[0].ActivatedAt.IsZero() {
		t.Fatalf("successor = %+v, %v", got, err)
	}
	before := l.Head()
	if again, err := l.RecordSuccessor(ctx, c.ID, []SuccessorGrant{grant(c.Boundaries[0], 5)}); err != nil || len(again.Successor) != 2 {
		t.Fatalf("repeat = %+v, %v", again, err)
	}
	unchanged(t, l, before, "repeat successor")
}

// Ensure that a successor is not recorded in a containment that a later
// takeover overtook, full and reconciled as it may be.
func TestRecordSuccessor_OvertakenContainment(t *testing.T) {
	_, l, rs, old, c := containedFixture(t)
	var acks []BoundaryContainment
	for i, b := range c.Boundaries {
		acks = append(acks, rs[b.Receiver].ackFor(t, b, uint64(i)))
	}
	if got, err := l.RecordBoundaries(ctx, c.ID, acks); err != nil || got.State != ContainmentFull {
		t.Fatalf("acks: %+v, %v", got, err)
	}
	if _, err := l.Reconcile(ctx, old.Ref, "op", StateFailed); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Takeover(ctx, TakeoverRequest{Action: "act", Operator: "op", Reason: "worker-b paused", Worker: "worker-c"}); err != nil {
		t.Fatal(err)
	}
	before := l.Head()
	g := SuccessorGrant{Receiver: "r1", Scope: "a", Grant: "g", Epoch: 1, Executor: "worker-c", Claim: "c-c", Decision: "d"}
	if _, err := l.RecordSuccessor(ctx, c.ID, []SuccessorGrant{g}); !errors.Is(err, ErrNotContained) {
		t.Fatalf("successor in an overtaken containment: %v, want ErrNotContained", err)
	}
	unchanged(t, l, before, "overtaken containment")
	if _, err := l.Containment("act"); !errors.Is(err, ErrNoContainment) {
		t.Fatalf("Containment after a second takeover: %v, want ErrNoContainment until it is begun", err)
	}
}

// editBucket changes one record of the closed ledger file in place.
func editBucket(t *testing.T, path string, bucket []byte, key string, fn func(old []byte) []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		return b.Put([]byte(key), fn(append([]byte(nil), b.Get([]byte(key))...)))
	}); err != nil {
		t.Fatal(err)
	}
}

// Ensure that a containment record edited in the file, or put back to an
// older copy, is refused on read and on change; and so are a receiver
// whose pinned key was replaced and an approval whose boundary was dropped.
func TestContainment_Tampered(t *testing.T) {
	f, l, rs, _, c := containedFixture(t)
	rawAt := func() []byte {
		var raw []byte
		l.view(func(tx engine.Tx) error {
			v, err := tx.Get(bucketContainments, []byte(c.ID))
			raw = append([]byte(nil), v...)
			return err
		})
		return raw
	}
	first := rawAt()
	if _, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{rs["r2"].ackFor(t, c.Boundaries[2], 0)}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	reopen := func() { l = f.open() }
	t.Run("older copy", func(t *testing.T) {
		var newer []byte
		editBucket(t, f.path, bucketContainments, c.ID, func(old []byte) []byte { newer = old; return first })
		reopen()
		if _, err := l.Containment("act"); !errors.Is(err, ErrContainmentTampered) {
			t.Fatalf("Containment of an older copy: %v, want ErrContainmentTampered", err)
		}
		before := l.Head()
		if _, err := l.RecordAlternate(ctx, AlternateRequest{Action: "act", Receiver: "r2", Operator: "op", Reason: "x"}); !errors.Is(err, ErrContainmentTampered) {
			t.Fatalf("RecordAlternate on an older copy: %v", err)
		}
		unchanged(t, l, before, "older copy")
		l.Close()
		editBucket(t, f.path, bucketContainments, c.ID, func([]byte) []byte { return newer })
		reopen()
		if got, err := l.Containment("act"); err != nil || got.Boundaries[2].Result != BoundaryAcknowledged {
			t.Fatalf("restored newest: %+v, %v", got, err)
		}
		l.Close()
	})
	t.Run("edited", func(t *testing.T) {
		var orig []byte
		editBucket(t, f.path, bucketContainments, c.ID, func(old []byte) []byte {
			orig = old
			var rec containmentRecord
			if err := containDec.Unmarshal(old, &rec); err != nil {
				t.Fatal(err)
			}
			for i := range rec.Boundaries {
				rec.Boundaries[i].Result = BoundaryAlternate
				rec.Boundaries[i].Alternate = &alternateRecord{Operator: "mallory", Reason: "x", At: 1}
			}
			rec.State = ContainmentFullWithAlternate
			raw, _ := recordEnc.Marshal(&rec)
			return raw
		})
		reopen()
		if _, err := l.Containment("act"); !errors.Is(err, ErrContainmentTampered) {
			t.Fatalf("edited record: %v, want ErrContainmentTampered", err)
		}
		l.Close()
		editBucket(t, f.path, bucketContainments, c.ID, func([]byte) []byte { return orig })
	})
	t.Run("pinned key replaced", func(t *testing.T) {
		editBucket(t, f.path, bucketReceivers, "r1", func(old []byte) []byte {
			var rec receiverRecord
			if err := recordDec.Unmarshal(old, &rec); err != nil {
				t.Fatal(err)
			}
			rec.PublicKey = keyFor("mallory").Public().(ed25519.PublicKey)
			raw, _ := recordEnc.Marshal(&rec)
			return raw
		})
		reopen()
		defer l.Close()
		if _, err := l.Receiver("r1"); !errors.Is(err, ErrContainmentTampered) {
			t.Fatalf("replaced key: %v, want ErrContainmentTampered", err)
		}
		mallory := &fakeRecv{name: "r1", id: "id-r1", priv: keyFor("mallory")}
		if _, err := l.RecordBoundaries(ctx, c.ID, []BoundaryContainment{mallory.ackFor(t, c.Boundaries[0], 1)}); !errors.Is(err, ErrContainmentTampered) {
			t.Fatalf("ack under a replaced key: %v, want ErrContainmentTampered", err)
		}
	})
}

// Ensure that an approval whose boundary was dropped from the file does not
// begin a containment without it.
func TestBeginContainment_DroppedBoundary(t *testing.T) {
	f := newFixture(t)
	l := f.open()
	addRecv(t, l, "r1")
	addRecv(t, l, "r2")
	superseded(t, l, "act", Boundary{"r1", "s"}, Boundary{"r2", "s"})
	l.Close()
	editBucket(t, f.path, bucketApprovals, "act", func(old []byte) []byte {
		var rec approvalRecord
		if err := recordDec.Unmarshal(old, &rec); err != nil {
			t.Fatal(err)
		}
		rec.Boundaries = rec.Boundaries[:1]
		raw, _ := recordEnc.Marshal(&rec)
		return raw
	})
	l = f.open()
	defer l.Close()
	if _, err := l.BeginContainment(ctx, "act", "r"); !errors.Is(err, ErrContainmentTampered) {
		t.Fatalf("dropped boundary: %v, want ErrContainmentTampered", err)
	}
}

// Ensure that a ledger file of format kvfence-ledger/1 written before
// receivers and containments existed opens, reads as having none, and
// gains the buckets with its first write that needs them.
func TestOldLedgerFile(t *testing.T) {
	f := newFixture(t)
	has := func(name []byte) bool {
		db, err := bolt.Open(f.path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var ok bool
		db.View(func(tx *bolt.Tx) error { ok = tx.Bucket(name) != nil; return nil })
		return ok
	}
	if has(bucketReceivers) || has(bucketContainments) {
		t.Fatal("init created the new buckets: the file would not be an old file")
	}
	l := f.open()
	approve(t, l, "old")
	if rs, err := l.Receivers(); err != nil || len(rs) != 0 {
		t.Fatalf("Receivers = %v, %v", rs, err)
	}
	if _, err := l.Receiver("r"); !errors.Is(err, ErrUnknownReceiver) {
		t.Fatalf("Receiver: %v", err)
	}
	if v, err := l.Action("old"); err != nil || v.Approval.Boundaries != nil {
		t.Fatalf("old approval = %+v, %v", v, err)
	}
	if _, err := l.Containment("old"); !errors.Is(err, ErrNoContainment) {
		t.Fatalf("Containment: %v", err)
	}
	addRecv(t, l, "r")
	superseded(t, l, "act", Boundary{"r", "s"})
	begin(t, l, "act")
	l.Close()
	if !has(bucketReceivers) || !has(bucketContainments) {
		t.Fatal("the writes did not create their buckets")
	}
}

// Ensure that a containment record whose own bytes contradict themselves
// does not decode: a foreign hold id, a state its results do not give, an
// alternate result without its record, an unknown result.
func TestDecodeContainment_Refusals(t *testing.T) {
	id := ContainmentID("l", "a", "c-X")
	base := func() containmentRecord {
		return containmentRecord{ID: id, Action: "a", SupersededClaim: "c-X", Reason: "r", State: ContainmentNone, StartedAt: 1,
			Boundaries: []boundaryContainmentRecord{{Receiver: "r1", Scope: "s", HoldID: HoldID(id, "r1", "s"), Result: BoundaryPending}}}
	}
	enc := func(c containmentRecord) []byte {
		raw, err := recordEnc.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	if _, err := decodeContainment(id, enc(base())); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(c *containmentRecord){
		"other id":          func(c *containmentRecord) { c.ID = ContainmentID("l", "a", "c-Y") },
		"foreign hold id":   func(c *containmentRecord) { c.Boundaries[0].HoldID = HoldID(id, "r2", "s") },
		"state not derived": func(c *containmentRecord) { c.State = ContainmentFull },
		"alternate without record": func(c *containmentRecord) {
			c.Boundaries[0].Result, c.State = BoundaryAlternate, ContainmentFullWithAlternate
		},
		"record on a failed": func(c *containmentRecord) {
			c.Boundaries[0].Result, c.Boundaries[0].Alternate = BoundaryFailed, &alternateRecord{}
		},
		"unknown result":      func(c *containmentRecord) { c.Boundaries[0].Result = "held" },
		"no boundaries":       func(c *containmentRecord) { c.Boundaries = nil },
		"no superseded claim": func(c *containmentRecord) { c.SupersededClaim = "" },
	} {
		c := base()
		mut(&c)
		if _, err := decodeContainment(id, enc(c)); !errors.Is(err, ErrBadFormat) {
			t.Errorf("%s: %v, want ErrBadFormat", name, err)
		}
	}
}
