package witness

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
)

// Errors of a Quorum.
var (
	// ErrNoQuorum means fewer than K members cosigned a checkpoint and K
	// can no longer be reached.
	ErrNoQuorum = errors.New("fewer than the quorum of witnesses cosigned the checkpoint")

	// ErrTooFewAnswers means fewer than N-K+1+F members answered Check, so
	// the answers need not include any of the K that cosigned the latest
	// acknowledged checkpoint.
	ErrTooFewAnswers = errors.New("too few witnesses answered to rule out a rollback")

	// ErrRollbackDetected means a witness has cosigned a larger tree of
	// this log than the local one: the local log lost entries it had shown
	// the witness (a restore from a backup, or a fork the local log cannot
	// see).
	ErrRollbackDetected = errors.New("a witness has cosigned a larger tree than the local log")

	// ErrForkDetected means a witness has cosigned a tree of this log that
	// the local tree does not extend: another root at the same size, or a
	// smaller tree whose consistency with the local one does not verify.
	ErrForkDetected = errors.New("a witness has cosigned a tree the local log does not extend")

	// ErrBadQuorum means a QuorumOptions is refused: no members, a quorum
	// outside 1..N, a missing client or verifier, or a name or key that
	// repeats.
	ErrBadQuorum = errors.New("invalid witness quorum")
)

// errAbandoned is the failure of a member still being asked when K could
// no longer be reached.
var errAbandoned = errors.New("not waited for: the quorum could no longer be reached")

// DivergenceError is a witness's tree that the local log does not extend.
// It matches ErrRollbackDetected or ErrForkDetected (its Kind) with
// errors.Is.
type DivergenceError struct {
	// Kind is ErrRollbackDetected or ErrForkDetected.
	Kind error
	// Member is the witness's name in the quorum.
	Member string
	// WitnessSize is the size of the tree the witness cosigned.
	WitnessSize uint64
	// WitnessRoot is the root of that tree; RootKnown is false when the
	// witness told only its size (a 409 answer to add-checkpoint).
	WitnessRoot tlog.Hash
	// RootKnown says whether WitnessRoot was told.
	RootKnown bool
	// LocalSize is the size of the local tree it was compared with.
	LocalSize uint64
	// LocalRoot is the root of the local tree.
	LocalRoot tlog.Hash
	// Detail says why, when the sizes alone do not (a proof that failed).
	Detail string
}

