package ledger

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/ident"
)

// containmentRecord is a Containment as stored under its id.
type containmentRecord struct {
	// ID is Containment.ID.
	ID string `cbor:"id"`
	// Action is Containment.Action.
	Action string `cbor:"action"`
	// SupersededClaim is Containment.SupersededClaim.
	SupersededClaim string `cbor:"superseded_claim"`
	// Reason is Containment.Reason.
	Reason string `cbor:"reason"`
	// State is Containment.State, as the ledger derived it.
	State ContainmentState `cbor:"state"`
	// Boundaries is Containment.Boundaries.
	Boundaries []boundaryContainmentRecord `cbor:"boundaries"`
	// StartedAt is Containment.StartedAt.
	StartedAt int64 `cbor:"started_at"`
	// UpdatedAt is Containment.UpdatedAt.
	UpdatedAt int64 `cbor:"updated_at"`
	// Successor is Containment.Successor.
	Successor []successorRecord `cbor:"successor,omitempty"`
	// AuditSeq is Containment.AuditSeq.
	AuditSeq uint64 `cbor:"audit_seq"`
}

// boundaryContainmentRecord is a BoundaryContainment as stored in its
// containment.
type boundaryContainmentRecord struct {
	// Receiver is BoundaryContainment.Receiver.
	Receiver string `cbor:"receiver"`
	// Scope is BoundaryContainment.Scope.
	Scope string `cbor:"scope"`
	// HoldID is BoundaryContainment.HoldID.
	HoldID string `cbor:"hold_id"`
	// Result is BoundaryContainment.Result.
	Result BoundaryResult `cbor:"result"`
	// ErrorCode is BoundaryContainment.ErrorCode.
	ErrorCode string `cbor:"error_code,omitempty"`
	// Error is BoundaryContainment.Error.
	Error string `cbor:"error,omitempty"`
	// HoldRequestedAt is BoundaryContainment.HoldRequestedAt.
	HoldRequestedAt int64 `cbor:"hold_requested_at,omitempty"`
	// AcknowledgedAt is BoundaryContainment.AcknowledgedAt.
	AcknowledgedAt int64 `cbor:"acknowledged_at,omitempty"`
	// PreviousEpoch is BoundaryContainment.PreviousEpoch.
	PreviousEpoch uint64 `cbor:"previous_epoch,omitempty"`
	// InstalledEpoch is BoundaryContainment.InstalledEpoch.
	InstalledEpoch uint64 `cbor:"installed_epoch,omitempty"`
	// Ack is BoundaryContainment.Ack.
	Ack []byte `cbor:"ack,omitempty"`
	// Checkpoint is BoundaryContainment.Checkpoint.
	Checkpoint []byte `cbor:"checkpoint,omitempty"`
	// LastStaleRejectionAt is BoundaryContainment.LastStaleRejectionAt.
	LastStaleRejectionAt int64 `cbor:"last_stale_rejection_at,omitempty"`
	// Outstanding is BoundaryContainment.Outstanding.
	Outstanding []effectRecord `cbor:"outstanding,omitempty"`
	// ObservedAt is BoundaryContainment.ObservedAt; absent in records
	// written before it was kept.
	ObservedAt int64 `cbor:"observed_at,omitempty"`
	// ObservationError is BoundaryContainment.ObservationError.
	ObservationError string `cbor:"observation_error,omitempty"`
	// Alternate is BoundaryContainment.Alternate.
	Alternate *alternateRecord `cbor:"alternate,omitempty"`
	// Attempts is BoundaryContainment.Attempts.
	Attempts uint64 `cbor:"attempts"`
}

// effectRecord is an Effect as stored.
type effectRecord struct {
	Receiver  string `cbor:"receiver"`
	Scope     string `cbor:"scope"`
	Action    string `cbor:"action"`
	AuditSeq  uint64 `cbor:"audit_seq"`
	AppliedAt int64  `cbor:"applied_at,omitempty"`
	Target    string `cbor:"target"`
	Revision  uint64 `cbor:"revision,omitempty"`
}

// alternateRecord is an Alternate as stored.
type alternateRecord struct {
	Operator string `cbor:"operator"`
	Reason   string `cbor:"reason"`
	At       int64  `cbor:"at"`
}

// successorRecord is a SuccessorGrant as stored.
type successorRecord struct {
	Receiver    string `cbor:"receiver"`
	Scope       string `cbor:"scope"`
	Grant       string `cbor:"grant"`
	Epoch       uint64 `cbor:"epoch"`
	Executor    string `cbor:"executor"`
	Claim       string `cbor:"claim"`
	Decision    string `cbor:"decision"`
	ActivatedAt int64  `cbor:"activated_at"`
}

