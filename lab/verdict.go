package lab

import (
	"fmt"
	"slices"
	"strings"
)

// Kinds of check: what an observation that matches its expected value
// means.
const (
	// KindSuccess is a control that worked: the fence, the anchor or
	// verify-chain stopped or caught what it must.
	KindSuccess = "success"
	// KindCounterexample is a failure the lab produces on purpose, with a
	// check removed or bypassed, to show that the check is what decides.
	// Its expected observation is the failure.
	KindCounterexample = "counterexample"
	// KindLimit is something the lab does not assess; its value states the
	// limit rather than a result.
	KindLimit = "limit"
)

// Overall verdicts of a lab run.
const (
	// VerdictAsExpected means every observation equals its expected value.
	VerdictAsExpected = "as_expected"
	// VerdictNotAsExpected means at least one observation does not.
	VerdictNotAsExpected = "not_as_expected"
)

// Check is one summary key judged: what the lab observed, what it must
// observe, and what that means.
type Check struct {
	// Observed is the value the lab observed (the flat summary key's value).
	Observed any `json:"observed"`
	// Expected is the value the demonstration must produce.
	Expected any `json:"expected"`
	// AsExpected says whether Observed equals Expected.
	AsExpected bool `json:"as_expected"`
	// Kind is KindSuccess, KindCounterexample or KindLimit.
	Kind string `json:"kind"`
	// Meaning says in words what the expected value shows.
	Meaning string `json:"meaning"`
	// NotRun, when set, says why the check's demonstration did not run;
	// Observed is then null and AsExpected false, and the check counts
	// neither way in the verdict.
	NotRun string `json:"not_run,omitempty"`
}

// expectation is the expected value and meaning of one summary key.
type expectation struct {
	key      string
	kind     string
	expected any
	meaning  string
	observe  func(*Observations) any
	// demo is the demonstration the key needs, when it may not run.
	demo string
}