// Error names the witness, its tree and the local one.
func (e *DivergenceError) Error() string {
	root := "root not told"
	if e.RootKnown {
		root = "root " + e.WitnessRoot.String()
	}
	msg := fmt.Sprintf("%v: witness %s cosigned size %d (%s); local size %d, root %s",
		e.Kind, e.Member, e.WitnessSize, root, e.LocalSize, e.LocalRoot)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns Kind.
func (e *DivergenceError) Unwrap() error { return e.Kind }

// AuditKind returns the audit package's sentinel for the divergence
// (audit.ErrRollbackDetected or audit.ErrForkDetected), so that a log that
// wraps it with the error is judged as an anchor's rollback or fork is.
func (e *DivergenceError) AuditKind() error {
	if errors.Is(e.Kind, ErrRollbackDetected) {
		return audit.ErrRollbackDetected
	}
	return audit.ErrForkDetected
}

// Member is one witness of a Quorum.
type Member struct {
	// Name names the witness in results and errors: distinct in a quorum,
	// and a valid note key name (checkpoint.CheckName), such as the
	// witness's own name.
	Name string
	// Client talks to the witness. If it was made with a Verifier, that
	// verifier must have the same key as Verifier; the quorum checks every
	// answer with Verifier either way.
	Client *Client
	// Verifier is the witness's cosignature key; distinct in a quorum.
	Verifier *checkpoint.CosignatureVerifier
}

// QuorumOptions configures NewQuorum.
type QuorumOptions struct {
	// Members are the N witnesses.
	Members []Member
	// Quorum is K, how many cosignatures make a checkpoint acknowledged:
	// 1 <= K <= N.
	Quorum int
	// Log verifies the log's signature on the checkpoints the quorum sends
	// and on those the witnesses answer with.
	Log note.Verifier
	// Faults is F, how many witnesses may have lost, rolled back or
	// forged their store (or lie) at once without a rollback passing
	// Check: it needs N-K+1+F answers, so that they include an intact
	// one of the K that cosigned the newest acknowledged checkpoint.
	// 0 <= F <= K-1; zero trusts every witness's store.
	Faults int
}

// Quorum asks N witnesses to cosign a log's checkpoints and counts K of
// them as enough; it remembers each witness's last cosigned size.
type Quorum struct {
	members []quorumMember
	k       int
	// faults is QuorumOptions.Faults.
	faults int
	log    note.Verifier
	// round holds one Cosign at a time: two rounds in flight could reach
	// a witness in the opposite order and make the older one look like a
	// rollback.
	round chan struct{}

	recoveryMu sync.Mutex
	// recovery is the signed admission that SetRecovery gave, or nil.
	recovery []byte
	// recoverySeq is recovery's admitted seq.
	recoverySeq uint64
}

type quorumMember struct {
	name   string
	client *Client // a copy verifying with the member's key

	mu    sync.Mutex
	known bool   // whether size was learned
	size  uint64 // the witness's last cosigned size, as far as known
	// askFrom is the size the next round asks from: size, or the size of
	// a checkpoint whose request was cancelled (the witness most likely
	// committed it; if not, its 409 says so and costs one retry).
	askFrom uint64
	// recoveryRefused is set once the witness refused the recovery
	// admission: it is not asked again with it.
	recoveryRefused bool
}

// NewQuorum checks opts and returns the quorum, or ErrBadQuorum saying
// what is wrong.
func NewQuorum(opts QuorumOptions) (*Quorum, error) {
	n := len(opts.Members)
	if n == 0 {
		return nil, fmt.Errorf("%w: no members", ErrBadQuorum)
	}
	if opts.Quorum < 1 || opts.Quorum > n {
		return nil, fmt.Errorf("%w: quorum %d is not between 1 and the %d members", ErrBadQuorum, opts.Quorum, n)
	}
	if opts.Log == nil {
		return nil, fmt.Errorf("%w: no log verifier", ErrBadQuorum)
	}
	if opts.Faults < 0 || opts.Faults > opts.Quorum-1 {
		return nil, fmt.Errorf("%w: faults %d is not between 0 and K-1 = %d", ErrBadQuorum, opts.Faults, opts.Quorum-1)
	}
	q := &Quorum{k: opts.Quorum, faults: opts.Faults, log: opts.Log, round: make(chan struct{}, 1)}
	names := map[string]bool{}
	var keys []ed25519.PublicKey
	for i, m := range opts.Members {
		switch {
		case m.Name == "":
			return nil, fmt.Errorf("%w: member %d has no name", ErrBadQuorum, i+1)
		case checkpoint.CheckName(m.Name) != nil:
			// Names go into errors and logs: one printable word, so that
			// none can forge a line of its own.
			return nil, fmt.Errorf("%w: member %d's name %q is not a valid key name (printable, no space or \"+\")", ErrBadQuorum, i+1, m.Name)
		case names[m.Name]:
			return nil, fmt.Errorf("%w: member name %q repeats", ErrBadQuorum, m.Name)
		case m.Client == nil:
			return nil, fmt.Errorf("%w: member %q has no client", ErrBadQuorum, m.Name)
		case m.Verifier == nil:
			return nil, fmt.Errorf("%w: member %q has no cosignature verifier", ErrBadQuorum, m.Name)
		}
		names[m.Name] = true
		pub := m.Verifier.PublicKey()
		for j, other := range keys {
			// One key under two names is one witness counted twice.
			if pub.Equal(other) {
				return nil, fmt.Errorf("%w: members %q and %q have the same key", ErrBadQuorum, opts.Members[j].Name, m.Name)
			}
		}
		keys = append(keys, pub)
		if m.Client.cosv != nil && !m.Client.cosv.PublicKey().Equal(pub) {
			return nil, fmt.Errorf("%w: member %q's client verifies another key than the member's", ErrBadQuorum, m.Name)
		}
		// The quorum's own copy of the client, verifying with the
		// member's key, so that no answer counts unchecked.
		c := *m.Client
		c.cosv = m.Verifier
		q.members = append(q.members, quorumMember{name: m.Name, client: &c})
	}
	return q, nil
}

// SetRecovery gives the quorum the signed recovery admission that the
// log's checkpoints name (nil for none). From then on a Cosign round asks
// a member whose answer shows a tree the checkpoint does not extend (a
// rollback or a fork) to accept the checkpoint at the recovery endpoint
// with this admission (Client.RecoverCheckpoint), with the proof from the
// admission's admitted seq, once per member: a member that accepted is
// asked as usual from then on, and one that refused is not asked with it
// again. An admission that does not parse is kept as nil: no witness would
// take it.
func (q *Quorum) SetRecovery(admission []byte) {
	q.recoveryMu.Lock()
	defer q.recoveryMu.Unlock()
	q.recovery, q.recoverySeq = nil, 0
	if admission == nil {
		return
	}
	sa, err := audit.ParseSignedAdmission(admission)
	if err != nil {
		return
	}
	q.recovery, q.recoverySeq = append([]byte(nil), admission...), sa.AdmittedHead.Seq
}

// KeyName returns the key name of the member's cosignatures (the witness's
// own name, which a recovery admission names it by), or "" for a name not
// in the quorum.
func (q *Quorum) KeyName(member string) string {
	if m := q.member(member); m != nil {
		return m.client.cosv.Name()
	}
	return ""
}

// needed is how many answers Check needs: N-K+1+F.
func (q *Quorum) needed() int { return len(q.members) - q.k + 1 + q.faults }

// Threshold returns the quorum's K.
func (q *Quorum) Threshold() int { return q.k }

// Members returns the members' names, in the order they were given.
func (q *Quorum) Members() []string {
	out := make([]string, len(q.members))
	for i := range q.members {
		out[i] = q.members[i].name
	}
	return out
}

// MemberStatus is one member's last cosigned size as a quorum knows it.
type MemberStatus struct {
	// Name is the witness's name in the quorum.
	Name string
	// Known says whether Size was learned from a signed answer (Check, or
	// a cosignature of a round).
	Known bool
	// Size is the witness's latest cosigned tree size, as last learned.
	Size uint64
}

// Status returns every member's MemberStatus, in the quorum's order.
func (q *Quorum) Status() []MemberStatus {
	out := make([]MemberStatus, len(q.members))
	for i := range q.members {
		size, known := q.LastCosigned(q.members[i].name)
		out[i] = MemberStatus{Name: q.members[i].name, Known: known, Size: size}
	}
	return out
}

// LastCosigned returns the witness's last cosigned size as far as the
// quorum knows it, and false when it knows nothing yet.
func (q *Quorum) LastCosigned(member string) (uint64, bool) {
	for i := range q.members {
		m := &q.members[i]
		if m.name == member {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.size, m.known
		}
	}
	return 0, false
}

// Cosignature is one member's verified cosignature of a checkpoint.
type Cosignature struct {
	// Member is the witness's name in the quorum.
	Member string
	// Line is the cosignature line, ending in a newline, verified with the
	// member's key.
	Line string
}

// MemberFailure is why one member did not cosign or answer.
type MemberFailure struct {
	// Member is the witness's name in the quorum.
	Member string
	// Err is the failure: a *DivergenceError for a witness ahead of the
	// checkpoint, else the client's error.
	Err error
}

// CosignResult is the outcome of Cosign.
type CosignResult struct {
	// Size is the checkpoint's tree size.
	Size uint64
	// Cosigned are the verified cosignatures, in the order they arrived;
	// at least K when Cosign returned no error.
	Cosigned []Cosignature
	// Failures are the members that failed before Cosign returned, in the
	// order they failed, and, when K could no longer be reached, the
	// members still being asked then. A member in neither list was still
	// being asked when the quorum was reached; its request was cancelled.
	Failures []MemberFailure
}

// Lines returns the cosignature lines, to append to the signed note.
func (r CosignResult) Lines() string {
	var b strings.Builder
	for _, c := range r.Cosigned {
		b.WriteString(c.Line)
	}
	return b.String()
}

// QuorumError is Cosign's error when K can no longer be reached. It
// matches ErrNoQuorum, and every member's error (so errors.Is finds
// ErrRollbackDetected when a witness was ahead).
type QuorumError struct {
	// Want is K.
	Want int
	// Got is how many verified cosignatures came in.
	Got int
	// Failures are every member's failure.
	Failures []MemberFailure
}

// Error names every member's failure.
func (e *QuorumError) Error() string {
	return fmt.Sprintf("%v: %d of %d needed: %s", ErrNoQuorum, e.Got, e.Want, failureList(e.Failures))
}

// Unwrap returns ErrNoQuorum and the members' errors.
func (e *QuorumError) Unwrap() []error {
	out := []error{ErrNoQuorum}
	for _, f := range e.Failures {
		out = append(out, f.Err)
	}
	return out
}

func failureList(fs []MemberFailure) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%s: %v", f.Member, f.Err)
	}
	return strings.Join(parts, "; ")
}

