package fencecheck

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/kvfence/kvfence/kvfence"
)

// The handcrafted histories run in one scope, s, with one target, s/t.
var handSetup = Setup{"s": {"s/t": "v0"}, "u": {"u/t": "v0"}}

const (
	g1 = "11111111111111111111111111111111"
	g2 = "22222222222222222222222222222222"
)

// Calls of the handcrafted histories.
var (
	activate1 = Input{Kind: Activate, Scope: "s", Executor: "w1", Claim: "c1", Action: "a1", Target: "s/t", Value: "v1", Digest: "d1"}
	activate2 = Input{Kind: Activate, Scope: "s", Executor: "w2", Claim: "c2", Action: "a2", Target: "s/t", Value: "v2", Digest: "d2"}
	// submit1 is w1's envelope under g1 at epoch 1, submit2 w2's under g2
	// at epoch 2.
	submit1 = Input{Kind: Submit, Scope: "s", Caller: "w1", Epoch: 1, Grant: g1, Executor: "w1", Claim: "c1", Action: "a1", Target: "s/t", Value: "v1", Digest: "d1"}
	submit2 = Input{Kind: Submit, Scope: "s", Caller: "w2", Epoch: 2, Grant: g2, Executor: "w2", Claim: "c2", Action: "a2", Target: "s/t", Value: "v2", Digest: "d2"}
	hold    = Input{Kind: Hold, Scope: "s"}
	status  = Input{Kind: ReadStatus, Scope: "s"}
	read    = Input{Kind: ReadTarget, Scope: "s", Target: "s/t"}

	activated1 = Output{Grant: g1, Epoch: 1}
	activated2 = Output{Grant: g2, Epoch: 2}
	held2      = Output{PreviousEpoch: 1, Epoch: 2}
	unknown    = Output{Unknown: true}
)

func applied(rev uint64) Output { return Output{Outcome: kvfence.Applied, Revision: rev} }
func denied(r kvfence.Reason) Output {
	return Output{Outcome: kvfence.Denied, Reason: r}
}
func value(rev uint64, v string) Output { return Output{Revision: rev, Value: v} }
func scopeAt(epoch uint64, mode kvfence.Mode, grant string) Output {
	return Output{Epoch: epoch, Mode: mode, Grant: grant}
}

// with returns in with one change.
func with(in Input, change func(*Input)) Input {
	change(&in)
	return in
}

// call is one call of a handcrafted history: client, start, return (0 for
// a call of unknown outcome), input and output.
type call struct {
	client     int
	start, end int64
	in         Input
	out        Output
}

func history(calls ...call) []porcupine.Operation {
	ops := make([]porcupine.Operation, len(calls))
	for i, c := range calls {
		end := c.end
		if c.out.Unknown {
			end = math.MaxInt64
		}
		ops[i] = porcupine.Operation{ClientId: c.client, Input: c.in, Call: c.start, Output: c.out, Return: end}
	}
	return ops
}