// expectations lists every summary key in report order. A test holds it to
// the keys of Observations.
var expectations = []expectation{
	{"stale_worker_accepted", KindSuccess, false,
		"demonstration 1: after the committed hold, the held receiver refused the superseded worker",
		func(o *Observations) any { return o.StaleWorkerAccepted }, ""},
	{"mutations_before_current_worker", KindSuccess, uint64(0),
		"demonstration 1: nothing changed the target before the current worker wrote",
		func(o *Observations) any { return o.MutationsBeforeCurrentWorker }, ""},
	{"current_worker_accepted", KindSuccess, true,
		"demonstration 1: the current worker's request was applied",
		func(o *Observations) any { return o.CurrentWorkerAccepted }, ""},
	{"defective_receiver_accepted_stale_worker", KindCounterexample, true,
		"counterexample kept on purpose (demonstration 2): a receiver without checks 2-4, which exists only in the lab build, " +
			"let the superseded worker through, so those checks are what refuses it",
		func(o *Observations) any { return o.DefectiveReceiverAcceptedStaleWorker }, ""},
	{"defective_receiver_caught_by_verify_chain", KindSuccess, true,
		"demonstration 2: verify-chain found that receiver's mutation under the superseded grant in its own chain (fence_violation)",
		func(o *Observations) any { return o.DefectiveReceiverCaughtByVerifyChain }, ""},
	{"restored_ledger_accepted_claim", KindCounterexample, true,
		"counterexample kept on purpose (demonstration 3a): a ledger restored from a backup and opened without its anchor " +
			"handed a second worker the action already claimed, as in the original lab, the ledger-only experiment " +
			"(no receiver fence, no anchor) that kvfence grew out of",
		func(o *Observations) any { return o.RestoredLedgerAcceptedClaim }, ""},
	{"held_receiver_accepted_restored_work", KindSuccess, false,
		"demonstration 3: the held receiver refused the work of that second claim: a claim is not authority",
		func(o *Observations) any { return o.HeldReceiverAcceptedRestoredWork }, ""},
	{"restored_ledger_rollback_detected", KindSuccess, true,
		"demonstration 3b: opened with its anchor, the restored ledger was refused as a rollback",
		func(o *Observations) any { return o.RestoredLedgerRollbackDetected }, ""},
	{"restored_receiver_copy_accepted_old_grant", KindCounterexample, true,
		"counterexample kept on purpose (demonstration 4): a copy of demonstration 1's pre-hold database, opened without " +
			"its anchor, accepted the old grant: the fence alone cannot tell a restored copy from the present",
		func(o *Observations) any { return o.RestoredReceiverCopyAcceptedOldGrant }, ""},
	{"restored_receiver_and_anchor_accepted_old_grant", KindCounterexample, true,
		"counterexample kept on purpose (demonstration 4b): a receiver's database and its anchor restored together from a " +
			"backup taken before the hold, opened without its witnesses, accepted the old grant: the pair agrees with itself, " +
			"so the anchor alone cannot tell it from the present",
		func(o *Observations) any { return o.RestoredReceiverAndAnchorAcceptedOldGrant }, ""},
	{"restored_receiver_and_anchor_accepted_old_grant_with_witnesses", KindSuccess, false,
		"demonstration 4b: the same pair restored again, opened with three witnesses and a quorum of two, refused to open " +
			"(exit 4, rollback_detected, a witness named as having cosigned a larger tree) with every witness up and with " +
			"each one down, and verify-chain with the witnesses reported rollback_detected; a refusal for any other reason " +
			"(transport, usage, too few answers) leaves this null, not as expected",
		func(o *Observations) any { return optBool(o.RestoredReceiverAndAnchorAcceptedOldGrantWithWitnesses) }, ""},
	{"restored_receiver_rollback_detected", KindSuccess, true,
		"demonstration 5: another copy of demonstration 1's pre-hold database, opened normally, was refused as a rollback, " +
			"and verify-chain reports rollback_detected",
		func(o *Observations) any { return o.RestoredReceiverRollbackDetected }, ""},
	{"served_wrong_identity_denied", KindSuccess, true,
		"demonstration 6: worker A's certificate presenting worker B's current envelope was denied executor_mismatch",
		func(o *Observations) any { return o.ServedWrongIdentityDenied }, ""},
	{"served_worker_hold_forbidden", KindSuccess, true,
		"demonstration 6: a worker certificate calling /v1/hold got 403 and the epoch did not move",
		func(o *Observations) any { return o.ServedWorkerHoldForbidden }, ""},
	{"served_hold_while_serving_denied_stale_worker", KindSuccess, true,
		"demonstration 6: after the operator's hold over the admin socket while serving, worker A's superseded envelope " +
			"was denied, and nothing changed the target before B wrote",
		func(o *Observations) any { return o.ServedHoldWhileServingDeniedStaleWorker }, ""},
	{"served_current_worker_accepted", KindSuccess, true,
		"demonstration 6: worker B's envelope, with B's certificate, was applied",
		func(o *Observations) any { return o.ServedCurrentWorkerAccepted }, ""},
	{"contain_partial_blocked_successor", KindSuccess, true,
		"demonstration 7: with receiver 2 stopped, kvfence contain recorded partial containment (exit 8), and the successor's " +
			"activation was refused (exit 3) with no grant active at receiver 1, which had acknowledged",
		func(o *Observations) any { return o.ContainPartialBlockedSuccessor }, ""},
	{"contain_retry_new_generations", KindSuccess, uint64(0),
		"demonstration 7: rerunning kvfence contain after receiver 2 came back issued no new generation at receiver 1",
		func(o *Observations) any { return o.ContainRetryNewGenerations }, ""},
	{"contain_full_after_retry", KindSuccess, true,
		"demonstration 7: the rerun recorded full containment (exit 0), every boundary acknowledged with a verified signature",
		func(o *Observations) any { return o.ContainFullAfterRetry }, ""},
	{"contain_stale_denied_at_every_boundary", KindSuccess, true,
		"demonstration 7: worker A's envelopes were denied at receiver 1 while containment was partial and at both receivers " +
			"once it was full, and neither target changed before the successor wrote",
		func(o *Observations) any { return o.ContainStaleDeniedAtEveryBoundary }, ""},
	{"contain_successor_accepted", KindSuccess, true,
		"demonstration 7: after full containment and the superseded claim's reconciliation, kvfence contain activate " +
			"activated worker B at both boundaries and B's envelopes were applied at both",
		func(o *Observations) any { return o.ContainSuccessorAccepted }, ""},
	{"k8s_stale_worker_changed_object", KindSuccess, false,
		"demonstration 8: on a real kube-apiserver, after the hold, worker A's superseded envelope was denied and the ConfigMap " +
			"kept its resourceVersion and data until worker B wrote",
		func(o *Observations) any { return optBool(o.K8sStaleWorkerChangedObject) }, kubeDemonstration},
	{"k8s_direct_write_by_worker_accepted", KindSuccess, false,
		"demonstration 8: worker A's own Kubernetes token could not write the ConfigMap: RBAC refused it, and with RBAC widened " +
			"the shipped admission policy refused it",
		func(o *Observations) any { return optBool(o.K8sDirectWriteByWorkerAccepted) }, kubeDemonstration},
	{"k8s_current_worker_applied", KindSuccess, true,
		"demonstration 8: worker B's envelope was applied by the receiver with the resourceVersion precondition and stamped " +
			"(kvfence.dev/epoch, grant, receipt)",
		func(o *Observations) any { return optBool(o.K8sCurrentWorkerApplied) }, kubeDemonstration},
	{"k8s_lost_update", KindSuccess, false,
		"demonstration 8: a change made out of band while B's next write was held on the wire made that write a conflict " +
			"(409 on the resourceVersion precondition); the out-of-band change survived",
		func(o *Observations) any { return optBool(o.K8sLostUpdate) }, kubeDemonstration},
	{"production_authorization", KindLimit, "not_assessed",
		"a limit of the lab, not a result: production authorization (real identities, a real PKI, policy) is not assessed",
		func(o *Observations) any { return o.ProductionAuthorization }, ""},
}