// ProveFunc returns the RFC 6962 consistency proof from the tree of
// oldSize to the checkpoint being cosigned. Cosign calls it from one
// goroutine per member at once, so it must be safe for concurrent use.
type ProveFunc func(oldSize uint64) (tlog.TreeProof, error)

// memberOutcome is one member's answer to a Cosign round.
type memberOutcome struct {
	member string
	line   string
	err    error
}

// Cosign asks every member, in parallel, to cosign signedNote (the log's
// signed checkpoint, verified here with the log's key first) and returns
// as soon as K cosignatures verified with their members' keys are in,
// cancelling the other requests and waiting for them to end. Each member
// is first asked from its last known cosigned size (0 at first, or what
// Check learned; after a cancelled request, the size of the checkpoint it
// carried); a 409 with a size at most the checkpoint's is retried from
// that size (up to maxConflictRetries times, while the size it tells
// grows), a 409 with a larger size is a *DivergenceError
// (ErrRollbackDetected) and not retried. When K can no longer be reached
// it returns a *QuorumError (ErrNoQuorum) beside the result. A result
// without error may still list a divergence among its Failures: an
// unsigned answer, for the caller to report; Check asks for the signed
// account. Rounds of one quorum run
// one at a time, so checkpoints should be given in order of size.
func (q *Quorum) Cosign(ctx context.Context, signedNote []byte, prove ProveFunc) (CosignResult, error) {
	cp, _, err := checkpoint.Open(signedNote, q.log)
	if err != nil {
		return CosignResult{}, fmt.Errorf("cosign: the log's checkpoint: %w", err)
	}
	if prove == nil {
		return CosignResult{}, fmt.Errorf("cosign: no proof function")
	}
	select {
	case q.round <- struct{}{}:
		defer func() { <-q.round }()
	case <-ctx.Done():
		return CosignResult{Size: cp.Size}, ctx.Err()
	}
	q.recoveryMu.Lock()
	recovery, recoverySeq := q.recovery, q.recoverySeq
	q.recoveryMu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Cancel, then wait: no request outlives the call.
	defer wg.Wait()
	defer cancel()
	// Buffered for every member, so no goroutine blocks on a reader that
	// has returned.
	out := make(chan memberOutcome, len(q.members))
	for i := range q.members {
		m := &q.members[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			line, err := m.cosign(ctx, cp, signedNote, prove)
			var d *DivergenceError
			if recovery != nil && errors.As(err, &d) && ctx.Err() == nil {
				line, err = m.recover(ctx, cp, signedNote, recovery, recoverySeq, prove, d)
			}
			if err != nil && ctx.Err() != nil {
				m.guess(cp.Size)
			}
			out <- memberOutcome{member: m.name, line: line, err: err}
		}()
	}
	res := CosignResult{Size: cp.Size}
	heard := map[string]bool{}
	for range q.members {
		o := <-out
		heard[o.member] = true
		if o.err != nil {
			res.Failures = append(res.Failures, MemberFailure{Member: o.member, Err: o.err})
			if len(q.members)-len(res.Failures) < q.k {
				// Name every member: those still being asked are not
				// waited for, since their answers can no longer make K.
				for i := range q.members {
					if name := q.members[i].name; !heard[name] {
						res.Failures = append(res.Failures, MemberFailure{Member: name, Err: errAbandoned})
					}
				}
				return res, &QuorumError{Want: q.k, Got: len(res.Cosigned), Failures: res.Failures}
			}
			continue
		}
		res.Cosigned = append(res.Cosigned, Cosignature{Member: o.member, Line: o.line})
		if len(res.Cosigned) == q.k {
			return res, nil
		}
	}
	// Unreachable: every outcome is a cosignature or a failure, and one of
	// the two counts reaches its limit by the last.
	return res, &QuorumError{Want: q.k, Got: len(res.Cosigned), Failures: res.Failures}
}