// Ensure that the model accepts the legal handcrafted histories and rejects
// the illegal ones.
func TestModel_Handcrafted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		legal bool
		calls []call
	}{
		{"applied while open, held after, denied after", true, []call{
			{0, 0, 1, activate1, activated1},
			{1, 2, 3, submit1, applied(2)},
			{2, 4, 5, read, value(2, "v1")},
			{0, 6, 7, hold, held2},
			{1, 8, 9, submit1, denied(kvfence.ReasonReceiverHeld)},
			{2, 10, 11, status, scopeAt(2, kvfence.ModeHeld, "")},
		}},
		{"applied concurrently with a hold: ordered before it", true, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 6, hold, held2},
			{1, 3, 8, submit1, applied(2)},
			{2, 9, 10, read, value(2, "v1")},
		}},
		{"denied concurrently with a hold: ordered after it", true, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 6, hold, held2},
			{1, 3, 8, submit1, denied(kvfence.ReasonReceiverHeld)},
			{2, 9, 10, read, value(1, "v0")},
		}},
		{"a retry answered from the receipt", true, []call{
			{0, 0, 1, activate1, activated1},
			{1, 2, 3, submit1, applied(2)},
			{1, 4, 5, submit1, Output{Outcome: kvfence.AlreadyApplied, Revision: 2}},
		}},
		{"a superseded grant copying the new epoch", true, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 3, hold, held2},
			{0, 4, 5, with(activate2, func(in *Input) { in.Epoch = 2 }), activated2},
			{1, 6, 7, with(submit1, func(in *Input) { in.Epoch = 2 }), denied(kvfence.ReasonInactiveGrant)},
			{1, 8, 9, submit1, denied(kvfence.ReasonStaleEpoch)},
			{2, 10, 11, submit2, applied(2)},
		}},
		{"the wrong caller, claim and request", true, []call{
			{0, 0, 1, activate1, activated1},
			{1, 2, 3, with(submit1, func(in *Input) { in.Caller = "w2" }), denied(kvfence.ReasonExecutorMismatch)},
			{1, 4, 5, with(submit1, func(in *Input) { in.Claim = "c9" }), denied(kvfence.ReasonClaimMismatch)},
			{1, 6, 7, with(submit1, func(in *Input) { in.Digest = "d9" }), denied(kvfence.ReasonRequestMismatch)},
			{1, 8, 9, with(submit1, func(in *Input) { in.ExpectRevision = 5 }), denied(kvfence.ReasonPreconditionFailed)},
			{1, 10, 11, with(submit1, func(in *Input) { in.ExpectRevision = 1 }), applied(2)},
		}},
		{"activation refused while open and at a passed epoch", true, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 3, activate2, Output{Err: ErrNotHeld}},
			{0, 4, 5, hold, held2},
			{0, 6, 7, with(activate2, func(in *Input) { in.Epoch = 1 }), Output{Err: ErrEpochMismatch}},
		}},
		{"a submit of unknown outcome that took effect", true, []call{
			{0, 0, 1, activate1, activated1},
			{1, 2, 0, submit1, unknown},
			{2, 5, 6, read, value(2, "v1")},
		}},
		{"a submit of unknown outcome that never took effect", true, []call{
			{0, 0, 1, activate1, activated1},
			{1, 2, 0, submit1, unknown},
			{2, 5, 6, read, value(1, "v0")},
			{0, 7, 8, hold, held2},
			{2, 9, 10, read, value(1, "v0")},
		}},
		{"a submit of unknown outcome that took effect later than a read", true, []call{
			{0, 0, 1, activate1, activated1},
			{1, 2, 0, submit1, unknown},
			{2, 5, 6, read, value(1, "v0")},
			{2, 7, 8, read, value(2, "v1")},
		}},
		{"an activation of unknown outcome, seen open with an id nobody learned", true, []call{
			{0, 0, 0, activate1, unknown},
			{2, 2, 3, status, scopeAt(1, kvfence.ModeHeld, "")},
			{2, 4, 5, status, scopeAt(1, kvfence.ModeOpen, "0123456789abcdef0123456789abcdef")},
			{1, 6, 7, submit1, denied(kvfence.ReasonInactiveGrant)},
		}},
		{"a hold of unknown outcome", true, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 0, hold, unknown},
			{1, 4, 5, submit1, applied(2)},
			{2, 6, 7, status, scopeAt(2, kvfence.ModeHeld, "")},
			{1, 8, 9, submit1, denied(kvfence.ReasonReceiverHeld)},
		}},
		{"another scope's calls do not constrain this one", true, []call{
			{0, 0, 1, activate1, activated1},
			{3, 0, 1, Input{Kind: Hold, Scope: "u"}, held2},
			{1, 2, 3, submit1, applied(2)},
		}},

		{"applied after the hold returned", false, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 3, hold, held2},
			{1, 4, 5, submit1, applied(2)},
		}},
		{"applied concurrently with a hold, after a read that followed the hold", false, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 6, hold, held2},
			{1, 3, 12, submit1, applied(2)},
			{2, 7, 8, read, value(1, "v0")},
		}},
		{"held denied with the wrong reason", false, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 3, hold, held2},
			{1, 4, 5, submit1, denied(kvfence.ReasonStaleEpoch)},
		}},
		{"a superseded grant copying the new epoch applied", false, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 3, hold, held2},
			{0, 4, 5, activate2, activated2},
			{1, 6, 7, with(submit1, func(in *Input) { in.Epoch = 2 }), applied(2)},
		}},
		{"already applied before anything applied", false, []call{
			{0, 0, 1, activate1, activated1},
			{1, 2, 3, submit1, Output{Outcome: kvfence.AlreadyApplied, Revision: 2}},
		}},
		{"the same action applied twice", false, []call{
			{0, 0, 1, activate1, activated1},
			{1, 2, 3, submit1, applied(2)},
			{1, 4, 5, submit1, applied(3)},
		}},
		{"a value nobody wrote", false, []call{
			{0, 0, 1, activate1, activated1},
			{1, 2, 3, submit1, applied(2)},
			{2, 4, 5, read, value(2, "v9")},
		}},
		{"an epoch advanced without a hold", false, []call{
			{2, 0, 1, status, scopeAt(2, kvfence.ModeHeld, "")},
		}},
		{"activated while open", false, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 3, activate2, Output{Grant: g2, Epoch: 1}},
		}},
		{"a status naming another grant", false, []call{
			{0, 0, 1, activate1, activated1},
			{2, 2, 3, status, scopeAt(1, kvfence.ModeOpen, g2)},
		}},
		{"a submit of unknown outcome applied after the hold returned", false, []call{
			{0, 0, 1, activate1, activated1},
			{0, 2, 3, hold, held2},
			{1, 4, 0, submit1, unknown},
			{2, 6, 7, read, value(2, "v1")},
		}},
		{"an activation of unknown outcome read as open without an id", false, []call{
			{0, 0, 0, activate1, unknown},
			{2, 2, 3, status, scopeAt(1, kvfence.ModeOpen, "")},
		}},
		{"a write seen, then unseen", false, []call{
			{0, 0, 1, activate1, activated1},
			{1, 2, 0, submit1, unknown},
			{2, 5, 6, read, value(2, "v1")},
			{2, 7, 8, read, value(1, "v0")},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			rep, err := Check(Model(handSetup), history(tc.calls...), CheckOptions{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			want := porcupine.Illegal
			if tc.legal {
				want = porcupine.Ok
			}
			if rep.Result != want {
				t.Fatalf("check = %s, want %s", rep, want)
			}
			if tc.legal {
				if rep.Visualization != "" {
					t.Fatalf("a linearizable history got a visualization: %s", rep)
				}
				return
			}
			html, err := os.ReadFile(rep.Visualization)
			if err != nil {
				t.Fatalf("no visualization for an illegal history: %v", err)
			}
			// The report describes the calls in the model's words.
			if !strings.Contains(string(html), "submit(") && !strings.Contains(string(html), "status(") &&
				!strings.Contains(string(html), "activate(") {
				t.Fatalf("visualization %s does not describe the calls", rep.Visualization)
			}
		})
	}
}

