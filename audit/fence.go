package audit

import (
	"fmt"
	"slices"
	"strings"
)

// The receiver's entry kinds and submit outcomes. They are defined here, and
// the receiver uses these constants, because Verify replays the scopes'
// control state from them (see Verify): one definition keeps the writer and
// the verifier from drifting apart, which a copy passed in VerifyOptions
// would not.
const (
	KindInit          = "init"           // the receiver's first entry
	KindScopeCreated  = "scope_created"  // scope, epoch 1: the scope exists, held
	KindTargetCreated = "target_created" // scope, target: a target exists
	KindActivate      = "activate"       // scope, epoch, grant: the scope is open under grant
	KindHold          = "hold"           // scope, epoch: the scope is held at the new epoch
	KindSubmit        = "submit"         // a decision; outcome says which
	// KindGrantExtended records that the scope's active grant, named with
	// its scope and epoch, stays valid until a later time (its note says
	// which). It changes no scope's epoch, mode or active grant.
	KindGrantExtended = "grant_extended"
	// KindRecovered is a recovery admission's entry: every scope held at a
	// new epoch and every active grant removed. It names no scope.
	KindRecovered = "recovered"
	// KindReanchored is a lost-anchor admission's entry: like recovered,
	// every scope held at a new epoch and every grant revoked.
	KindReanchored = "reanchored"

	OutcomeApplied        = "applied"         // the mutation committed
	OutcomeAlreadyApplied = "already_applied" // an identical request was applied before; nothing changed
	OutcomeDenied         = "denied"          // refused; reason says why
	// OutcomeDispatching is the decision of a write to a remote target:
	// it passed every check and its write was handed to the target, so,
	// like an applied submit, it must name the scope's active grant.
	OutcomeDispatching = "dispatching"
)

// FenceViolationError reports an applied submit entry, or a grant
// extension, whose grant was not its scope's active grant when it was
// recorded: the receiver that wrote it skipped its checks 2-4 (scope open,
// epoch equal, grant active). It matches ErrFenceViolation.
type FenceViolationError struct {
	Seq uint64 // the applied submit or grant_extended entry
	// Kind is the entry's kind: KindSubmit, or KindGrantExtended for an
	// extension of a grant that was not active.
	Kind  string
	Scope string // the scope it names
	Epoch uint64 // the epoch it names
	Grant string // the grant it names
	// Hold is the seq of the hold or recovery entry that superseded Grant:
	// the one that ended Grant's activation when the chain shows it, or
	// else the scope's latest one before Seq, by which Grant had been
	// superseded. It is 0 when the chain holds neither for the scope.
	Hold uint64
	// HoldEpoch is the epoch Hold moved the scope to; 0 for a recovery,
	// whose entry does not list each scope's new epoch.
	HoldEpoch uint64
	// Recovery says Hold is a recovery entry, not a hold.
	Recovery bool
	// ActiveGrant is the scope's active grant at Seq; it is empty when the
	// scope was held.
	ActiveGrant string
	// ActiveEpoch is the epoch ActiveGrant was activated at.
	ActiveEpoch uint64
	// Activated is the seq of the entry that activated ActiveGrant.
	Activated uint64
}

// Error names the entry, the grant and the hold that superseded it, so
// that the message alone is evidence.
func (e *FenceViolationError) Error() string {
	var b strings.Builder
	verb := "applied"
	if e.Kind == KindGrantExtended {
		verb = "extended"
	}
	fmt.Fprintf(&b, "%v: entry %d %s grant %q at epoch %d in scope %q", ErrFenceViolation, e.Seq, verb, e.Grant, e.Epoch, e.Scope)
	switch {
	case e.Recovery:
		fmt.Fprintf(&b, ", superseded by the recovery at seq %d", e.Hold)
	case e.Hold != 0:
		fmt.Fprintf(&b, ", superseded by the hold at seq %d (epoch %d)", e.Hold, e.HoldEpoch)
	}
	if e.ActiveGrant == "" {
		if e.Hold == 0 {
			b.WriteString("; no entry before it activated that scope")
		} else {
			b.WriteString("; the scope was held")
		}
	} else {
		fmt.Fprintf(&b, "; the scope's active grant was %q at epoch %d, activated at seq %d", e.ActiveGrant, e.ActiveEpoch, e.Activated)
	}
	return b.String()
}

// Unwrap returns ErrFenceViolation.
func (e *FenceViolationError) Unwrap() error { return ErrFenceViolation }

// scopeFence is one scope's control state as the chain replays it, with
// what a violation's evidence needs: which hold ended which grant.
type scopeFence struct {
	epoch     uint64
	grant     string // the active grant; "" when held
	activated uint64 // seq of the activate entry of grant
	// recoveries is how many recovery entries the state has seen; a state
	// that saw fewer than the chain did is held (see fenceReplay.scope).
	recoveries uint64
	// hold is the latest hold or recovery, holdEpoch the epoch it set (0
	// for a recovery), recovery whether it was one.
	hold, holdEpoch uint64
	recovery        bool
	// ended is the grant the latest hold or recovery that found the scope
	// open superseded, and endedBy that entry.
	ended   string
	endedBy scopeHold
}