// maxConflictRetries is how many 409 answers one member's part of a
// round follows.
const maxConflictRetries = 3

// cosign is one member's part of a round: from its last known size, and
// once more from the size a 409 tells.
func (m *quorumMember) cosign(ctx context.Context, cp checkpoint.Checkpoint, signedNote []byte, prove ProveFunc) (string, error) {
	m.mu.Lock()
	old := m.askFrom
	m.mu.Unlock()
	if old > cp.Size {
		// Known ahead from an earlier round: ask anyway from 0, so that a
		// 409 tells the witness's size as of now.
		old = 0
	}
	for attempt := 0; ; attempt++ {
		line, err := m.add(ctx, cp, signedNote, prove, old)
		var conflict *ConflictError
		switch {
		case err == nil:
			m.learn(cp.Size)
			return line, nil
		case errors.Is(err, ErrBadProof):
			// The witness is at old (else it would have said 409) and
			// refused the proof from there, or another root at the same
			// size: it holds a tree this checkpoint does not extend.
			return "", &DivergenceError{Kind: ErrForkDetected, Member: m.name, WitnessSize: old,
				LocalSize: cp.Size, LocalRoot: cp.Root, Detail: err.Error()}
		case !errors.As(err, &conflict):
			return "", err
		}
		// A 409 is unsigned: it steers the next request, it is not
		// what LastCosigned reports.
		m.guess(conflict.Size)
		if conflict.Size > cp.Size {
			return "", &DivergenceError{Kind: ErrRollbackDetected, Member: m.name,
				WitnessSize: conflict.Size, LocalSize: cp.Size, LocalRoot: cp.Root}
		}
		// A request of an earlier round that was cancelled can still
		// land at the witness after this round's first answer, so the
		// size a 409 tells may move once more; it is followed while it
		// grows, a bounded number of times.
		if attempt >= maxConflictRetries || (attempt > 0 && conflict.Size <= old) {
			return "", fmt.Errorf("witness %s: conflict %d, at size %d after %d: %w", m.name, attempt+1, conflict.Size, old, err)
		}
		old = conflict.Size
	}
}

