package lab

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// writeReport writes report.md: what each demonstration supports and what
// it does not, in plain words, with the numbers from this run.
func writeReport(path string, sum *Summary, paused, defective *pausedReport, ledgerCopy, ledgerAnchored *ledgerReport,
	unanchored *restoredReport, witnessed *witnessedReport, anchored *restoredReport, sv *servedReport, ct *containedReport, kube *kubeReport) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# kvfence lab report")
	p("")
	p("Every step below ran in separate processes against real bbolt files in this directory.")
	p("These are local protocol results on one machine; production authorization was not assessed.")
	p("")
	writeVerdict(&b, sum)
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
	p("The same schedule against a receiver that skips checks 2-4 (mode, epoch, active grant), which exists only in the lab build")
	p("(`-tags kvfencelab`): A's old request was **%s**,", decision(defective.Stale))
	p("and the target reached revision %d before B ran. B's request was **%s**.", defective.TargetAtStaleDecision.Revision, decision(defective.Current))
	p("")
	p("verify-chain on that receiver's database reports `%s`, from the receiver's own chain:", defective.VerifyChain)
	p("")
	p("> %s", defective.VerifyDetail)
	p("")
	p("Supports: the paused-worker result depends on those checks; the lab and the test suite go red without them,")
	p("and verify-chain finds the mutation applied under the superseded grant in the receiver's own evidence.")
	p("")
	p("## 3. Restored ledger (%s, %s)", ledgerCopy.Demonstration, ledgerAnchored.Demonstration)
	p("")
	p("The original lab is the experiment kvfence grew out of: an execution ledger alone, with no fence at the receiver")
	p("and no anchor, in which a ledger restored from a backup handed a second worker an action already claimed; 3a repeats")
	p("that counterexample on purpose, and 3b shows the anchor catching it.")
	p("")
	p("Worker A claimed the approved action in the execution ledger (claim %s) and stalled; the administrator held", ledgerCopy.FirstClaim.Ledger.Claim)
	p("the receiver (committed %s). The ledger file was then restored from a copy taken before A's claim.", ts(ledgerCopy.HoldCommittedAt))
	p("")
	p("Unanchored (the original lab's counterexample, opened through a path that only the lab build has): worker C's claim of the same action was **%s**", ledgerOutcome(ledgerCopy.RestoredClaim))
	p("(generation %d again: the restored ledger forgot A). C then submitted its work with the only grant it knew, and the held receiver", ledgerGeneration(ledgerCopy.RestoredClaim))
	p("answered **%s**; the target stayed at revision %d.", decision(ledgerCopy.RestoredClaim), ledgerCopy.TargetAfter.Revision)
	p("")
	p("Anchored: the same restored file, opened normally, was compared with the ledger's signed anchor and refused: **%s**.", ledgerOutcome(ledgerAnchored.RestoredClaim))
	p("")
	p("> %s", ledgerDetail(ledgerAnchored.RestoredClaim))
	p("")
	p("Supports: a restored ledger can hand out a second claim, and a claim is not authority: the held receiver refused the work anyway.")
	p("With its anchor, the ledger detects the restore itself.")
	p("Does not show: that the ledger prevents duplicate work on its own (only the receiver's fence decides what commits),")
	p("nor what happened to worker A's stalled claim; it stays outstanding until an operator reconciles it.")
	p("")
	p("## 4. Restored receiver database, no anchor check (%s)", unanchored.Demonstration)
	p("")
	p("The receiver's own database from before the hold was restored: a copy of demonstration 1's database (`%s`),", preHoldCopy)
	p("taken after worker A's activation and before the hold, with demonstration 1's current anchor. Opened without comparing it to its anchor")
	p("(a path that only the lab build has), it restores the exact state under which worker A's grant was valid: A's old request was **%s**", decision(unanchored.Stale))
	p("and the target went from revision %d to %d. This counterexample is kept on purpose: the fence alone cannot tell a restored copy from the present.", unanchored.TargetBefore.Revision, unanchored.TargetAfter.Revision)
	p("")
	writeWitnessed(p, witnessed)
	p("## 5. Restored receiver database, anchored (%s)", anchored.Demonstration)
	p("")
	p("Demonstration 5 uses another copy of the same pre-hold database of demonstration 1, with demonstration 1's current anchor.")
	p("Opened normally, it is compared with the signed anchor kept apart from it: A's request was **%s**,", decision(anchored.Stale))
	p("the target stayed at revision %d, and verify-chain reports `%s`:", anchored.TargetAfter.Revision, anchored.VerifyChain)
	p("")
	p("> %s", anchored.VerifyDetail)
	p("")
	p("Supports: restoring the receiver's database is detected as long as the anchor is administered separately and not restored with it.")
	p("Does not show: protection against someone who can replace both the database and the anchor (a stale but valid anchor; see verify-chain --max-age).")
	p("")
	p("## 6. Served receiver (%s)", sv.Demonstration)
	p("")
	p("The receiver ran as `kvfence serve` in its own process: TLS 1.3 with client certificates on %s, and the admin socket", sv.Listen)
	p("`%s` for administration by uid. The certificates (a test CA, the server's, one per SPIFFE ID) were made", sv.AdminSocket)
	p("with the code `kvfence cert` uses. Each worker was a process of its own holding only its own certificate; the receiver took")
	p("each caller's identity from that certificate, never from the request.")
	p("")
	p("The operator created the scope and target and activated worker A over the admin socket (recorded actor: %s).", strings.Join(sv.AdminActors, ", "))
	p("Worker A's certificate calling `POST /v1/hold` got **%s** (HTTP %d); the scope's epoch stayed %d.", sv.WorkerHold.Outcome, sv.WorkerHold.HTTPStatus, sv.EpochAfterWorkerHold)
	p("The operator then held the scope over the socket while the service served (requested %s, committed %s);", ts(sv.HoldRequestedAt), ts(sv.HoldCommittedAt))
	p("A's own envelope was **%s**. After B's activation (%s), A presenting B's current envelope", decision(sv.StaleWhileHeld), ts(sv.ActivatedAt))
	p("was **%s** (the receiver recorded the caller as `%s`), and A's own envelope again", decision(sv.WrongIdentity), sv.WrongIdentityCaller)
	p("**%s**, before B's first write. Mutations before B ran: %d. B's envelope, with B's certificate, was **%s**;", decision(sv.StaleAfterSuccessor), sv.MutationsBeforeCurrentWorker, decision(sv.Current))
	p("the target is now revision %d. SIGTERM stopped the service (exit %d), and verify-chain reports `%s`.", sv.FinalTarget.Revision, sv.ServeExitCode, sv.VerifyChain)
	p("")
	p("Supports: over the network, identity comes from the channel: a certificate cannot use another worker's envelope or the")
	p("administrative endpoints, and an operator can hold a running receiver without stopping it, which fences the stale worker at once.")
	p("Does not show: anything about a real PKI (the CA here is a one-hour test CA), certificate revocation, or other machines.")
	p("")
	writeContained(p, ct)
	writeKube(p, kube, sum.NotRun[kubeDemonstration])
	p("## Summary")
	p("")
	writeVerdict(&b, sum)
	p("")
	p("Each key of summary.json with the value this run observed and the value it must have. A `true` is not always a success:")
	p("a counterexample is a failure produced on purpose with a check removed or bypassed, and it is as expected when it happens.")
	p("")
	p("| key | observed | expected | as expected | kind | meaning |")
	p("|---|---|---|---|---|---|")
	for _, e := range expectations {
		c := sum.Checks[e.key]
		ok := "yes"
		switch {
		case c.NotRun != "":
			ok = "not run"
		case !c.AsExpected:
			ok = "**NO**"
		}
		p("| %s | %v | %v | %s | %s | %s |", e.key, c.Observed, c.Expected, ok, c.Kind, c.Meaning)
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// writeContained writes demonstration 7's section of report.md.
func writeContained(p func(string, ...any), ct *containedReport) {
	p("## 7. Contained workflow (%s)", ct.Demonstration)
	p("")
	p("One approved action reaches two receivers, each a `kvfence serve` process with its own database, anchor and key,")
	p("the same target in a scope of its own. Both were registered in the ledger by their admin sockets with their public")
	p("keys pinned, and the approval names both boundaries. Worker A claimed (%s), was activated at both receivers and paused", ct.ClaimA)
	p("holding its envelopes; `ledger takeover` gave the action to worker B (%s). Every operator step was a kvfence command", ct.ClaimB)
	p("run as a process; the commands, their exit codes and output are in report.json.")
	p("")
	p("Receiver 2 was stopped (SIGTERM, exit %d). `kvfence contain` then recorded **%s** (exit %d):", ct.Receiver2StopExitCode,
		ct.FirstContain.Record.State, ct.FirstContain.ExitCode)
	for _, b := range ct.FirstContain.Record.Boundaries {
		p("- %s `%s`: %s %s (epoch %d -> %d)", b.Receiver, b.Scope, b.Result, b.ErrorCode, b.PreviousEpoch, b.InstalledEpoch)
	}
	p("")
	p("`kvfence contain activate` for B was refused (exit %d); receiver 1 stayed %s at epoch %d with no active grant.",
		ct.RefusedActivation.ExitCode, ct.Receiver1AfterRefusal.Mode, ct.Receiver1AfterRefusal.Epoch)
	p("A's envelope at receiver 1 was **%s**. Receiver 2 restarted on the same files; `kvfence contain` again recorded",
		decision(ct.StaleWhilePartial))
	p("**%s** (exit %d), and receiver 1's epoch went from %d to %d between the two runs: the rerun retried only receiver 2.",
		ct.SecondContain.Record.State, ct.SecondContain.ExitCode, ct.Receiver1EpochAfterFirstContain, ct.Receiver1EpochAfterSecondContain)
	for i, w := range ct.StaleAfterFull {
		if i < len(ct.Receivers) {
			p("- A's envelope at %s: **%s**", ct.Receivers[i].Name, decision(w))
		}
	}
	p("")
	p("A's claim was reconciled, and `kvfence contain activate` for B exited %d; `kvfence contain verify` at the end exited %d.",
		ct.Activation.ExitCode, ct.ContainVerify.ExitCode)
	for i, w := range ct.Successor {
		if i < len(ct.Receivers) {
			p("- B's envelope at %s: **%s**; the target is now revision %d", ct.Receivers[i].Name, decision(w), ct.Receivers[i].FinalTarget.Revision)
		}
	}
	p("")
	p("The record keeps different times apart, per boundary:")
	p("")
	p("| boundary | hold requested (coordinator's clock) | acknowledged (receiver's commit) | latest stale rejection (receiver) |")
	p("|---|---|---|---|")
	for _, r := range ct.Receivers {
		p("| %s | %s | %s | %s |", r.Name, ct.HoldRequestedAt[r.Name], ct.AcknowledgedAt[r.Name], ct.LastStaleRejectionAt[r.Name])
	}
	p("")
	p("Outstanding effects under A's claim, as the record lists them: %d (A applied nothing before it paused).", len(ct.OutstandingEffects))
	p("")
	p("Supports: partial containment stays visible and blocks the successor everywhere; a rerun retries only what was not")
	p("acknowledged, without a new generation; the successor is activated only after every boundary acknowledged and the")
	p("superseded claim was reconciled. Does not show: receivers on other machines, or a boundary that can never acknowledge")
	p("(`kvfence contain alternate` records another path for that).")
	p("")
}

// writeKube writes demonstration 8's section of report.md, or why it did
// not run.
func writeKube(p func(string, ...any), k *kubeReport, notRun string) {
	p("## 8. Kubernetes target (%s)", kubeDemonstration)
	p("")
	if k == nil {
		p("**Not run**: %s. Its four checks are marked not run in the table below and count neither way in the verdict.", notRun)
		p("")
		return
	}
	p("The backup policy is a ConfigMap (`%s`, retention_days %s) on a real kube-apiserver (%s) with the shipped admission", kubeObjectRef,
		k.ObjectBefore.Data["retention_days"], k.APIServer)
	p("policy and RBAC applied; kvfence serve changes it with the receiver's own service account, through a network proxy the lab controls.")
	p("Worker A paused with its envelope and its own Kubernetes token; the operator held the scope and activated worker B.")
	p("A's envelope was **%s**; the ConfigMap stayed at resourceVersion %s (before: %s), retention_days %s.", decision(k.Stale),
		k.ObjectBeforeCurrentWorker.ResourceVersion, k.ObjectBefore.ResourceVersion, k.ObjectBeforeCurrentWorker.Data["retention_days"])
	p("A's own PATCH of the object was %s with read-only RBAC (%s), and %s once RBAC was widened by mistake (%s).",
		k.DirectReadOnly.Outcome, k.DirectReadOnly.Detail, k.DirectWithEdit.Outcome, k.DirectWithEdit.Detail)
	p("B's envelope was **%s** at resourceVersion %s; the object now has retention_days %s and kvfence.dev/epoch %s.", decision(k.Current),
		k.Current.Version, k.ObjectAfterCurrentWorker.Data["retention_days"], k.ObjectAfterCurrentWorker.Annotations["kvfence.dev/epoch"])
	p("")
	p("B's next change (45 -> 60) was decided on the object as read; the proxy held the receiver's PUT (held: %v) while data.owner", k.PutHeld)
	p("was set out of band with the receiver's own credentials (%s). Released, the write was **%s** (dispatch `%s`); the object", kubeResult(k.OutOfBand),
		decision(k.Concurrent), k.Concurrent.Dispatch)
	p("ends with retention_days %s and owner %q. SIGTERM stopped serve (exit %d); verify-chain reports `%s`.",
		k.FinalObject.Data["retention_days"], k.FinalObject.Data["owner"], k.ServeExitCode, k.VerifyChain)
	p("")
	p("Supports: the fence holds in front of a real object: a superseded grant changes nothing after the hold, a worker's own")
	p("credentials cannot go around the receiver while the policy stands, and the receiver's conditional write never overwrites a change it did not read.")
	p("Does not show: a write in flight when the hold commits (the tests race those on a real server), other kinds than ConfigMaps, or a")
	p("cluster whose administrators remove the policy: the policy closes the path only while it and its binding stand.")
	p("")
}

// writeVerdict writes the overall verdict line of report.md.
func writeVerdict(w io.Writer, sum *Summary) {
	if sum.Verdict == VerdictAsExpected {
		fmt.Fprintf(w, "**Verdict: as expected** (%s). The counterexamples are kept on purpose; see the summary table.\n", sum.VerdictDetail)
		return
	}
	fmt.Fprintf(w, "**Verdict: NOT as expected** (%s). This run does not support the claims below as stated; "+
		"read the demonstrations the keys name.\n", sum.VerdictDetail)
}

func ts(t interface{ Format(string) string }) string { return t.Format("15:04:05.000000Z07:00") }

func ledgerOutcome(w workerResult) string {
	if w.Ledger == nil {
		return "not attempted"
	}
	return w.Ledger.Outcome
}

func ledgerGeneration(w workerResult) uint64 {
	if w.Ledger == nil {
		return 0
	}
	return w.Ledger.Generation
}

func ledgerDetail(w workerResult) string {
	if w.Ledger == nil {
		return ""
	}
	return w.Ledger.Detail
}

// writeWitnessed writes demonstration 4b's section of report.md.
func writeWitnessed(p func(string, ...any), w *witnessedReport) {
	p("## 4b. Restored receiver database and anchor, with witnesses (%s)", w.Demonstration)
	p("")
	p("A receiver of its own, with %d witnesses, each a `kvfence witness serve` process trusting the receiver's key, and a", len(w.Witnesses))
	p("quorum of %d: every write was a kvfence command with `--witness`, `--witness-pub`, `--witness-quorum %d` and `--witness-ca`,", w.Quorum, w.Quorum)
	p("acknowledged only once %d witnesses cosigned its anchored checkpoint. After worker A's activation the operator copied the", w.Quorum)
	p("database and its anchor together (the witnesses' latest cosigned sizes: %s); the hold was cosigned (%s), and", sizesLine(w.SizesAtBackup), sizesLine(w.SizesAfterHold))
	p("worker B's current envelope was **%s**. The operator then restored both files from the backup: the target was back at revision %d.",
		w.Current.Outcome, w.TargetRestored.Revision)
	p("")
	p("Without the witness flags, the restored pair agrees with itself, and A's old envelope was **%s**: the target went to revision %d.",
		attemptLine(w.Counterexample), w.TargetAfterCounterexample.Revision)
	p("This counterexample is kept on purpose: an anchor restored with its database cannot tell it from the present.")
	p("")
	p("Restored again and opened with the witness flags, the receiver asked every witness for its latest cosigned checkpoint:")
	p("A's old envelope was refused with exit %d, `%s`:", w.Witnessed.ExitCode, w.Witnessed.ErrorCode)
	p("")
	p("> %s", strings.ReplaceAll(strings.TrimSpace(w.Witnessed.ErrorMessage), "\n", "\n> "))
	p("")
	for _, a := range w.OneDown {
		p("- with %s stopped: exit %d, `%s`", a.Down, a.ExitCode, a.ErrorCode)
	}
	p("")
	p("The target stayed at revision %d. verify-chain with the witness flags exited %d with `%s`.", w.TargetAfter.Revision,
		w.VerifyChain.ExitCode, w.VerifyChain.Problem)
	p("")
	p("Supports: restoring the database and its anchor together is detected as long as the witnesses are run apart from the")
	p("receiver and its backups, with any one of the three down. Does not show: protection against someone who controls %d", w.Quorum)
	p("of the witnesses as well, nor a recovery admitted with the witnesses (recover).")
	p("")
}

// sizesLine lists witnesses' tree sizes in name order.
func sizesLine(m map[string]uint64) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, m[n])
	}
	return strings.Join(parts, ", ")
}
