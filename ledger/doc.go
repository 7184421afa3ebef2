// Package ledger is the execution ledger: which actions were approved, and
// which worker claimed each one. It lives in its own bbolt file (or, with
// InitEngine and OpenEngine, in any engine of package engine, such as a
// prefix of an etcd cluster), apart from the receiver, and keeps its audit
// chain, checkpoints and anchor by the same protocol as the receiver (one
// implementation, internal/chain). It never authorises an effect: a claim
// is bookkeeping for the workers and the operator, and no call of this
// package activates a receiver grant. The receiver's fence, not the
// ledger, decides what commits.
//
// # Model
//
// An approval names an action, the SHA-256 of the exact request that was
// approved, the approver and an expiry. Given the request bytes, Approve
// reads the action they name (as strictly as the receiver decodes them,
// without importing the receiver) and refuses an approval of any other
// action (ErrActionMismatch); an approval by digest alone records that its
// action was not checked. A claim is one worker's hold on one
// approved action; an action has at most one live claim. A claim moves
//
//	claimed -> dispatched -> succeeded | failed
//	claimed -> failed
//
// and is renewed by heartbeats that move its lease expiry. An expired lease
// changes nothing by itself: no other worker may claim the action until an
// operator takes it over. A takeover supersedes the live claim, marks it
// uncertain (the superseded worker may still have an effect in flight) and
// gives the action a new claim; an operator later reconciles the uncertain
// claim to succeeded or failed, which records its own time (a claim's
// SettledAt stays the moment it stopped being live). A claim that is no
// longer live reports no lease. A worker that restarts and claims again gets
// its own live claim back.
//
// # Storage and integrity
//
// Buckets: meta (format, ledger id, signing key), approvals (action ->
// approval), actions (action -> live claim and claim history), claims (claim
// ref -> claim), audit and checkpoints; receivers (name -> receiver and its
// pinned key) and containments (containment id -> record), which files
// written before them lack and the first write that needs them creates.
// Records are canonical CBOR. Every change appends to an audit chain of the
// audit package (kinds init, approve, claim, heartbeat, dispatch, finish,
// takeover, reconcile; an entry's Decision holds the claim ref and Epoch the
// claim's generation; receiver, contain, contain_record, contain_alternate
// and contain_successor carry the SHA-256 of the record they stored, which
// a read checks) and
// signs a checkpoint that is written to an anchor kept apart from the file,
// exactly as the receiver does; Events lists the chain and VerifyChain
// checks it against the anchor. Opening a ledger whose chain ends before its
// anchor, or disagrees with it, fails with audit.ErrRollbackDetected or
// audit.ErrForkDetected: a restored copy of the ledger cannot hand out a
// second claim of an action that was already claimed. A verifier of a
// ledger's chain sets audit.VerifyOptions.NoFenceReplay: its entries record
// claims, not a receiver's scopes, holds and grants, so there is no fence
// to replay.
package ledger
