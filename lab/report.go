package lab

import (
	"fmt"
	"os"
	"strings"
)

// writeReport writes report.md: what each demonstration supports and what
// it does not, in plain words, with the numbers from this run.
func writeReport(path string, sum *Summary, paused, defective *pausedReport) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# kvfence lab report")
	p("")
	p("Every step below ran in separate processes against real bbolt files in this directory.")
	p("These are local protocol results on one machine; production authorization was not assessed.")
	p("")
	p("## 1. Paused worker (%s)", paused.Demonstration)
	p("")
	p("Worker A held an approved envelope and paused in its own process. The administrator committed a hold")
	p("(requested %s, committed %s) and activated worker B (%s).", ts(paused.HoldRequestedAt), ts(paused.HoldCommittedAt), ts(paused.ActivatedAt))
	p("When A was released, the target still had its original value and revision. A's request was **%s**.", decision(paused.Stale))
	p("Mutations before B ran: %d. B's request was then **%s**; the target is now revision %d with `%s`.",
		paused.MutationsBeforeCurrentWorker, decision(paused.Current), paused.FinalTarget.Revision, paused.FinalTarget.Value)
	p("")
	p("Supports: after a committed hold, a superseded grant produced no mutation, even before the replacement's first write.")
	p("Does not show: that identities are authenticated (they are trusted strings here), or anything about effects outside this receiver's transaction.")
	p("")
	p("## 2. Defective receiver (%s)", defective.Demonstration)
	p("")
	p("The same schedule against a receiver that skips checks 2-4 (mode, epoch, active grant): A's old request was **%s**,", decision(defective.Stale))
	p("and the target reached revision %d before B ran. B's request was **%s**.", defective.TargetAtStaleDecision.Revision, decision(defective.Current))
	p("")
	p("Supports: the paused-worker result depends on those checks; the lab and the test suite go red without them.")
	p("")
	p("## Summary")
	p("")
	p("| claim | value |")
	p("|---|---|")
	p("| stale_worker_accepted | %v |", sum.StaleWorkerAccepted)
	p("| mutations_before_current_worker | %d |", sum.MutationsBeforeCurrentWorker)
	p("| current_worker_accepted | %v |", sum.CurrentWorkerAccepted)
	p("| defective_receiver_accepted_stale_worker | %v |", sum.DefectiveReceiverAcceptedStaleWorker)
	p("| production_authorization | %s |", sum.ProductionAuthorization)
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

func ts(t interface{ Format(string) string }) string { return t.Format("15:04:05.000000Z07:00") }
