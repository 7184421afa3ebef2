// Package lab runs the fencing lab: demonstrations, in real processes, of
// what the receiver's fence does for a stale worker and what happens
// without it, with the evidence written to a new directory for an operator
// to check.
//
// Run re-executes the lab binary as worker processes (WorkerMain,
// ServedWorkerMain) and as kvfence serve, and runs these demonstrations,
// each in a directory of its own:
//
//	01-paused-worker                 worker A pauses, the operator holds and
//	                                 activates worker B; A is denied before
//	                                 B writes, B is applied
//	02-defective-receiver            the same against a receiver that skips
//	                                 checks 2-4: A gets through, and
//	                                 verify-chain reports the receiver's own
//	                                 chain as a fence_violation
//	03a-restored-ledger-unanchored   a ledger restored from before a claim,
//	                                 opened without its anchor, hands a second
//	                                 worker the same action; the held receiver
//	                                 still denies that worker's work
//	03b-restored-ledger-anchored     the same ledger opened with its anchor
//	                                 is refused as a rollback
//	04-restored-receiver-unanchored  a copy of demonstration 1's database
//	                                 from before the hold, opened without its
//	                                 anchor, accepts the old grant: the
//	                                 counterexample, kept on purpose
//	05-restored-receiver-anchored    that copy opened normally is refused as
//	                                 a rollback
//	06-served-receiver               the receiver as kvfence serve over mTLS:
//	                                 a wrong identity is denied, a worker
//	                                 cannot hold, and a hold made over the
//	                                 admin socket while it serves denies the
//	                                 stale worker
//
// The output holds summary.json (Summary: one value per claim the lab
// checks), report.md, per demonstration a report.json with each step and
// its time, the databases, receipts and events, and the source.json and
// environment.json manifests.
//
// # Caveats
//
// Demonstrations 2, 3a and 4 open a defective receiver or a database
// without its anchor, which only a binary built with the kvfencelab tag
// (BuildTag) can do; in any other build Run refuses with ErrNotLabBuild
// before it creates anything, and the workers refuse the defective modes.
// The lab shows the fence at work on one machine; it does not assess how a
// production deployment authenticates its workers
// (Summary.ProductionAuthorization is "not_assessed").
package lab