// recover asks the member, which diverged as d says, to accept the
// checkpoint at the recovery endpoint with the admission, whose admitted
// seq is admitted, unless it refused that before. A refusal is d, wrapped
// with the witness's error.
func (m *quorumMember) recover(ctx context.Context, cp checkpoint.Checkpoint, signedNote, admission []byte, admitted uint64,
	prove ProveFunc, d *DivergenceError) (string, error) {
	m.mu.Lock()
	refused := m.recoveryRefused
	m.mu.Unlock()
	if refused {
		return "", d
	}
	if admitted == 0 || admitted >= cp.Size {
		return "", fmt.Errorf("%w; the checkpoint of size %d does not extend the admitted seq %d", d, cp.Size, admitted)
	}
	proof, err := prove(admitted)
	if err != nil {
		return "", fmt.Errorf("%w; proof from the admitted seq %d to %d: %w", d, admitted, cp.Size, err)
	}
	line, err := m.client.RecoverCheckpoint(ctx, admission, proof, signedNote)
	if err != nil {
		if errors.Is(err, ErrForbidden) || errors.Is(err, ErrBadRequest) {
			m.mu.Lock()
			m.recoveryRefused = true
			m.mu.Unlock()
		}
		return "", fmt.Errorf("%w; recovery admission not accepted: %w", d, err)
	}
	m.learn(cp.Size)
	return line, nil
}