// Ensure that a history is split into one partition per scope and that the
// counts of the report are those of the history.
func TestCheck_Report(t *testing.T) {
	h := history(
		call{0, 0, 1, activate1, activated1},
		call{3, 0, 1, Input{Kind: Hold, Scope: "u"}, held2},
		call{1, 2, 0, submit1, unknown},
	)
	rep, err := Check(Model(handSetup), h, CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Result != porcupine.Ok || rep.Ops != 3 || rep.Unknown != 1 || rep.Partitions != 2 {
		t.Fatalf("report = %+v, want Ok, 3 calls, 1 unknown, 2 partitions", rep)
	}
}

// Ensure that the descriptions name what an operator needs to read a
// failure: the call, its grant and its outcome, and the scope's state.
func TestDescribe(t *testing.T) {
	got := describeOperation(with(submit1, func(in *Input) { in.ExpectRevision = 3 }), denied(kvfence.ReasonReceiverHeld))
	want := `submit(w1: epoch 1, grant 11111111, a1: s/t := "v1" if rev 3) -> denied: receiver_held`
	if got != want {
		t.Errorf("describeOperation = %q, want %q", got, want)
	}
	s := (&fence{setup: handSetup}).initial("s")
	_, s = s.activate(activate1, activated1)
	_, s = s.submit(submit1)
	if got, want := describeState(s), `epoch 1 open, grant 11111111 for w1 a1; s/t@2="v1"; 1 receipts`; got != want {
		t.Errorf("describeState = %q, want %q", got, want)
	}
}
