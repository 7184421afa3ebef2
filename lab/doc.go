// Package lab runs kvfence's fencing lab: demonstrations, in real
// processes against real bbolt files, of what the receiver's fence and
// anchor stop and of the counterexamples that show those controls are what
// decides. Run writes the evidence to a new directory: summary.json (each
// observation with its expected value and a verdict, and an overall
// verdict), report.md in plain words, per demonstration a report.json with
// timestamped steps, and the source and environment manifests.
//
// Some demonstrations need a receiver or ledger that skips a check on
// purpose. Those exist only in a binary built with the kvfencelab tag
// (BuildTag); in any other build Run refuses with ErrNotLabBuild before it
// creates anything, and the lab's worker refuses its defective modes.
package lab