// add sends one add-checkpoint from old and checks the line it returns.
func (m *quorumMember) add(ctx context.Context, cp checkpoint.Checkpoint, signedNote []byte, prove ProveFunc, old uint64) (string, error) {
	var proof tlog.TreeProof
	if old != 0 && old != cp.Size {
		var err error
		if proof, err = prove(old); err != nil {
			return "", fmt.Errorf("witness %s: proof from size %d to %d: %w", m.name, old, cp.Size, err)
		}
	}
	// The quorum's client verifies with the member's key and returns only
	// that key's line (NewQuorum): a line that does not verify is an error.
	return m.client.AddCheckpoint(ctx, old, proof, signedNote)
}

// confirmed returns the size the member last confirmed, if any.
func (m *quorumMember) confirmed() (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.size, m.known
}

func (m *quorumMember) learn(size uint64) {
	m.mu.Lock()
	m.known, m.size, m.askFrom = true, size, size
	m.mu.Unlock()
}

// guess sets the size the next round asks from, not what LastCosigned
// reports: it was not told.
func (m *quorumMember) guess(size uint64) {
	m.mu.Lock()
	m.askFrom = size
	m.mu.Unlock()
}

// ConsistencyFunc returns the RFC 6962 consistency proof from the local
// log's tree of oldSize to its tree of newSize.
type ConsistencyFunc func(oldSize, newSize uint64) (tlog.TreeProof, error)

// MemberLatest is one member's answer to Check.
type MemberLatest struct {
	// Member is the witness's name in the quorum.
	Member string
	// Answered says whether the member answered: a checkpoint cosigned by
	// its key and signed by the log's, or a plain "none" (ErrNoCheckpoint).
	Answered bool
	// Size is the size of the witness's latest cosigned tree, 0 for none.
	Size uint64
	// Root is that tree's root (the empty tree's for none).
	Root tlog.Hash
	// Note is the answer as the witness sent it (the log's signed
	// checkpoint with the witness's cosignature), nil for none: evidence
	// to keep when it diverges.
	Note []byte
	// ext are the answer's extension lines.
	ext []string
	// Err is why the member did not answer, or the *DivergenceError its
	// answer showed.
	Err error
}

// CheckResult is the outcome of Check.
type CheckResult struct {
	// Members are every member's answer or failure, in the quorum's order.
	Members []MemberLatest
	// Answers is how many members answered.
	Answers int
	// Needed is N-K+1+F.
	Needed int
}

// Check asks every member for its latest cosigned checkpoint of origin and
// compares each with local, the local log's checkpoint as it signs it
// (with its extension lines): a larger size is ErrRollbackDetected; the
// same size with another root or other extension lines, or a smaller tree
// that local does not extend (by prove and tlog.CheckTree), is
// ErrForkDetected; each is a *DivergenceError naming the witness. Any one
// divergence is an error, however many members answered. Otherwise fewer
// than N-K+1+F answers (QuorumOptions.Faults) is ErrTooFewAnswers: only that many are sure to
// include one of the K that cosigned the last acknowledged checkpoint. A
// member's answer counts only if its cosignature verifies with the
// member's key (and is fresh, see ClientOptions.MaxAge) and its checkpoint
// with the log's key; a transport error or a witness that does not know
// the origin is not an answer. An error of prove is returned, wrapped.
// Check waits for every member: give ctx a deadline, or a witness that
// never answers holds it.
func (q *Quorum) Check(ctx context.Context, origin string, local checkpoint.Checkpoint, prove ConsistencyFunc) (CheckResult, error) {
	res := CheckResult{Needed: q.needed()}
	switch {
	case local.Origin != origin:
		return res, fmt.Errorf("check: the local checkpoint is of %q, not %q", local.Origin, origin)
	case local.Size > checkpoint.MaxSize:
		return res, fmt.Errorf("check: local size %d is over 2^62", local.Size)
	case local.Size == 0 && local.Root != emptyRoot:
		return res, fmt.Errorf("check: local size 0 with a root that is not the empty tree's")
	case prove == nil:
		return res, fmt.Errorf("check: no proof function")
	}
	res.Members = q.askLatest(ctx, origin)
	var diverged []error
	for i := range res.Members {
		a := &res.Members[i]
		if !a.Answered {
			continue
		}
		res.Answers++
		err, perr := compare(a, local, prove)
		if perr != nil {
			return res, fmt.Errorf("check: witness %s: local consistency proof from size %d to %d: %w", a.Member, a.Size, local.Size, perr)
		}
		if err != nil {
			a.Err = err
			diverged = append(diverged, err)
		}
	}
	if len(diverged) > 0 {
		return res, errors.Join(diverged...)
	}
	return res, q.tooFew(res)
}

