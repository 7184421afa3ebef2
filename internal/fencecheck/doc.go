// Package fencecheck checks that a receiver's fence is linearizable: that
// every history of concurrent submits, holds, activations and reads that a
// receiver produced could have been produced by one sequential fence, the
// one docs/design.md §3 and §4 describe, taking each call at some instant between
// its start and its return.
//
// It has three parts. Model is the sequential fence as a porcupine model,
// partitioned by scope. Check runs porcupine over a recorded history with a
// time limit and, when the history is illegal or the check could not
// finish, writes porcupine's HTML visualization next to the report. Run
// opens a receiver through a function it is given, drives it from
// concurrent clients (workers submitting with current and superseded
// grants, an administrator holding and activating, readers) and records
// every call with its start, its return and its outcome. Because Run only
// opens the receiver through that function, the same workload and the same
// model check any engine under the receiver.
//
// # Calls of unknown outcome
//
// An error that is not a verdict (a commit whose anchor write failed, a
// storage fault) does not say whether the call took effect. Such a call is
// recorded as Output.Unknown with a return time after every other call, and
// the model lets it take effect at any instant after its start: placed
// before another call, its effect is what that call sees; placed last, it
// is a call that never took effect. An activation of unknown outcome opens
// its scope with a grant whose id nobody learned, so that no worker can
// submit under it and a status read may show any id.
//
// # Caveats
//
// The model knows no clock: grants are activated with windows far longer
// than a run, and a grant_expired or grant_not_yet_valid denial is
// illegal. Holds name one scope each, so that every call belongs to exactly
// one partition.
package fencecheck
