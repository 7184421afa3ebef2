package fencecheck

import (
	"hash/fnv"
	"maps"

	"github.com/anishathalye/porcupine"
	"github.com/kvfence/kvfence/kvfence"
)

// Kind names a call of a history.
type Kind uint8

// The calls the model knows.
const (
	// Submit is a worker's Submit of one envelope.
	Submit Kind = iota + 1
	// Hold is an administrator's hold of one scope.
	Hold
	// Activate is an administrator's activation of a grant.
	Activate
	// ReadStatus reads a scope's epoch, mode and active grant.
	ReadStatus
	// ReadTarget reads a target's revision and value.
	ReadTarget
)

// Input is a call as its client made it. Every call names its scope, the
// partition it belongs to; the other fields are those its kind uses.
type Input struct {
	// Kind is the call.
	Kind Kind
	// Scope is the envelope's, the held or activated scope, or the scope
	// of the read target.
	Scope string
	// Caller is the identity the worker was authenticated as (Submit).
	Caller string
	// Epoch is the envelope's epoch (Submit), or the epoch an activation
	// must find, 0 for any (Activate).
	Epoch uint64
	// Grant is the envelope's grant id (Submit).
	Grant string
	// Executor and Claim are the envelope's (Submit) or the grant's
	// (Activate).
	Executor string
	// Claim is the envelope's or the grant's claim reference.
	Claim string
	// Action, Target, ExpectRevision (0 for none) and Value describe the
	// request the envelope carries or the grant binds; Digest is the hex
	// SHA-256 of its bytes. ReadTarget uses Target alone.
	Action string
	// Target is the request's target, or the target read.
	Target string
	// ExpectRevision is the request's expected revision; 0 means none.
	ExpectRevision uint64
	// Value is the value the request sets.
	Value string
	// Digest is the hex SHA-256 of the request bytes.
	Digest string
}

// Administrative refusals: errors that are verdicts, so that the call
// certainly changed nothing.
const (
	ErrNotHeld       = "not_held"
	ErrEpochMismatch = "epoch_mismatch"
	ErrUnknownTarget = "unknown_target"
)

// Output is what a call returned.
type Output struct {
	// Unknown marks an error that is not a verdict: the call may or may
	// not have taken effect. Every other field is then empty.
	Unknown bool
	// Err is an administrative refusal (ErrNotHeld, ...) or a read of a
	// target that does not exist (ErrUnknownTarget).
	Err string
	// Outcome and Reason are Submit's decision.
	Outcome kvfence.Outcome
	// Reason is set when Outcome is kvfence.Denied.
	Reason kvfence.Reason
	// Revision is the target's revision: after the mutation (Submit
	// applied), after the earlier one (already_applied), or as read.
	Revision uint64
	// Value is the target's value as read.
	Value string
	// Epoch is the scope's new epoch (Hold), the grant's epoch (Activate)
	// or the scope's epoch (ReadStatus).
	Epoch uint64
	// PreviousEpoch is the epoch a hold advanced from.
	PreviousEpoch uint64
	// Grant is the id an activation minted, or the active grant read.
	Grant string
	// Mode is the scope's mode as read.
	Mode kvfence.Mode
}

// Setup is the state a run starts from: for every scope (at epoch 1, held,
// no active grant, as CreateScope leaves it), its targets' initial values,
// each at revision 1.
type Setup map[string]map[string]string

// unknownGrant is the active grant of a scope opened by an activation of
// unknown outcome: a grant whose id no client learned. No grant id equals
// it (ids are 32 hex digits).
const unknownGrant = "?"

// grantBinding is what an active grant binds a submission to.
type grantBinding struct {
	ID, Executor, Claim, Action, Digest string
}

// targetState is a target's revision and value.
type targetState struct {
	Rev   uint64
	Value string
}

// receipt is an applied action's record.
type receipt struct {
	Digest   string
	RevAfter uint64
}

// state is one scope's state. It is never changed once built: a step
// copies what it changes.
type state struct {
	epoch    uint64
	open     bool
	active   grantBinding
	targets  map[string]targetState
	receipts map[string]receipt
}

// Model returns the sequential fence as a porcupine model, for histories
// that start from setup. It partitions a history by scope.
func Model(setup Setup) porcupine.Model {
	f := &fence{setup: setup}
	return porcupine.Model{
		Partition: partition,
		Init:      func() any { return (*state)(nil) },
		Step: func(st, in, out any) (bool, any) {
			return f.step(st.(*state), in.(Input), out.(Output))
		},
		Equal:             func(a, b any) bool { return a.(*state).equal(b.(*state)) },
		Hash:              func(st any) uint64 { return st.(*state).hash() },
		DescribeOperation: func(in, out any) string { return describeOperation(in.(Input), out.(Output)) },
		DescribeState:     func(st any) string { return describeState(st.(*state)) },
	}
}

