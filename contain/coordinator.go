package contain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/ident"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// DefaultTimeout bounds each boundary's hold when Options.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Options configures a Coordinator.
type Options struct {
	// Ledger is the execution ledger, opened for writing: it holds the
	// actions' boundaries, the receivers' pinned keys and the containment
	// records.
	Ledger *ledger.Ledger
	// Dial returns the Boundary of a registered receiver. A Boundary that
	// is also an io.Closer is closed when the call that dialled it is done.
	// An error means the receiver could not be reached; nothing was sent.
	Dial func(ctx context.Context, r ledger.Receiver) (Boundary, error)
	// Timeout bounds each boundary's hold, and each of its other calls, on
	// its own. Zero means DefaultTimeout.
	Timeout time.Duration
	// Now is the coordinator's clock, for hold_requested_at. Nil means
	// time.Now.
	Now func() time.Time
}

// Coordinator contains actions across their boundaries. Its methods are
// safe for concurrent use as far as the ledger's are.
type Coordinator struct {
	o Options
}

// New returns a Coordinator.
func New(opts Options) (*Coordinator, error) {
	if opts.Ledger == nil || opts.Dial == nil {
		return nil, fmt.Errorf("%w: a coordinator needs a ledger and a way to reach its receivers", ErrInvalidArgument)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative timeout", ErrInvalidArgument)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Coordinator{o: opts}, nil
}

// ContainRequest asks Contain to contain an action.
type ContainRequest struct {
	// Action is the approved action whose superseded claim is contained.
	Action string
	// Reason says why; the first run's reason is the one the containment
	// keeps and every hold carries.
	Reason string
	// Operator is who runs the containment.
	Operator string
}

// Contain holds every boundary of req.Action that is neither acknowledged
// nor contained by an alternate yet, in parallel, each under its own
// timeout and with the hold id the ledger derived for it, so that a rerun
// repeats the earlier hold instead of issuing a new generation. It
// verifies each acknowledgment against the receiver's pinned key, lists
// the effects applied under the superseded claim and the scope's latest
// stale rejection at every boundary it reaches, and records it all in the
// ledger in one change. It returns the record; a containment that is not
// full is not an error, its State says so.
func (c *Coordinator) Contain(ctx context.Context, req ContainRequest) (ledger.Containment, error) {
	for _, f := range [][2]string{{"action", req.Action}, {"reason", req.Reason}, {"operator", req.Operator}} {
		if err := ident.Check(f[0], f[1]); err != nil {
			return ledger.Containment{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
	}
	rec, err := c.o.Ledger.BeginContainment(ctx, req.Action, req.Reason)
	if err != nil {
		return ledger.Containment{}, err
	}
	for _, b := range rec.Boundaries {
		if b.HoldID == "" {
			// Without the ledger's id a rerun could not be told from a
			// new hold: better to hold nothing.
			return rec, fmt.Errorf("%w: containment %s has no hold id for %s:%s", ErrInvalidArgument, rec.ID, b.Receiver, b.Scope)
		}
	}
	s := c.session()
	defer s.close()
	results := make([]*ledger.BoundaryContainment, len(rec.Boundaries))
	c.byReceiver(ctx, s, rec.Boundaries, func(ctx context.Context, i int, r ledger.Receiver, bd Boundary, derr error) {
		b := rec.Boundaries[i]
		// A boundary acknowledged or contained by an alternate is never
		// held again: its record stands, and the ledger keeps it. An
		// acknowledged one that answers is read again, so that the record
		// shows the stale rejections and effects seen since.
		if b.Result == ledger.BoundaryAlternate {
			return
		}
		if b.Result == ledger.BoundaryAcknowledged {
			if derr == nil {
				if st, err := c.observe(ctx, rec, &b, bd); err == nil {
					stillFenced(rec, &b, st)
				}
				results[i] = &b
			}
			return
		}
		b = c.hold(ctx, rec, b, r, bd, derr)
		if derr == nil && b.Result != ledger.BoundaryTimeout {
			st, serr := c.observe(ctx, rec, &b, bd)
			if b.Result == ledger.BoundaryAcknowledged {
				b = stillHeld(b, st, serr)
			}
		}
		results[i] = &b
	})
	var attempted []ledger.BoundaryContainment
	for _, b := range results {
		if b != nil {
			attempted = append(attempted, *b)
		}
	}
	if len(attempted) == 0 {
		return rec, nil
	}
	return c.o.Ledger.RecordBoundaries(ctx, rec.ID, attempted)
}

// hold asks one boundary for its hold and classifies the answer.
func (c *Coordinator) hold(ctx context.Context, rec ledger.Containment, b ledger.BoundaryContainment, r ledger.Receiver,
	bd Boundary, derr error) ledger.BoundaryContainment {
	b.HoldRequestedAt = c.o.Now().UTC()
	if derr != nil {
		return failed(b, ledger.BoundaryFailed, "unreachable", derr)
	}
	hctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	res, err := bd.Hold(hctx, kvfence.HoldRequest{Scopes: []string{b.Scope}, Reason: rec.Reason, ID: b.HoldID})
	if err == nil {
		return acknowledge(b, r, res)
	}
	if hctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
		// The boundary's own deadline, whatever the call made of it.
		return failed(b, ledger.BoundaryTimeout, "timeout", err)
	}
	result, code := classify(err)
	return failed(b, result, code, err)
}

// failed records that b is not acknowledged, and why. Nothing of an
// earlier answer is kept: epochs and evidence come only from an
// acknowledgment that verifies.
func failed(b ledger.BoundaryContainment, result ledger.BoundaryResult, code string, err error) ledger.BoundaryContainment {
	b.Result, b.ErrorCode, b.Error = result, printable(code, 64), printable(err.Error(), maxErrorText)
	b.AcknowledgedAt, b.PreviousEpoch, b.InstalledEpoch = time.Time{}, 0, 0
	b.Ack, b.Checkpoint = nil, nil
	return b
}

// maxErrorText bounds a recorded error, within the ledger's limit.
const maxErrorText = 500

// printable returns s as the ledger records free text: valid UTF-8
// without control characters, at most max bytes. An error's text may come
// from the receiver, which is not trusted to send printable text, and a
// result the ledger refused would leave every boundary unrecorded.
func printable(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "?") {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > max {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// classify maps a hold's error to a boundary result and an error code:
// a refusal the receiver reported is failed with its code; the boundary's
// deadline is timeout; an answer that may have been lost after the hold
// committed, or anything that cannot be told from one, is unknown.
func classify(err error) (ledger.BoundaryResult, string) {
	switch {
	case errors.Is(err, kvfence.ErrNotAcknowledged):
		return ledger.BoundaryUnknown, "not_acknowledged"
	case errors.Is(err, kvfence.ErrOutcomeUnknown):
		return ledger.BoundaryUnknown, api.CodeOutcomeUnknown
	case errors.Is(err, context.DeadlineExceeded):
		return ledger.BoundaryTimeout, "timeout"
	case errors.Is(err, client.ErrProtocol), errors.Is(err, ErrBadAnswer):
		return ledger.BoundaryUnverified, "bad_answer"
	case errors.Is(err, client.ErrUntrustedServer):
		return ledger.BoundaryFailed, "untrusted_server"
	}
	var ce *client.Error
	isAnswer := errors.As(err, &ce)
	if isAnswer && ce.Code != "" {
		return ledger.BoundaryFailed, ce.Code
	}
	for _, s := range api.Sentinels {
		if errors.Is(err, s.Err) {
			return ledger.BoundaryFailed, s.Code
		}
	}
	if isAnswer {
		// An error answer without a code came from something between
		// the coordinator and the receiver.
		return ledger.BoundaryUnknown, "bad_answer"
	}
	return ledger.BoundaryUnknown, "transport"
}

// acknowledge checks a hold's answer and returns b acknowledged, or
// unverified if the answer is not a signed acknowledgment of this hold by
// the pinned key. The epochs and times recorded are the signed ones.
func acknowledge(b ledger.BoundaryContainment, r ledger.Receiver, res kvfence.HoldResult) ledger.BoundaryContainment {
	unverified := func(format string, args ...any) ledger.BoundaryContainment {
		return failed(b, ledger.BoundaryUnverified, "bad_acknowledgment", fmt.Errorf("%w: "+format, append([]any{ErrBadAnswer}, args...)...))
	}
	if len(res.Scopes) != 1 || res.Scopes[0].Scope != b.Scope {
		return unverified("asked to hold scope %q, the answer names %d scopes", b.Scope, len(res.Scopes))
	}
	hs := res.Scopes[0]
	if hs.Ack.IsZero() {
		return unverified("the hold of %q came without a signed acknowledgment", b.Scope)
	}
	a := hs.Ack.HoldAck
	if a.Receiver != r.ReceiverID || a.Scope != b.Scope || a.HoldID != b.HoldID {
		return unverified("the acknowledgment is receiver %q scope %q hold %q; asked receiver %q scope %q hold %q",
			a.Receiver, a.Scope, a.HoldID, r.ReceiverID, b.Scope, b.HoldID)
	}
	if hs.PreviousEpoch != a.PreviousEpoch || hs.Epoch != a.Epoch {
		return unverified("the answer says epoch %d to %d, its acknowledgment %d to %d", hs.PreviousEpoch, hs.Epoch, a.PreviousEpoch, a.Epoch)
	}
	ack, err := hs.Ack.Marshal()
	if err != nil {
		return unverified("acknowledgment: %v", err)
	}
	cp, err := res.Checkpoint.Marshal()
	if err != nil {
		return unverified("checkpoint: %v", err)
	}
	nb := b
	nb.Ack, nb.Checkpoint = ack, cp
	nb.PreviousEpoch, nb.InstalledEpoch = a.PreviousEpoch, a.Epoch
	nb.AcknowledgedAt = time.Unix(0, a.At).UTC()
	if _, _, err := nb.VerifyAcknowledgment(r); err != nil {
		return failed(b, ledger.BoundaryUnverified, "bad_acknowledgment", err)
	}
	nb.Result, nb.ErrorCode, nb.Error = ledger.BoundaryAcknowledged, "", ""
	return nb
}

// stillHeld returns b, acknowledged, if the scope's status read after the
// hold shows it held at the installed epoch or later; otherwise b is not
// acknowledged. A hold acknowledged under the containment's id fences only
// the grants activated before it: a receiver repeats a hold id's first
// result even if the scope was activated since, and a hold id can be
// derived by anyone who knows the action and the superseded claim, so a
// hold with that id committed before the superseded worker's grant (or a
// grant activated after it) would otherwise read as containing a scope
// that is open.
func stillHeld(b ledger.BoundaryContainment, st kvfence.ScopeStatus, err error) ledger.BoundaryContainment {
	switch {
	case err != nil:
		return failed(b, ledger.BoundaryUnknown, "status_unknown",
			fmt.Errorf("the hold was acknowledged, but the scope's status after it could not be read: %w", err))
	case st.Epoch < b.InstalledEpoch:
		return failed(b, ledger.BoundaryUnverified, "bad_answer",
			fmt.Errorf("%w: scope %q is at epoch %d, below the %d its hold installed", ErrBadAnswer, b.Scope, st.Epoch, b.InstalledEpoch))
	case st.Mode != kvfence.ModeHeld || st.ActiveGrant != "" || st.Grant != nil:
		return failed(b, ledger.BoundaryFailed, "scope_open",
			fmt.Errorf("scope %q is open at epoch %d under grant %q after the hold acknowledged at epoch %d: the hold with the containment's id does not fence it",
				b.Scope, st.Epoch, st.ActiveGrant, b.InstalledEpoch))
	}
	return b
}

// stillFenced notes in b's observation error what a reading of an
// acknowledged boundary shows that its acknowledgment no longer does: the
// scope below the installed epoch (a receiver restored from before the
// hold), or open under a grant that is not a recorded successor's. The
// acknowledgment stands, as the record of what the receiver signed; the
// note keeps the scope's present state visible.
func stillFenced(rec ledger.Containment, b *ledger.BoundaryContainment, st kvfence.ScopeStatus) {
	var note string
	switch {
	case st.Epoch < b.InstalledEpoch:
		note = fmt.Sprintf("scope is at epoch %d, below the %d its hold installed: the receiver may have been restored from a backup",
			st.Epoch, b.InstalledEpoch)
	case st.Grant != nil || st.ActiveGrant != "":
		id, claim := st.ActiveGrant, ""
		if st.Grant != nil {
			id, claim = st.Grant.ID, st.Grant.Claim
		}
		for _, g := range rec.Successor {
			if g.Receiver == b.Receiver && g.Scope == b.Scope && g.Grant == id {
				return
			}
		}
		note = fmt.Sprintf("scope is open at epoch %d under grant %q of claim %q, which is not a recorded successor's", st.Epoch, id, claim)
	default:
		return
	}
	if b.ObservationError != "" {
		note = b.ObservationError + "; " + note
	}
	b.ObservationError = printable(note, maxErrorText)
}

// observe reads the scope's latest stale rejection and the effects
// applied under the superseded claim into b, with when it read them, and
// returns the status it read. A reading that fails, or an answer that
// does not fit the question, keeps the last values and says so in
// b.ObservationError: an empty list of effects must mean that the
// receiver reported none.
func (c *Coordinator) observe(ctx context.Context, rec ledger.Containment, b *ledger.BoundaryContainment, bd Boundary) (kvfence.ScopeStatus, error) {
	octx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	at := c.o.Now().UTC()
	fail := func(format string, args ...any) {
		b.ObservationError = printable(fmt.Sprintf(format, args...), maxErrorText)
	}
	st, err := bd.Status(octx, b.Scope)
	if err == nil && st.Scope != b.Scope {
		err = fmt.Errorf("%w: asked for the status of scope %q, got %q", ErrBadAnswer, b.Scope, st.Scope)
	}
	if err != nil {
		fail("status: %v", err)
		return st, err
	}
	rs, err := bd.ReceiptsByClaim(octx, b.Scope, rec.SupersededClaim)
	if err != nil {
		fail("the receipts of claim %s could not be read: %v", rec.SupersededClaim, err)
		return st, nil
	}
	effects := make([]ledger.Effect, 0, min(len(rs), ledger.MaxOutstanding))
	for _, r := range rs {
		if r.Scope != b.Scope {
			fail("asked for the receipts of scope %q, got one of %q", b.Scope, r.Scope)
			return st, nil
		}
		if ident.Check("action", r.Action) != nil || ident.Check("target", r.Target) != nil {
			fail("a receipt's action or target is not a name")
			return st, nil
		}
		if len(effects) < ledger.MaxOutstanding {
			effects = append(effects, ledger.Effect{Receiver: b.Receiver, Scope: b.Scope, Action: r.Action, AuditSeq: r.AuditSeq,
				AppliedAt: r.At.UTC(), Target: r.Target, Revision: r.RevAfter})
		}
	}
	var notes []string
	// A receipt and a stale rejection, once seen, stay: the receiver's
	// audit keeps them, so a reading without them (a receiver restored
	// from before them, or one that lies) is not evidence that they are
	// gone. The record keeps what it saw and says the reading disagreed.
	stale := st.LastStaleRejectionAt.UTC()
	if st.LastStaleRejectionAt.IsZero() {
		stale = time.Time{}
	}
	if stale.Before(b.LastStaleRejectionAt) {
		notes = append(notes, fmt.Sprintf("the receiver reports its last stale rejection at %s, before the %s observed earlier",
			stale.Format(time.RFC3339Nano), b.LastStaleRejectionAt.Format(time.RFC3339Nano)))
		stale = b.LastStaleRejectionAt
	}
	effects, missing := keepObserved(b.Outstanding, effects)
	if missing > 0 {
		notes = append(notes, fmt.Sprintf("%d effects observed earlier are missing from the receiver's answer or differ in it; the earlier ones are kept", missing))
	}
	if len(rs) > ledger.MaxOutstanding {
		notes = append(notes, fmt.Sprintf("%d receipts under claim %s; the oldest %d are listed", len(rs), rec.SupersededClaim, len(effects)))
	}
	b.LastStaleRejectionAt = stale
	b.Outstanding, b.ObservedAt, b.ObservationError = effects, at, ""
	if len(notes) > 0 {
		fail("%s", strings.Join(notes, "; "))
	}
	return st, nil
}

// keepObserved returns the effects read now together with every one
// recorded before, ordered by audit seq and bounded as the record is
// (the oldest kept), and how many of those recorded before the reading
// left out or changed: an earlier effect wins over a different one at
// the same seq.
func keepObserved(before, now []ledger.Effect) ([]ledger.Effect, int) {
	bySeq := make(map[uint64]ledger.Effect, len(before)+len(now))
	for _, e := range now {
		bySeq[e.AuditSeq] = e
	}
	missing := 0
	for _, e := range before {
		if n, ok := bySeq[e.AuditSeq]; !ok || !n.AppliedAt.Equal(e.AppliedAt) || n.Receiver != e.Receiver || n.Scope != e.Scope ||
			n.Action != e.Action || n.Target != e.Target || n.Revision != e.Revision {
			missing++
			bySeq[e.AuditSeq] = e
		}
	}
	out := make([]ledger.Effect, 0, len(bySeq))
	for _, e := range bySeq {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b ledger.Effect) int { return cmp.Compare(a.AuditSeq, b.AuditSeq) })
	if len(out) > ledger.MaxOutstanding {
		out = out[:ledger.MaxOutstanding]
	}
	return out, missing
}

// session dials each receiver once per call and closes what it dialled.
type session struct {
	c     *Coordinator
	mu    sync.Mutex
	dials map[string]*dialed
}

type dialed struct {
	once sync.Once
	r    ledger.Receiver
	b    Boundary
	err  error
}

func (c *Coordinator) session() *session { return &session{c: c, dials: map[string]*dialed{}} }

// dial returns the named receiver's registration and Boundary. An error
// (an unregistered receiver, a failed dial) wraps ErrUnreachable.
func (s *session) dial(ctx context.Context, name string) (ledger.Receiver, Boundary, error) {
	s.mu.Lock()
	d, ok := s.dials[name]
	if !ok {
		d = &dialed{}
		s.dials[name] = d
	}
	s.mu.Unlock()
	d.once.Do(func() {
		d.r, d.err = s.c.o.Ledger.Receiver(name)
		if d.err != nil {
			d.err = fmt.Errorf("%w: %s: %w", ErrUnreachable, name, d.err)
			return
		}
		// Dialling is bounded like the calls: a receiver that cannot be
		// reached must not hold up the others' record.
		dctx, cancel := context.WithTimeout(ctx, s.c.o.Timeout)
		defer cancel()
		d.b, d.err = s.c.o.Dial(dctx, d.r)
		if d.err == nil && d.b == nil {
			d.err = errors.New("no boundary")
		}
		if d.err != nil {
			d.err = fmt.Errorf("%w: %s: %w", ErrUnreachable, name, d.err)
		}
	})
	return d.r, d.b, d.err
}

func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.dials {
		if cl, ok := d.b.(io.Closer); ok {
			cl.Close()
		}
	}
}

// byReceiver runs fn for every boundary: the receivers in parallel, the
// boundaries of one receiver one after another, so that a receiver on
// this host is never opened twice at once (its file lock would make the
// second wait).
func (c *Coordinator) byReceiver(ctx context.Context, s *session, bs []ledger.BoundaryContainment,
	fn func(ctx context.Context, i int, r ledger.Receiver, bd Boundary, derr error)) {
	groups := map[string][]int{}
	var order []string
	for i, b := range bs {
		if _, ok := groups[b.Receiver]; !ok {
			order = append(order, b.Receiver)
		}
		groups[b.Receiver] = append(groups[b.Receiver], i)
	}
	var wg sync.WaitGroup
	for _, name := range order {
		wg.Add(1)
		go func(idx []int) {
			defer wg.Done()
			r, bd, derr := s.dial(ctx, name)
			for _, i := range idx {
				fn(ctx, i, r, bd, derr)
			}
		}(groups[name])
	}
	wg.Wait()
}