// tooFew returns ErrTooFewAnswers, naming the members that did not
// answer and why, when res has fewer answers than N-K+1+F; else nil.
func (q *Quorum) tooFew(res CheckResult) error {
	if res.Answers >= res.Needed {
		return nil
	}
	var fs []string
	for _, a := range res.Members {
		if !a.Answered {
			fs = append(fs, fmt.Sprintf("%s: %v", a.Member, a.Err))
		}
	}
	return fmt.Errorf("%w: %d of the %d needed (N-K+1+F with N=%d, K=%d, F=%d): %s",
		ErrTooFewAnswers, res.Answers, res.Needed, len(q.members), q.k, q.faults, strings.Join(fs, "; "))
}

// Readmit asks each member whose answer in res diverged (Check) to accept
// signedNote, the log's checkpoint Check compared the answers with, at its
// recovery endpoint with the recovery admission given to SetRecovery and
// prove's proof from the admission's admitted seq. The
// witness is the judge: it accepts only an admission signed by the recovery
// key it trusts for the log that names it at exactly what it holds (see
// Witness.RecoverCheckpoint), so a divergence is forgiven by the recovery
// key's decision, never by the log's own word. A member that accepted
// answers as at signedNote's size and root from then on, in res as well;
// every other divergence is returned, joined, wrapped with the witness's
// refusal. With no divergence left, fewer than N-K+1+F answers is
// ErrTooFewAnswers, as in Check. Without an admission the divergences are
// returned as they are.
func (q *Quorum) Readmit(ctx context.Context, signedNote []byte, prove ProveFunc, res *CheckResult) error {
	cp, _, err := checkpoint.Open(signedNote, q.log)
	if err != nil {
		return fmt.Errorf("readmit: the log's checkpoint: %w", err)
	}
	if prove == nil {
		return fmt.Errorf("readmit: no proof function")
	}
	q.recoveryMu.Lock()
	recovery, recoverySeq := q.recovery, q.recoverySeq
	q.recoveryMu.Unlock()
	var left []error
	for i := range res.Members {
		a := &res.Members[i]
		var d *DivergenceError
		if !a.Answered || !errors.As(a.Err, &d) {
			continue
		}
		if recovery == nil {
			left = append(left, a.Err)
			continue
		}
		m := q.member(a.Member)
		if m == nil {
			left = append(left, a.Err)
			continue
		}
		if _, err := m.recover(ctx, cp, signedNote, recovery, recoverySeq, prove, d); err != nil {
			a.Err = err
			left = append(left, err)
			continue
		}
		a.Err, a.Size, a.Root, a.Note, a.ext = nil, cp.Size, cp.Root, nil, nil
	}
	if len(left) > 0 {
		return errors.Join(left...)
	}
	return q.tooFew(*res)
}

// member returns the member of that name, or nil.
func (q *Quorum) member(name string) *quorumMember {
	for i := range q.members {
		if q.members[i].name == name {
			return &q.members[i]
		}
	}
	return nil
}