// scopeHold is a hold or recovery entry as evidence names it.
type scopeHold struct {
	seq, epoch uint64
	recovery   bool
}

// fenceReplay replays each scope's control state (epoch, mode, active
// grant) from a receiver's chain and records the first applied submit
// whose grant was not active. It keeps one small record per scope and
// nothing per entry: its memory grows with the number of scopes, not with
// the length of the chain.
type fenceReplay struct {
	scopes map[string]*scopeFence
	// recoveries counts recovery entries so far, recovered is the latest.
	// A recovery holds every scope; instead of visiting each, the replay
	// applies it to a scope when the scope is next looked at.
	recoveries, recovered uint64
	violation             *FenceViolationError
}

func newFenceReplay() *fenceReplay { return &fenceReplay{scopes: map[string]*scopeFence{}} }

// scope returns the scope's state, created held if the chain has not named
// it yet, with any recovery since it was last changed applied.
func (r *fenceReplay) scope(name string) *scopeFence {
	s := r.scopes[name]
	if s == nil {
		s = &scopeFence{recoveries: r.recoveries}
		r.scopes[name] = s
	}
	if s.recoveries < r.recoveries {
		s.holdAt(scopeHold{seq: r.recovered, recovery: true})
		s.recoveries = r.recoveries
	}
	return s
}

// holdAt records that h held the scope, superseding its active grant.
func (s *scopeFence) holdAt(h scopeHold) {
	if s.grant != "" {
		s.ended, s.endedBy = s.grant, h
	}
	s.grant, s.activated = "", 0
	s.hold, s.holdEpoch, s.recovery = h.seq, h.epoch, h.recovery
	if !h.recovery {
		s.epoch = h.epoch
	}
}

// observe replays one entry that has already verified as part of the chain.
func (r *fenceReplay) observe(e *Entry) {
	switch e.Kind {
	case KindScopeCreated:
		s := r.scope(e.Scope)
		s.epoch, s.grant = e.Epoch, ""
	case KindHold:
		r.scope(e.Scope).holdAt(scopeHold{seq: e.Seq, epoch: e.Epoch})
	case KindActivate:
		s := r.scope(e.Scope)
		s.epoch, s.grant, s.activated = e.Epoch, e.Grant, e.Seq
	case KindRecovered, KindReanchored:
		r.recoveries++
		r.recovered = e.Seq
	case KindSubmit, KindGrantExtended:
		// already_applied and denied entries change nothing, so they
		// cannot violate the fence. An extension must name the active
		// grant as an applied submit must: one that names a superseded
		// grant would have revived what a hold fenced.
		if (e.Kind == KindSubmit && e.Outcome != OutcomeApplied && e.Outcome != OutcomeDispatching) || r.violation != nil {
			return
		}
		s := r.scope(e.Scope)
		if s.grant != "" && s.grant == e.Grant && s.epoch == e.Epoch {
			return
		}
		v := &FenceViolationError{Seq: e.Seq, Kind: e.Kind, Scope: e.Scope, Epoch: e.Epoch, Grant: e.Grant,
			Hold: s.hold, HoldEpoch: s.holdEpoch, Recovery: s.recovery,
			ActiveGrant: s.grant, ActiveEpoch: s.epoch, Activated: s.activated}
		if s.ended == e.Grant && s.ended != "" {
			v.Hold, v.HoldEpoch, v.Recovery = s.endedBy.seq, s.endedBy.epoch, s.endedBy.recovery
		}
		if v.ActiveGrant == "" {
			v.ActiveEpoch = 0
		}
		r.violation = v
	}
}

// newFenceReplayAt returns a replay that goes on from a base: each scope's
// state as the base record holds it, every recovery already applied.
func newFenceReplayAt(b *Base) *fenceReplay {
	r := newFenceReplay()
	for _, s := range b.Scopes {
		r.scopes[s.Scope] = &scopeFence{epoch: s.Epoch, grant: s.Grant, activated: s.Activated,
			hold: s.Hold, holdEpoch: s.HoldEpoch, recovery: s.Recovery, ended: s.Ended,
			endedBy: scopeHold{seq: s.EndedBy, epoch: s.EndedByEpoch, recovery: s.EndedByRecovery}}
	}
	return r
}

// snapshot returns every scope's state in name order, with every recovery
// applied: what a base record keeps so that a replay from it judges each
// later entry exactly as a replay from the start does.
func (r *fenceReplay) snapshot() []ScopeBase {
	names := make([]string, 0, len(r.scopes))
	for name := range r.scopes {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]ScopeBase, 0, len(names))
	for _, name := range names {
		s := r.scope(name)
		out = append(out, ScopeBase{Scope: name, Epoch: s.epoch, Grant: s.grant, Activated: s.activated,
			Hold: s.hold, HoldEpoch: s.holdEpoch, Recovery: s.recovery, Ended: s.ended,
			EndedBy: s.endedBy.seq, EndedByEpoch: s.endedBy.epoch, EndedByRecovery: s.endedBy.recovery})
	}
	return out
}