// containDec decodes containment records, which nest deeper than the
// other records (containment, boundaries, boundary, outstanding, effect).
var containDec cbor.DecMode

func init() {
	var err error
	containDec, err = cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
		MaxNestedLevels:   6,
		MaxArrayElements:  MaxOutstanding,
		MaxMapPairs:       32,
		UTF8:              cbor.UTF8RejectInvalid,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// decodeContainment decodes the containment stored under id and checks
// what its own bytes can show: the boundaries' hold ids are the ones the id
// derives, their results are known, and the stored state is the one they
// give.
func decodeContainment(id string, raw []byte) (containmentRecord, error) {
	var c containmentRecord
	bad := func(format string, args ...any) (containmentRecord, error) {
		return containmentRecord{}, fmt.Errorf("%w: containment %q: %s", ErrBadFormat, id, fmt.Sprintf(format, args...))
	}
	if err := containDec.Unmarshal(raw, &c); err != nil {
		return bad("%v", err)
	}
	if c.ID != id || c.Action == "" || c.SupersededClaim == "" || len(c.Boundaries) == 0 || len(c.Boundaries) > MaxBoundaries {
		return bad("not a containment record")
	}
	for _, b := range c.Boundaries {
		if b.HoldID != HoldID(id, b.Receiver, b.Scope) {
			return bad("boundary %s has hold id %q, not the one the containment derives", Boundary{b.Receiver, b.Scope}, b.HoldID)
		}
		if !knownResult(b.Result) && b.Result != BoundaryPending && b.Result != BoundaryAlternate {
			return bad("boundary %s has result %q", Boundary{b.Receiver, b.Scope}, b.Result)
		}
		if (b.Result == BoundaryAlternate && b.Alternate == nil) ||
			(b.Alternate != nil && b.Result != BoundaryAlternate && b.Result != BoundaryAcknowledged) {
			return bad("boundary %s: an alternate result goes with its alternate record", Boundary{b.Receiver, b.Scope})
		}
	}
	if c.State != deriveState(c.Boundaries) {
		return bad("state %q, but its boundaries give %q", c.State, deriveState(c.Boundaries))
	}
	return c, nil
}

// knownResult reports whether r is a result a hold attempt may record.
func knownResult(r BoundaryResult) bool {
	switch r {
	case BoundaryAcknowledged, BoundaryFailed, BoundaryTimeout, BoundaryUnknown, BoundaryUnverified:
		return true
	}
	return false
}

// deriveState is the containment's state given its boundaries' results:
// full only when every boundary acknowledged, full_with_alternate when
// every boundary acknowledged or was contained by an alternate path and at
// least one was, partial when some did, none otherwise.
func deriveState(bs []boundaryContainmentRecord) ContainmentState {
	acked, alt := 0, 0
	for _, b := range bs {
		switch b.Result {
		case BoundaryAcknowledged:
			acked++
		case BoundaryAlternate:
			alt++
		}
	}
	switch {
	case len(bs) > 0 && acked == len(bs):
		return ContainmentFull
	case len(bs) > 0 && acked+alt == len(bs):
		return ContainmentFullWithAlternate
	case acked+alt > 0:
		return ContainmentPartial
	}
	return ContainmentNone
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (c *containmentRecord) public() Containment {
	out := Containment{ID: c.ID, Action: c.Action, SupersededClaim: c.SupersededClaim, Reason: c.Reason, State: c.State,
		StartedAt: unixTime(c.StartedAt), UpdatedAt: unixTime(c.UpdatedAt), AuditSeq: c.AuditSeq}
	for _, b := range c.Boundaries {
		p := BoundaryContainment{Receiver: b.Receiver, Scope: b.Scope, HoldID: b.HoldID, Result: b.Result, ErrorCode: b.ErrorCode,
			Error: b.Error, HoldRequestedAt: unixTime(b.HoldRequestedAt), AcknowledgedAt: unixTime(b.AcknowledgedAt),
			PreviousEpoch: b.PreviousEpoch, InstalledEpoch: b.InstalledEpoch, Ack: clone(b.Ack), Checkpoint: clone(b.Checkpoint),
			LastStaleRejectionAt: unixTime(b.LastStaleRejectionAt), Attempts: b.Attempts, ObservedAt: unixTime(b.ObservedAt),
			ObservationError: b.ObservationError}
		for _, e := range b.Outstanding {
			p.Outstanding = append(p.Outstanding, Effect{Receiver: e.Receiver, Scope: e.Scope, Action: e.Action, AuditSeq: e.AuditSeq,
				AppliedAt: unixTime(e.AppliedAt), Target: e.Target, Revision: e.Revision})
		}
		if b.Alternate != nil {
			p.Alternate = &Alternate{Operator: b.Alternate.Operator, Reason: b.Alternate.Reason, At: unixTime(b.Alternate.At)}
		}
		out.Boundaries = append(out.Boundaries, p)
	}
	for _, g := range c.Successor {
		out.Successor = append(out.Successor, SuccessorGrant{Receiver: g.Receiver, Scope: g.Scope, Grant: g.Grant, Epoch: g.Epoch,
			Executor: g.Executor, Claim: g.Claim, Decision: g.Decision, ActivatedAt: unixTime(g.ActivatedAt)})
	}
	return out
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// containmentKinds are the entry kinds that write a containment record.
var containmentKinds = []string{KindContain, KindContainRecord, KindContainAlternate, KindContainSuccessor}

// loadContainment reads containment id and checks it against its newest
// audit entry. found is false if there is none.
func loadContainment(tx engine.Tx, id string) (c containmentRecord, found bool, err error) {
	raw, err := getOptional(tx, bucketContainments, []byte(id))
	if err != nil || raw == nil {
		return c, false, err
	}
	if c, err = decodeContainment(id, raw); err != nil {
		return c, false, err
	}
	if err := checkSealed(tx, "containment "+id, raw, c.AuditSeq, id, containmentKinds...); err != nil {
		return c, false, err
	}
	return c, true, nil
}

// loadExistingContainment is loadContainment for a containment that must
// exist: none is ErrNoContainment.
func loadExistingContainment(tx engine.Tx, id string) (containmentRecord, error) {
	c, found, err := loadContainment(tx, id)
	if err == nil && !found {
		err = fmt.Errorf("%w: %q", ErrNoContainment, id)
	}
	return c, err
}

// supersededClaim returns the action's newest claim that a takeover
// superseded, or ErrNoClaim.
func supersededClaim(tx engine.Tx, action string) (*claimRecord, error) {
	var act actionRecord
	if _, err := get(tx, bucketActions, []byte(action), &act); err != nil {
		return nil, err
	}
	for i := len(act.Claims) - 1; i >= 0; i-- {
		var c claimRecord
		if ok, err := get(tx, bucketClaims, []byte(act.Claims[i]), &c); err != nil {
			return nil, err
		} else if !ok {
			return nil, fmt.Errorf("%w: action %q lists missing claim %s", ErrBadFormat, action, act.Claims[i])
		}
		if c.SupersededBy != "" && (c.State == StateUncertain || c.State == StateSucceeded || c.State == StateFailed) {
			return &c, nil
		}
	}
	return nil, fmt.Errorf("%w: no claim of %q was superseded by a takeover; containment follows a takeover", ErrNoClaim, action)
}

// currentContainment returns the containment of the action's newest
// superseded claim. A containment of an older superseded claim is not
// returned: its epochs were overtaken by the newer takeover's.
func (l *Ledger) currentContainment(tx engine.Tx, action string) (containmentRecord, error) {
	old, err := supersededClaim(tx, action)
	if errors.Is(err, ErrNoClaim) {
		return containmentRecord{}, fmt.Errorf("%w: %q: %v", ErrNoContainment, action, err)
	}
	if err != nil {
		return containmentRecord{}, err
	}
	c, found, err := loadContainment(tx, ContainmentID(l.id, action, old.Ref))
	if err == nil && !found {
		err = fmt.Errorf("%w: %q has none for its superseded claim %s", ErrNoContainment, action, old.Ref)
	}
	return c, err
}

// writeContainment derives c's state and stores it with the entry e of
// the given kind that records the change.
func (w *wtx) writeContainment(c *containmentRecord, kind, note string) error {
	c.State = deriveState(c.Boundaries)
	c.UpdatedAt = w.now.UnixNano()
	return w.putSealed(bucketContainments, []byte(c.ID), c, &c.AuditSeq, &audit.Entry{Kind: kind, Action: c.Action,
		Decision: c.SupersededClaim, Target: c.ID, Outcome: string(c.State), Note: note})
}

// errUnchanged rolls back a transaction that found what it was asked to
// create already there: nothing is written or signed.
var errUnchanged = errors.New("ledger: unchanged")

// BeginContainment returns the containment of action's newest claim that a
// takeover superseded, creating it with every boundary of the action's
// approval pending, each with its HoldID. A containment that exists is
// returned as it is, with its first reason, and nothing is written. An
// action with no approval is ErrNotApproved, one whose approval names no
// boundaries ErrNoBoundaries, one with no superseded claim ErrNoClaim.
func (l *Ledger) BeginContainment(ctx context.Context, action, reason string) (Containment, error) {
	if err := checkIdents("action", action, "reason", reason); err != nil {
		return Containment{}, err
	}
	if err := ctx.Err(); err != nil {
		return Containment{}, err
	}
	var out Containment
	err := l.update(func(w *wtx) error {
		var appr approvalRecord
		if ok, err := get(w.tx, bucketApprovals, []byte(action), &appr); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: %q", ErrNotApproved, action)
		}
		if len(appr.Boundaries) == 0 {
			return fmt.Errorf("%w: %q; approve it with its boundaries to contain it", ErrNoBoundaries, action)
		}
		if err := checkApprovalBoundaries(w.tx, &appr); err != nil {
			return err
		}
		old, err := supersededClaim(w.tx, action)
		if err != nil {
			return err
		}
		id := ContainmentID(l.id, action, old.Ref)
		c, found, err := loadContainment(w.tx, id)
		if err != nil {
			return err
		}
		if found {
			out = c.public()
			return errUnchanged
		}
		now := w.now.UnixNano()
		c = containmentRecord{ID: id, Action: action, SupersededClaim: old.Ref, Reason: reason, StartedAt: now}
		for _, b := range appr.Boundaries {
			c.Boundaries = append(c.Boundaries, boundaryContainmentRecord{Receiver: b.Receiver, Scope: b.Scope,
				HoldID: HoldID(id, b.Receiver, b.Scope), Result: BoundaryPending})
		}
		if err := w.writeContainment(&c, KindContain, "reason "+strconv.Quote(reason)); err != nil {
			return err
		}
		out = c.public()
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return out, l.idleAcknowledged()
	}
	return out, err
}

// Containment returns the containment of the action's newest superseded
// claim, or ErrNoContainment. A stored record that is not the one its
// newest audit entry wrote is ErrContainmentTampered.
func (l *Ledger) Containment(action string) (Containment, error) {
	if err := checkIdents("action", action); err != nil {
		return Containment{}, err
	}
	var out Containment
	err := l.checkedView(func(tx engine.Tx) error {
		c, err := l.currentContainment(tx, action)
		out = c.public()
		return err
	})
	if err != nil {
		return Containment{}, err
	}
	return out, nil
}

// checkText checks free text a receiver or coordinator reports, if any, by
// the rules of names (UTF-8, at most ident.MaxLen bytes, no control
// characters), so that it prints as what it is.
func checkText(field, s string) error {
	if s == "" {
		return nil
	}
	if err := ident.Check(field, s); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return nil
}

// checkResult checks what a hold attempt reports before it is compared
// with the record.
func checkResult(r *BoundaryContainment) error {
	if err := checkIdents("boundary receiver", r.Receiver, "boundary scope", r.Scope); err != nil {
		return err
	}
	if !knownResult(r.Result) {
		return fmt.Errorf("%w: boundary %s: result %q is not one a hold attempt records", ErrInvalidArgument,
			Boundary{r.Receiver, r.Scope}, r.Result)
	}
	if err := checkText("error code", r.ErrorCode); err != nil {
		return err
	}
	if err := checkText("error", r.Error); err != nil {
		return err
	}
	if err := checkText("observation error", r.ObservationError); err != nil {
		return err
	}
	if len(r.Ack) > audit.MaxHoldAckSize || len(r.Checkpoint) > audit.MaxCheckpointSize {
		return fmt.Errorf("%w: boundary %s: acknowledgment or checkpoint over its size limit", ErrInvalidArgument, Boundary{r.Receiver, r.Scope})
	}
	if len(r.Outstanding) > MaxOutstanding {
		return fmt.Errorf("%w: boundary %s: %d outstanding effects, over the limit of %d", ErrInvalidArgument,
			Boundary{r.Receiver, r.Scope}, len(r.Outstanding), MaxOutstanding)
	}
	for _, e := range r.Outstanding {
		// The names come from the receiver: they are recorded, and
		// printed, only if they print as what they are.
		for _, s := range []string{e.Receiver, e.Scope, e.Action, e.Target} {
			if err := checkText("outstanding effect's name", s); err != nil {
				return fmt.Errorf("%w: boundary %s: %v", ErrInvalidArgument, Boundary{r.Receiver, r.Scope}, err)
			}
		}
	}
	return nil
}

// RecordBoundaries records hold attempts' results in containment id. Each
// result names a boundary of the record with its HoldID, else
// ErrInvalidArgument. An acknowledged result is recorded only if
// VerifyAcknowledgment passes under the receiver's pinned key, else
// ErrUnverifiedAcknowledgment. Any refusal writes nothing.
//
// The merge is monotonic: a boundary that acknowledged, or was contained
// by an alternate path, keeps that result when a later attempt reports
// worse (the later result is ignored but for its attempt count), and a
// second acknowledgment of an acknowledged boundary must name the same
// installed epoch (else ErrAcknowledgmentConflict) and leaves the first
// one recorded. An alternate boundary that acknowledges becomes
// acknowledged and keeps its alternate record as history. A result other
// than acknowledged keeps its acknowledgment bytes as evidence but records
// no epochs or acknowledgment time: they were not verified. The ledger
// derives the state.
func (l *Ledger) RecordBoundaries(ctx context.Context, id string, results []BoundaryContainment) (Containment, error) {
	if err := checkIdents("containment id", id); err != nil {
		return Containment{}, err
	}
	if len(results) == 0 {
		return Containment{}, fmt.Errorf("%w: no results to record", ErrInvalidArgument)
	}
	for i := range results {
		if err := checkResult(&results[i]); err != nil {
			return Containment{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return Containment{}, err
	}
	var out Containment
	err := l.update(func(w *wtx) error {
		c, err := loadExistingContainment(w.tx, id)
		if err != nil {
			return err
		}
		seen := make(map[int]bool)
		var notes []string
		for _, r := range results {
			i := c.boundary(r.Receiver, r.Scope)
			switch {
			case i < 0:
				return fmt.Errorf("%w: %s is not a boundary of containment %s", ErrInvalidArgument, Boundary{r.Receiver, r.Scope}, id)
			case r.HoldID != c.Boundaries[i].HoldID:
				return fmt.Errorf("%w: boundary %s: hold id %q, want %q", ErrInvalidArgument, Boundary{r.Receiver, r.Scope},
					r.HoldID, c.Boundaries[i].HoldID)
			case seen[i]:
				return fmt.Errorf("%w: boundary %s has two results in one call", ErrInvalidArgument, Boundary{r.Receiver, r.Scope})
			}
			seen[i] = true
			if r.Result == BoundaryAcknowledged {
				pinned, err := w.receiver(r.Receiver)
				if err != nil {
					return err
				}
				if _, _, err := r.VerifyAcknowledgment(pinned); err != nil {
					return err
				}
			}
			note, err := mergeResult(&c.Boundaries[i], &r)
			if err != nil {
				return err
			}
			notes = append(notes, note)
		}
		if err := w.writeContainment(&c, KindContainRecord, strings.Join(notes, " ")); err != nil {
			return err
		}
		out = c.public()
		return nil
	})
	return out, err
}

// boundary returns the index of the boundary (receiver, scope), or -1.
func (c *containmentRecord) boundary(receiver, scope string) int {
	for i, b := range c.Boundaries {
		if b.Receiver == receiver && b.Scope == scope {
			return i
		}
	}
	return -1
}

// mergeResult merges one checked result into its boundary and returns how
// the entry's note describes it.
func mergeResult(cur *boundaryContainmentRecord, r *BoundaryContainment) (string, error) {
	name := Boundary{cur.Receiver, cur.Scope}.String()
	acked := r.Result == BoundaryAcknowledged
	if cur.Result == BoundaryAcknowledged && acked {
		// The acknowledgment stands; a rerun brings what it saw since
		// (stale rejections, effects), which only a later reading has.
		if r.InstalledEpoch != cur.InstalledEpoch {
			return "", fmt.Errorf("%w: boundary %s acknowledged epoch %d, this acknowledgment says %d", ErrAcknowledgmentConflict,
				name, cur.InstalledEpoch, r.InstalledEpoch)
		}
		observe(cur, r)
		return name + " acknowledged, observed again", nil
	}
	cur.Attempts++
	switch {
	case (cur.Result == BoundaryAcknowledged || cur.Result == BoundaryAlternate) && !acked:
		return name + " " + string(r.Result) + " ignored (" + string(cur.Result) + " kept)", nil
	}
	next := boundaryContainmentRecord{Receiver: cur.Receiver, Scope: cur.Scope, HoldID: cur.HoldID, Result: r.Result,
		ErrorCode: r.ErrorCode, Error: r.Error, HoldRequestedAt: nanos(r.HoldRequestedAt), Ack: clone(r.Ack),
		Checkpoint: clone(r.Checkpoint), Alternate: cur.Alternate, Attempts: cur.Attempts,
		LastStaleRejectionAt: cur.LastStaleRejectionAt, Outstanding: cur.Outstanding, ObservedAt: cur.ObservedAt,
		ObservationError: cur.ObservationError}
	if acked {
		next.AcknowledgedAt, next.PreviousEpoch, next.InstalledEpoch = nanos(r.AcknowledgedAt), r.PreviousEpoch, r.InstalledEpoch
	}
	observe(&next, r)
	*cur = next
	note := name + " " + string(r.Result)
	if acked {
		note += fmt.Sprintf(" epoch %d", r.InstalledEpoch)
	}
	return note, nil
}

// observe sets cur's observations of the receiver (stale rejections,
// outstanding effects) to r's, unless r's reading is older than the one
// recorded (two coordinators rerunning at once, the one that read first
// recording last). An effect recorded before and missing from r is kept:
// a receipt, once applied, stays in the receiver's audit.
func observe(cur *boundaryContainmentRecord, r *BoundaryContainment) {
	if nanos(r.ObservedAt) < cur.ObservedAt {
		return
	}
	prev, prevStale := cur.Outstanding, cur.LastStaleRejectionAt
	cur.LastStaleRejectionAt, cur.ObservedAt, cur.ObservationError = max(nanos(r.LastStaleRejectionAt), prevStale), nanos(r.ObservedAt), r.ObservationError
	cur.Outstanding = nil
	seen := make(map[uint64]bool, len(r.Outstanding))
	for _, e := range r.Outstanding {
		seen[e.AuditSeq] = true
		cur.Outstanding = append(cur.Outstanding, effectRecord{Receiver: e.Receiver, Scope: e.Scope, Action: e.Action,
			AuditSeq: e.AuditSeq, AppliedAt: nanos(e.AppliedAt), Target: e.Target, Revision: e.Revision})
	}
	for _, e := range prev {
		if !seen[e.AuditSeq] && len(cur.Outstanding) < MaxOutstanding {
			cur.Outstanding = append(cur.Outstanding, e)
		}
	}
	slices.SortStableFunc(cur.Outstanding, func(a, b effectRecord) int { return cmp.Compare(a.AuditSeq, b.AuditSeq) })
}

// RecordAlternate records that a boundary of the action's newest
// containment, which did not acknowledge its hold, was contained by
// another, independently authorised path. req.Scope may be empty when the
// receiver has exactly one boundary in the containment. The state then
// reads full_with_alternate at best, never full. A boundary that
// acknowledged is ErrAlreadyAcknowledged.
func (l *Ledger) RecordAlternate(ctx context.Context, req AlternateRequest) (Containment, error) {
	if err := checkIdents("action", req.Action, "receiver", req.Receiver, "operator", req.Operator, "reason", req.Reason); err != nil {
		return Containment{}, err
	}
	if req.Scope != "" {
		if err := checkIdents("scope", req.Scope); err != nil {
			return Containment{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return Containment{}, err
	}
	var out Containment
	err := l.update(func(w *wtx) error {
		c, err := l.currentContainment(w.tx, req.Action)
		if err != nil {
			return err
		}
		i := -1
		if req.Scope != "" {
			i = c.boundary(req.Receiver, req.Scope)
		} else {
			for j, b := range c.Boundaries {
				if b.Receiver != req.Receiver {
					continue
				}
				if i >= 0 {
					return fmt.Errorf("%w: receiver %q has several boundaries in containment %s; name the scope", ErrInvalidArgument,
						req.Receiver, c.ID)
				}
				i = j
			}
		}
		if i < 0 {
			return fmt.Errorf("%w: %s is not a boundary of %q's containment %s", ErrInvalidArgument,
				Boundary{req.Receiver, req.Scope}, req.Action, c.ID)
		}
		b := &c.Boundaries[i]
		if b.Result == BoundaryAcknowledged {
			return fmt.Errorf("%w: %s, at epoch %d", ErrAlreadyAcknowledged, Boundary{b.Receiver, b.Scope}, b.InstalledEpoch)
		}
		b.Result = BoundaryAlternate
		b.Alternate = &alternateRecord{Operator: req.Operator, Reason: req.Reason, At: w.now.UnixNano()}
		if err := w.writeContainment(&c, KindContainAlternate, fmt.Sprintf("%s alternate by %q: %q",
			Boundary{b.Receiver, b.Scope}, req.Operator, req.Reason)); err != nil {
			return err
		}
		out = c.public()
		return nil
	})
	return out, err
}

// RecordSuccessor records a successor's grants in containment id. It is
// ErrNotContained unless the state is full or full_with_alternate and the
// containment is of the action's newest superseded claim, and
// ErrNotReconciled unless the superseded claim was reconciled. Each grant
// names an acknowledged boundary and the epoch the containment installed
// there, else ErrInvalidArgument. A grant recorded already (same boundary
// and grant id) is not recorded twice. Any refusal writes nothing.
func (l *Ledger) RecordSuccessor(ctx context.Context, id string, grants []SuccessorGrant) (Containment, error) {
	if err := checkIdents("containment id", id); err != nil {
		return Containment{}, err
	}
	if len(grants) == 0 {
		return Containment{}, fmt.Errorf("%w: no grants to record", ErrInvalidArgument)
	}
	for _, g := range grants {
		if err := checkIdents("receiver", g.Receiver, "scope", g.Scope, "grant", g.Grant, "executor", g.Executor,
			"claim", g.Claim, "decision", g.Decision); err != nil {
			return Containment{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return Containment{}, err
	}
	var out Containment
	err := l.update(func(w *wtx) error {
		c, err := loadExistingContainment(w.tx, id)
		if err != nil {
			return err
		}
		if c.State != ContainmentFull && c.State != ContainmentFullWithAlternate {
			return fmt.Errorf("%w: containment %s of %q is %s", ErrNotContained, id, c.Action, c.State)
		}
		// A later takeover made another containment the action's own: this
		// one's epochs were overtaken, and a successor activated at them
		// would answer to a claim that is no longer the one superseded.
		newest, err := supersededClaim(w.tx, c.Action)
		if err != nil {
			return err
		}
		if newest.Ref != c.SupersededClaim {
			return fmt.Errorf("%w: containment %s is of claim %s, and a later takeover superseded claim %s", ErrNotContained,
				id, c.SupersededClaim, newest.Ref)
		}
		old, err := w.claim(c.SupersededClaim)
		if err != nil {
			return err
		}
		if err := checkReconciled(w.tx, old); err != nil {
			return err
		}
		seen := make(map[int]bool)
		var notes []string
		for _, g := range grants {
			i := c.boundary(g.Receiver, g.Scope)
			switch {
			case i < 0:
				return fmt.Errorf("%w: %s is not a boundary of containment %s", ErrInvalidArgument, Boundary{g.Receiver, g.Scope}, id)
			case c.Boundaries[i].Result != BoundaryAcknowledged:
				return fmt.Errorf("%w: boundary %s is %s; a successor is activated only where the hold was acknowledged",
					ErrInvalidArgument, Boundary{g.Receiver, g.Scope}, c.Boundaries[i].Result)
			case g.Epoch != c.Boundaries[i].InstalledEpoch:
				return fmt.Errorf("%w: boundary %s: grant at epoch %d, the containment installed %d", ErrInvalidArgument,
					Boundary{g.Receiver, g.Scope}, g.Epoch, c.Boundaries[i].InstalledEpoch)
			case seen[i]:
				return fmt.Errorf("%w: boundary %s has two grants in one call", ErrInvalidArgument, Boundary{g.Receiver, g.Scope})
			}
			seen[i] = true
			dup := false
			for _, s := range c.Successor {
				dup = dup || (s.Receiver == g.Receiver && s.Scope == g.Scope && s.Grant == g.Grant)
			}
			if dup {
				continue
			}
			at := nanos(g.ActivatedAt)
			if at == 0 {
				at = w.now.UnixNano()
			}
			c.Successor = append(c.Successor, successorRecord{Receiver: g.Receiver, Scope: g.Scope, Grant: g.Grant, Epoch: g.Epoch,
				Executor: g.Executor, Claim: g.Claim, Decision: g.Decision, ActivatedAt: at})
			notes = append(notes, fmt.Sprintf("%s grant %q epoch %d", Boundary{g.Receiver, g.Scope}, g.Grant, g.Epoch))
		}
		if len(notes) == 0 {
			out = c.public()
			return errUnchanged
		}
		if err := w.writeContainment(&c, KindContainSuccessor, strings.Join(notes, " ")); err != nil {
			return err
		}
		out = c.public()
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return out, l.idleAcknowledged()
	}
	return out, err
}

// VerifyAcknowledgment checks b's acknowledgment and checkpoint against r,
// the receiver pinned for b: both parse and verify under r's key, name r's
// receiver id, the acknowledgment names b's scope and hold id and the
// checkpoint covers it, and b's epochs and acknowledgment time are the
// acknowledgment's. It returns them parsed. Every failure wraps
// ErrUnverifiedAcknowledgment.
func (b BoundaryContainment) VerifyAcknowledgment(r Receiver) (audit.SignedHoldAck, audit.SignedCheckpoint, error) {
	var none audit.SignedHoldAck
	var noCP audit.SignedCheckpoint
	fail := func(format string, args ...any) (audit.SignedHoldAck, audit.SignedCheckpoint, error) {
		return none, noCP, fmt.Errorf("%w: boundary %s: %s", ErrUnverifiedAcknowledgment, Boundary{b.Receiver, b.Scope},
			fmt.Sprintf(format, args...))
	}
	if b.Receiver != r.Name {
		return fail("checked against receiver %q, not the boundary's own", r.Name)
	}
	ack, err := audit.ParseSignedHoldAck(b.Ack)
	if err != nil {
		return fail("%v", err)
	}
	cp, err := audit.ParseSignedCheckpoint(b.Checkpoint)
	if err != nil {
		return fail("%v", err)
	}
	if err := ack.Verify(r.PublicKey); err != nil {
		return fail("acknowledgment under the pinned key: %v", err)
	}
	if err := cp.Verify(r.PublicKey); err != nil {
		return fail("checkpoint under the pinned key: %v", err)
	}
	switch {
	case ack.Receiver != r.ReceiverID || cp.Receiver != r.ReceiverID:
		return fail("from receiver %q (checkpoint %q), the pinned receiver is %q", ack.Receiver, cp.Receiver, r.ReceiverID)
	case ack.Scope != b.Scope:
		return fail("acknowledges scope %q", ack.Scope)
	case b.HoldID == "" || ack.HoldID != b.HoldID:
		return fail("acknowledges hold id %q, want %q", ack.HoldID, b.HoldID)
	}
	if err := ack.CoveredBy(cp.Checkpoint); err != nil {
		return fail("%v", err)
	}
	if ack.PreviousEpoch != b.PreviousEpoch || ack.Epoch != b.InstalledEpoch || ack.At != nanos(b.AcknowledgedAt) {
		return fail("the result says epochs %d to %d at %d, the acknowledgment %d to %d at %d", b.PreviousEpoch, b.InstalledEpoch,
			nanos(b.AcknowledgedAt), ack.PreviousEpoch, ack.Epoch, ack.At)
	}
	return ack, cp, nil
}

// CheckReconciled returns nil if claim ref was reconciled: its record says
// so and the audit chain holds the reconcile entry that did it. A claim
// still uncertain is ErrNotReconciled; a record that says reconciled with
// no such entry was edited in the file, ErrContainmentTampered.
func (l *Ledger) CheckReconciled(ref string) error {
	if err := checkIdents("claim", ref); err != nil {
		return err
	}
	return l.checkedView(func(tx engine.Tx) error {
		var c claimRecord
		if ok, err := get(tx, bucketClaims, []byte(ref), &c); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: %s", ErrNoClaim, ref)
		}
		return checkReconciled(tx, &c)
	})
}

// checkReconciled checks that c was reconciled by the entry it names.
func checkReconciled(tx engine.Tx, c *claimRecord) error {
	if c.ReconciledBy == "" || (c.State != StateSucceeded && c.State != StateFailed) {
		return fmt.Errorf("%w: claim %s is %s; reconcile it first", ErrNotReconciled, c.Ref, c.State)
	}
	// The claim's record is not sealed: the chain, which its anchor
	// covers, is what says that an operator reconciled it.
	is := func(v []byte) (bool, error) {
		e, err := audit.DecodeEntry(v)
		if err != nil {
			return false, fmt.Errorf("%w: audit entry: %v", ErrBadFormat, err)
		}
		return e.Kind == KindReconcile && e.Decision == c.Ref && e.Action == c.Action && e.Outcome == string(c.State) &&
			e.Executor == c.ReconciledBy, nil
	}
	if v, err := tx.Get(bucketAudit, audit.SeqKey(c.AuditSeq)); err != nil {
		return err
	} else if v != nil {
		if ok, err := is(v); err != nil || ok {
			if err == nil {
				err = checkLinked(tx, c.AuditSeq, v)
			}
			return err
		}
	}
	needle, found := []byte(c.Ref), false
	var foundSeq uint64
	var foundRaw []byte
	err := tx.Scan(bucketAudit, nil, func(k, v []byte) error {
		if found || !bytes.Contains(v, needle) {
			return nil
		}
		ok, err := is(v)
		if ok && err == nil {
			found, foundSeq, foundRaw = true, binary.BigEndian.Uint64(k), append([]byte(nil), v...)
		}
		return err
	})
	if err == nil && found {
		err = checkLinked(tx, foundSeq, foundRaw)
	}
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%w: claim %s reads %s, reconciled by %q, but no reconcile entry in the audit chain says so",
			ErrContainmentTampered, c.Ref, c.State, c.ReconciledBy)
	}
	return nil
}