// Latest asks every member for its latest cosigned checkpoint of origin,
// as Check does, and compares nothing: a recovery decides against what the
// witnesses hold, whatever it is. Fewer than N-K+1+F answers is
// ErrTooFewAnswers, returned beside the result.
func (q *Quorum) Latest(ctx context.Context, origin string) (CheckResult, error) {
	res := CheckResult{Needed: q.needed(), Members: q.askLatest(ctx, origin)}
	for _, a := range res.Members {
		if a.Answered {
			res.Answers++
		}
	}
	return res, q.tooFew(res)
}

// askLatest asks every member at once for its latest checkpoint of origin
// and returns the answers in the quorum's order.
func (q *Quorum) askLatest(ctx context.Context, origin string) []MemberLatest {
	out := make([]MemberLatest, len(q.members))
	var wg sync.WaitGroup
	for i := range q.members {
		m := &q.members[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = m.latest(ctx, q.log, origin)
		}()
	}
	wg.Wait()
	return out
}

// latest asks one member and checks its answer's signatures.
func (m *quorumMember) latest(ctx context.Context, logv note.Verifier, origin string) MemberLatest {
	a := MemberLatest{Member: m.name}
	msg, err := m.client.Latest(ctx, origin)
	switch {
	case errors.Is(err, ErrNoCheckpoint):
		// "None" is unsigned: from a member this quorum saw cosign, it
		// is a witness that lost its store or an answer forged on the
		// way, and it is no answer (it must not hide what it cosigned).
		if size, ok := m.confirmed(); ok && size > 0 {
			a.Err = fmt.Errorf("%w: witness %s says it has no checkpoint, but cosigned size %d through this quorum", ErrUnexpectedResponse, m.name, size)
			return a
		}
		a.Answered, a.Root = true, emptyRoot
		m.learn(0)
		return a
	case err != nil:
		a.Err = err
		return a
	}
	// The quorum's client checked the member's cosignature and its age;
	// the log's signature is the quorum's to check: a witness answering a
	// tree the log never signed says nothing about the log.
	cp, _, err := checkpoint.Open(msg, logv)
	if err != nil {
		a.Err = fmt.Errorf("%w: witness %s answered a checkpoint not signed by the log: %w", ErrUnexpectedResponse, m.name, err)
		return a
	}
	if cp.Origin != origin {
		a.Err = fmt.Errorf("%w: witness %s answered a checkpoint of %q", ErrUnexpectedResponse, m.name, cp.Origin)
		return a
	}
	a.Answered, a.Size, a.Root, a.Note, a.ext = true, cp.Size, cp.Root, msg, cp.Extensions
	m.learn(cp.Size)
	return a
}

// compare returns the divergence of a member's answer from local, or the
// error of prove.
func compare(a *MemberLatest, local checkpoint.Checkpoint, prove ConsistencyFunc) (divergence, proveErr error) {
	d := &DivergenceError{Member: a.Member, WitnessSize: a.Size, WitnessRoot: a.Root, RootKnown: true,
		LocalSize: local.Size, LocalRoot: local.Root}
	switch {
	case a.Size > local.Size:
		d.Kind = ErrRollbackDetected
		return d, nil
	case a.Size == local.Size:
		if a.Root != local.Root {
			d.Kind = ErrForkDetected
			return d, nil
		}
		if a.Note != nil && !slices.Equal(a.ext, local.Extensions) {
			// One tree, two bodies: the log signed two statements (state
			// digest, epoch high-water) about one size, a split view the
			// witness would have refused to cosign.
			d.Kind, d.Detail = ErrForkDetected, fmt.Sprintf("same tree, other extension lines: witness %q, local %q", a.ext, local.Extensions)
			return d, nil
		}
		return nil, nil
	case a.Size == 0:
		if a.Root != emptyRoot {
			d.Kind, d.Detail = ErrForkDetected, "size 0 with a root that is not the empty tree's"
			return d, nil
		}
		return nil, nil
	}
	proof, err := prove(a.Size, local.Size)
	if err != nil {
		return nil, err
	}
	if err := tlog.CheckTree(proof, int64(local.Size), local.Root, int64(a.Size), a.Root); err != nil {
		d.Kind, d.Detail = ErrForkDetected, fmt.Sprintf("consistency proof does not verify: %v", err)
		return d, nil
	}
	return nil, nil
}
