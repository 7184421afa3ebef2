package fencecheck

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// describeOperation renders a call and its output for porcupine's report:
// grant ids and digests are cut to their first eight characters, which is
// enough to tell the grants of one run apart.
func describeOperation(in Input, out Output) string {
	return describeInput(in) + " -> " + describeOutput(in.Kind, out)
}

func describeInput(in Input) string {
	switch in.Kind {
	case Submit:
		expect := ""
		if in.ExpectRevision != 0 {
			expect = fmt.Sprintf(" if rev %d", in.ExpectRevision)
		}
		as := in.Caller
		if in.Caller != in.Executor {
			as = in.Caller + " claiming " + in.Executor
		}
		return fmt.Sprintf("submit(%s: epoch %d, grant %s, %s: %s := %q%s)",
			as, in.Epoch, short(in.Grant), in.Action, in.Target, in.Value, expect)
	case Hold:
		return fmt.Sprintf("hold(%s)", in.Scope)
	case Activate:
		epoch := ""
		if in.Epoch != 0 {
			epoch = fmt.Sprintf(" at epoch %d", in.Epoch)
		}
		return fmt.Sprintf("activate(%s for %s, %s: %s := %q%s)", in.Scope, in.Executor, in.Action, in.Target, in.Value, epoch)
	case ReadStatus:
		return fmt.Sprintf("status(%s)", in.Scope)
	case ReadTarget:
		return fmt.Sprintf("target(%s)", in.Target)
	}
	return fmt.Sprintf("call(%d)", in.Kind)
}

func describeOutput(k Kind, out Output) string {
	switch {
	case out.Unknown:
		return "outcome unknown"
	case out.Err != "":
		return "refused: " + out.Err
	}
	switch k {
	case Submit:
		if out.Reason != "" {
			return fmt.Sprintf("%s: %s", out.Outcome, out.Reason)
		}
		return fmt.Sprintf("%s at rev %d", out.Outcome, out.Revision)
	case Hold:
		return fmt.Sprintf("epoch %d -> %d, held", out.PreviousEpoch, out.Epoch)
	case Activate:
		return fmt.Sprintf("grant %s at epoch %d", short(out.Grant), out.Epoch)
	case ReadStatus:
		return fmt.Sprintf("epoch %d %s grant %s", out.Epoch, out.Mode, short(out.Grant))
	case ReadTarget:
		return fmt.Sprintf("rev %d %q", out.Revision, out.Value)
	}
	return fmt.Sprintf("%+v", out)
}

// describeState renders one scope's state.
func describeState(s *state) string {
	if s == nil {
		return "(not yet touched)"
	}
	var b strings.Builder
	mode := "held"
	if s.open {
		mode = "open, grant " + short(s.active.ID) + " for " + s.active.Executor + " " + s.active.Action
	}
	fmt.Fprintf(&b, "epoch %d %s;", s.epoch, mode)
	for _, name := range slices.Sorted(maps.Keys(s.targets)) {
		t := s.targets[name]
		fmt.Fprintf(&b, " %s@%d=%q", name, t.Rev, t.Value)
	}
	fmt.Fprintf(&b, "; %d receipts", len(s.receipts))
	return b.String()
}

// short cuts an id to eight characters.
func short(id string) string {
	if id == "" {
		return "none"
	}
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