// optBool is a *bool observation as summary.json holds it: nil (null)
// when its demonstration did not run.
func optBool(p *bool) any {
	if p == nil {
		return nil
	}
	return *p
}

// judge fills s.Checks, s.Verdict and s.VerdictDetail from s's
// observations. A check whose demonstration s.NotRun names is marked not
// run and counts neither way: the verdict covers what ran, and the detail
// says what did not.
func (s *Summary) judge() {
	s.Checks = make(map[string]Check, len(expectations))
	var wrong, notRun []string
	counts := map[string]int{}
	for _, e := range expectations {
		obs := e.observe(&s.Observations)
		if reason, skipped := s.NotRun[e.demo]; e.demo != "" && skipped {
			s.Checks[e.key] = Check{Observed: nil, Expected: e.expected, Kind: e.kind, Meaning: e.meaning, NotRun: reason}
			notRun = append(notRun, e.key)
			continue
		}
		ok := obs == e.expected
		s.Checks[e.key] = Check{Observed: obs, Expected: e.expected, AsExpected: ok, Kind: e.kind, Meaning: e.meaning}
		if !ok {
			wrong = append(wrong, fmt.Sprintf("%s (observed %v, expected %v)", e.key, obs, e.expected))
		}
		counts[e.kind]++
	}
	ran := len(expectations) - len(notRun)
	skipped := ""
	if len(notRun) > 0 {
		var demos []string
		for d, reason := range s.NotRun {
			demos = append(demos, d+" "+reason)
		}
		slices.Sort(demos)
		skipped = fmt.Sprintf("; %d checks NOT RUN (%s): %s", len(notRun), strings.Join(notRun, ", "), strings.Join(demos, "; "))
	}
	if len(wrong) == 0 {
		s.Verdict = VerdictAsExpected
		s.VerdictDetail = fmt.Sprintf("all %d checks as expected: %d successes, %d counterexamples kept on purpose, %d limit stated%s",
			ran, counts[KindSuccess], counts[KindCounterexample], counts[KindLimit], skipped)
		return
	}
	s.Verdict = VerdictNotAsExpected
	s.VerdictDetail = fmt.Sprintf("%d of %d checks not as expected: %s%s", len(wrong), ran, strings.Join(wrong, "; "), skipped)
}

// Unexpected returns the keys whose observation is not the expected one,
// in report order. A check that did not run (Check.NotRun) is not among
// them: the verdict's detail names it.
func (s *Summary) Unexpected() []string {
	var out []string
	for _, e := range expectations {
		if c, ok := s.Checks[e.key]; !ok || (!c.AsExpected && c.NotRun == "") {
			out = append(out, e.key)
		}
	}
	return out
}

// Keys returns the summary's keys in report order.
func Keys() []string {
	out := make([]string, len(expectations))
	for i, e := range expectations {
		out[i] = e.key
	}
	return out
}