// partition splits a history by scope: no call reads or changes two scopes.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		scope := op.Input.(Input).Scope
		i, ok := index[scope]
		if !ok {
			i = len(parts)
			index[scope] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// fence is the model's step function over a setup.
type fence struct {
	setup Setup
}

// initial is the state of a scope before any call.
func (f *fence) initial(scope string) *state {
	targets, ok := f.setup[scope]
	if !ok {
		return nil
	}
	s := &state{epoch: 1, targets: make(map[string]targetState, len(targets))}
	for name, v := range targets {
		s.targets[name] = targetState{Rev: 1, Value: v}
	}
	return s
}

// step decides whether a call could return out from s, and the state after
// it. A call of unknown outcome always could: it took effect here.
func (f *fence) step(s *state, in Input, out Output) (bool, *state) {
	if s == nil {
		if s = f.initial(in.Scope); s == nil {
			return false, nil
		}
	}
	want, next := s.apply(in, out)
	if out.Unknown {
		return true, next
	}
	return matches(in.Kind, s, want, out), next
}

// apply runs the call on s and returns what the fence answers and the
// state after it. got is the call's actual output, needed only for what the
// receiver chooses and the model cannot: the id an activation mints.
func (s *state) apply(in Input, got Output) (Output, *state) {
	switch in.Kind {
	case Submit:
		return s.submit(in)
	case Hold:
		next := s.clone()
		next.epoch, next.open, next.active = s.epoch+1, false, grantBinding{}
		return Output{PreviousEpoch: s.epoch, Epoch: s.epoch + 1}, next
	case Activate:
		return s.activate(in, got)
	case ReadStatus:
		mode := kvfence.ModeHeld
		if s.open {
			mode = kvfence.ModeOpen
		}
		return Output{Epoch: s.epoch, Mode: mode, Grant: s.active.ID}, s
	case ReadTarget:
		t, ok := s.targets[in.Target]
		if !ok {
			return Output{Err: ErrUnknownTarget}, s
		}
		return Output{Revision: t.Rev, Value: t.Value}, s
	}
	return Output{Err: "unknown call"}, s
}

// submit runs Submit's checks 2-12 (docs/design.md §4) in their order. The
// envelope always names an existing scope (check 1) and decodes (check 0);
// check 5 passes whenever 2-4 do, because the active grant was minted for
// this scope at this epoch; check 9 is not modelled (see the package
// documentation).
func (s *state) submit(in Input) (Output, *state) {
	deny := func(r kvfence.Reason) (Output, *state) {
		return Output{Outcome: kvfence.Denied, Reason: r}, s
	}
	switch {
	case !s.open:
		return deny(kvfence.ReasonReceiverHeld)
	case in.Epoch != s.epoch:
		return deny(kvfence.ReasonStaleEpoch)
	case in.Grant != s.active.ID:
		return deny(kvfence.ReasonInactiveGrant)
	case in.Caller != in.Executor || in.Executor != s.active.Executor:
		return deny(kvfence.ReasonExecutorMismatch)
	case in.Claim != s.active.Claim:
		return deny(kvfence.ReasonClaimMismatch)
	case in.Digest != s.active.Digest || in.Action != s.active.Action:
		return deny(kvfence.ReasonRequestMismatch)
	}
	if rc, ok := s.receipts[in.Action]; ok {
		if rc.Digest != in.Digest {
			return deny(kvfence.ReasonActionReuseConflict)
		}
		return Output{Outcome: kvfence.AlreadyApplied, Revision: rc.RevAfter}, s
	}
	t, ok := s.targets[in.Target]
	if !ok {
		return deny(kvfence.ReasonUnknownTarget)
	}
	if in.ExpectRevision != 0 && in.ExpectRevision != t.Rev {
		return deny(kvfence.ReasonPreconditionFailed)
	}
	next := s.clone()
	next.targets = maps.Clone(s.targets)
	next.targets[in.Target] = targetState{Rev: t.Rev + 1, Value: in.Value}
	next.receipts = maps.Clone(s.receipts)
	if next.receipts == nil {
		next.receipts = map[string]receipt{}
	}
	next.receipts[in.Action] = receipt{Digest: in.Digest, RevAfter: t.Rev + 1}
	return Output{Outcome: kvfence.Applied, Revision: t.Rev + 1}, next
}

// activate opens a held scope with a new grant, unless the call is refused.
func (s *state) activate(in Input, got Output) (Output, *state) {
	switch {
	case s.open:
		return Output{Err: ErrNotHeld}, s
	case in.Epoch != 0 && in.Epoch != s.epoch:
		return Output{Err: ErrEpochMismatch}, s
	}
	if _, ok := s.targets[in.Target]; !ok {
		return Output{Err: ErrUnknownTarget}, s
	}
	id := got.Grant
	if got.Unknown || id == "" {
		id = unknownGrant
	}
	next := s.clone()
	next.open = true
	next.active = grantBinding{ID: id, Executor: in.Executor, Claim: in.Claim, Action: in.Action, Digest: in.Digest}
	return Output{Epoch: s.epoch, Grant: id}, next
}

// matches reports whether a call's actual output is the one the model
// wants from state s.
func matches(k Kind, s *state, want, got Output) bool {
	if k == ReadStatus && s.active.ID == unknownGrant {
		// An activation of unknown outcome opened the scope: its id is
		// whatever the receiver minted, but it is an id.
		if got.Grant == "" || got.Grant == unknownGrant {
			return false
		}
		got.Grant = unknownGrant
	}
	if k == Activate && got.Grant == unknownGrant {
		return false
	}
	return want == got
}

func (s *state) clone() *state {
	c := *s
	return &c
}

func (s *state) equal(o *state) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.epoch == o.epoch && s.open == o.open && s.active == o.active &&
		maps.Equal(s.targets, o.targets) && maps.Equal(s.receipts, o.receipts)
}

// hash agrees with equal: it covers everything but the receipts' content,
// and sums per-target hashes so that map order does not matter.
func (s *state) hash() uint64 {
	if s == nil {
		return 0
	}
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) {
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	put(s.epoch)
	if s.open {
		put(1)
	}
	h.Write([]byte(s.active.ID))
	put(uint64(len(s.receipts)))
	sum := h.Sum64()
	for name, t := range s.targets {
		th := fnv.New64a()
		th.Write([]byte(name))
		th.Write([]byte{0})
		th.Write([]byte(t.Value))
		sum += th.Sum64() ^ t.Rev
	}
	return sum
}
