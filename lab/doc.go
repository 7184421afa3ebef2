// Package lab runs kvfence's fencing lab: demonstrations, in real
// processes against real bbolt files, of what the receiver's fence and
// anchor stop and of the counterexamples that show those controls are what
// decides. Run writes the evidence to a new directory: summary.json (each
// observation with its expected value and a verdict, and an overall
// verdict), report.md in plain words, per demonstration a report.json with
// timestamped steps, and the source and environment manifests.
//
// Run re-executes the lab binary as worker processes (WorkerMain,
// ServedWorkerMain), as kvfence serve and kvfence witness serve, and as
// the operator's kvfence commands, and runs these demonstrations,
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
//	04b-restored-receiver-and-anchor-witnessed
//	                                 a receiver with three kvfence witness
//	                                 serve processes and a quorum of two,
//	                                 its database and anchor restored
//	                                 together from before the hold: without
//	                                 the witness flags it accepts the old
//	                                 grant (the counterexample); with them
//	                                 it refuses to open as a rollback, with
//	                                 every witness up and each one down
//	05-restored-receiver-anchored    another copy of that database, opened
//	                                 normally, is refused as a rollback
//	06-served-receiver               the receiver as kvfence serve over mTLS:
//	                                 a wrong identity is denied, a worker
//	                                 cannot hold, and a hold made over the
//	                                 admin socket while it serves denies the
//	                                 stale worker
//	07-contained-workflow            one action at two served receivers and
//	                                 a ledger: with receiver 2 stopped,
//	                                 kvfence contain is partial and the
//	                                 successor's activation is refused;
//	                                 rerun once it is back, contain is full
//	                                 with no new generation at receiver 1;
//	                                 the stale worker is denied at both,
//	                                 and the successor, activated through
//	                                 contain activate, is applied at both
//	08-kubernetes-target             the backup policy as a ConfigMap on a
//	                                 real kube-apiserver, changed by kvfence
//	                                 serve with the receiver's identity: A
//	                                 is denied and the object unchanged; A's
//	                                 own token is refused by RBAC and, with
//	                                 RBAC widened, by the admission policy;
//	                                 B is applied with the resourceVersion
//	                                 precondition; an out-of-band change
//	                                 while B's next PUT is held on the wire
//	                                 makes it a conflict, not a lost update.
//	                                 It needs a kube-apiserver (Options.Kube)
//	                                 and is reported as not run without one
//
// Some demonstrations need a receiver or ledger that skips a check on
// purpose. Those exist only in a binary built with the kvfencelab tag
// (BuildTag); in any other build Run refuses with ErrNotLabBuild before it
// creates anything, and the lab's worker refuses its defective modes.
package lab
