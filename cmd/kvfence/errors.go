package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/kvfence/kvfence/receiptproof"
	"io/fs"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/audit/etcdanchor"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/contain"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
	"github.com/kvfence/kvfence/witness"
)

// Exit codes (docs/design.md §9). exitCode is the only place that chooses one.
const (
	ExitOK        = 0 // success, including already_applied
	ExitError     = 1 // operational error
	ExitUsage     = 2 // bad flags, a missing required flag, an unknown command, a malformed input file
	ExitDenied    = 3 // the fence denied the request, or the receiver's or the ledger's rules refused the call
	ExitIntegrity = 4 // rollback, fork, tampering, bad signature, missing anchor
	ExitBusy      = 5 // the database lock was not obtained in time
	ExitWarning   = 6 // verify-chain: the chain verifies, but the anchor file holds a damaged slot
	ExitPartial   = 8 // contain: the containment is partial or none; the record was written and printed
)

// exitCode maps an error returned by a command to the process exit code.
//
// Integrity problems come first: whatever else an error says, one that
// kvfence.IsIntegrityError recognises (a rollback, a fork, a missing,
// unreadable or badly signed anchor, another receiver's anchor, a damaged
// chain, a recovery admission that does not verify or match) exits with 4.
// kvfence.ErrBadFormat is deliberately not one of them: a file that is not
// a receiver database is an operational error, not evidence of tampering.
// A malformed request, envelope or patch given as an input file is a usage
// error: the command line pointed at the wrong bytes. A refusal by the
// receiver's rules (kvfence.IsRefusal, ledger.IsRefusal) exits like a
// denial: the receiver is sound and changed nothing, and retrying the same
// call is refused again.
func exitCode(err error) int {
	var ue *usageError
	var de *deniedError
	var we *warningError
	var pe *partialError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case kvfence.IsIntegrityError(err), errors.Is(err, client.ErrIntegrity), errors.Is(err, etcdanchor.ErrClusterMismatch),
		errors.Is(err, contain.ErrVerifyMismatch), errors.Is(err, ledger.ErrContainmentTampered),
		errors.Is(err, backup.ErrMismatch), errors.Is(err, backup.ErrSumMismatch), errors.Is(err, receiptproof.ErrUnproven):
		return ExitIntegrity
	case errors.As(err, &pe):
		return ExitPartial
	case isContainRefusal(err):
		return ExitDenied
	case errors.As(err, &we):
		return ExitWarning
	case errors.As(err, &ue), isMalformedInput(err), errors.Is(err, kvfence.ErrAnchorNotApart),
		errors.Is(err, kvfence.ErrAnchorClusterUnrecorded), errors.Is(err, etcdanchor.ErrAuthOff):
		// The command line names the store's cluster as the anchor, must
		// state the anchor's cluster, or names an etcd user for a cluster
		// without auth: corrected there (or on the cluster).
		return ExitUsage
	case errors.As(err, &de), kvfence.IsRefusal(err), ledger.IsRefusal(err), errors.Is(err, kvfence.ErrHoldIDConflict):
		return ExitDenied
	case errors.Is(err, kvfence.ErrStorageBusy), errors.Is(err, ledger.ErrStorageBusy), errors.Is(err, witness.ErrLocked),
		errors.Is(err, audit.ErrAnchorBusy):
		return ExitBusy
	default:
		return ExitError
	}
}

// isContainRefusal reports whether err is a refusal of a contain command:
// a successor refused before anything was activated, or activated at some
// boundaries only.
func isContainRefusal(err error) bool {
	return errors.Is(err, ledger.ErrNotContained) || errors.Is(err, ledger.ErrNotReconciled) ||
		errors.Is(err, contain.ErrNotSuccessor) || errors.Is(err, contain.ErrActivationIncomplete)
}

// isMalformedInput reports whether err says that request, envelope or
// patch bytes read from an input file are not well formed.
func isMalformedInput(err error) bool {
	return errors.Is(err, kvfence.ErrMalformedRequest) || errors.Is(err, kvfence.ErrMalformedEnvelope) ||
		errors.Is(err, kvfence.ErrMalformedPatch) || errors.Is(err, receiptproof.ErrMalformed)
}

// usageError is a command line the program cannot act on: a bad flag, a
// missing required flag, an unknown command. It exits with ExitUsage.
type usageError struct {
	msg  string
	hint string
	// err, if set, is the cause, which gives --json its code.
	err error
}

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// missingFlag reports a required flag that was not given, naming its
// environment fallback if it has one.
func missingFlag(cmd, name, env string) error {
	if env != "" {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --%s is required", cmd, name),
			hint: fmt.Sprintf("pass --%s or set %s", name, env)}
	}
	return &usageError{msg: fmt.Sprintf("kvfence %s: --%s is required", cmd, name),
		hint: fmt.Sprintf("kvfence %s -h", cmd)}
}

// warningError reports something an operator must see after a command
// that did its work: verify-chain found the chain sound but the anchor file
// damaged. It is printed as "Warning:" and exits with ExitWarning.
type warningError struct {
	msg  string
	hint string
}

func (e *warningError) Error() string { return e.msg }

// deniedError reports that the fence denied a submitted request. The
// result itself has already been printed; this only sets the exit code.
type deniedError struct {
	reason kvfence.Reason
	detail string
}

func (e *deniedError) Error() string {
	if e.detail == "" {
		return fmt.Sprintf("request denied by the fence: %s", e.reason)
	}
	return fmt.Sprintf("request denied by the fence: %s (%s)", e.reason, e.detail)
}

// errPubMismatch means --pub names a key other than the receiver's.
var errPubMismatch = errors.New("the receiver's public key recorded at init differs from --pub; refusing")

// hintError attaches a "Try:" hint to an error without changing its exit
// code.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

// taggedError is an error with its own message that also matches a
// sentinel, which then gives it its exit code and its --json code, without
// repeating the sentinel's text.
type taggedError struct {
	msg string
	is  error
}

func (e *taggedError) Error() string { return e.msg }
func (e *taggedError) Unwrap() error { return e.is }

// tagged returns an error that reads msg and matches sentinel.
func tagged(sentinel error, msg string) error { return &taggedError{msg: msg, is: sentinel} }

func withHint(err error, hint string) error {
	if err == nil {
		return nil
	}
	return &hintError{err: err, hint: hint}
}

// hint returns a "Try:" suggestion for err, or "".
func hint(err error) string {
	var ue *usageError
	var he *hintError
	var we *warningError
	var ape *anchorPathError
	switch {
	case errors.As(err, &ue):
		return ue.hint
	case errors.As(err, &ape) && ape.dir != "":
		return "the path looks mistyped: check --anchor (or KVFENCE_ANCHOR); nothing was changed"
	case errors.As(err, &we):
		return we.hint
	case errors.As(err, &he):
		return he.hint
	case errors.Is(err, kvfence.ErrAnchorClusterChanged):
		return "another etcd cluster answers at the anchor's address than the one recorded at init (or given by " +
			"--anchor-etcd-cluster-id): check the addresses and DNS names in --anchor; if the anchor was moved on " +
			"purpose, have the recovery key holder run kvfence admission new and then kvfence recover"
	case errors.Is(err, kvfence.ErrAnchorClusterUnrecorded):
		return "this receiver was initialised before kvfence recorded the anchor's cluster: check, with " +
			"etcdctl endpoint status on the anchor's own members, which cluster holds the anchor, and pass its ID " +
			"as --anchor-etcd-cluster-id"
	case kvfence.IsIntegrityError(err):
		return integrityHint(err, true)
	case errors.Is(err, kvfence.ErrNotInitialized):
		return "kvfence init --db DB --anchor ANCHOR --key KEY --id RECEIVER_ID --recovery-pub RECOVERY.pub, or check --db / KVFENCE_DB"
	case errors.Is(err, kvfence.ErrAlreadyInitialized):
		return "choose another --db path; init never touches an existing file"
	case errors.Is(err, audit.ErrWriteConflict):
		return "the anchor file already holds a checkpoint (init never replaces one), or another process moved it " +
			"meanwhile; for a new receiver choose a new --anchor path, otherwise run kvfence verify-chain"
	case errors.Is(err, client.ErrUntrustedServer):
		return "the socket is not served by the receiver's uid: check --server; if the receiver runs as another " +
			"user, pass --server-uid UID (nothing was sent)"
	case errors.Is(err, kvfence.ErrOutcomeUnknown):
		return "the outcome is unknown, not refused: run the same command again; a submit is answered from its " +
			"receipt (already_applied) if it was applied"
	case errors.Is(err, kvfence.ErrStorageBusy):
		return "wait for the other process to release the database, or raise --lock-timeout; on etcd, other " +
			"writers kept conflicting: retry"
	case errors.Is(err, audit.ErrAnchorBusy):
		return "another process kept the anchor file locked for 5 s: a writer on a stalled disk, or any process " +
			"that can open the file (find it with fuser or lsof on the anchor); nothing was decided without the anchor: retry"
	case errors.Is(err, witness.ErrLocked):
		return "kvfence witness serve holds the witness database: stop it, run the command, then start it again"
	case errors.Is(err, kvfence.ErrWitnessAnswers):
		return "make N-K+1 witnesses answer (check each one's reason above: down, its --witness URL, --witness-ca) " +
			"and run the command again; nothing was written. Fewer answers could all miss the K that cosigned the " +
			"last write, so the database is not trusted without them"
	case errors.Is(err, kvfence.ErrStorageReserve):
		return "free space on the database's volume; holds and activations still commit meanwhile"
	case errors.Is(err, kvfence.ErrBadFormat):
		return "check that --db names a kvfence receiver database"
	case errors.Is(err, keyfile.ErrKeyPermissions):
		return "chmod 600 the private key file"
	case errors.Is(err, kvfence.ErrKeyMismatch):
		return "pass the receiver's own private key (--key or KVFENCE_KEY), the one given to kvfence init"
	case errors.Is(err, kvfence.ErrNoAnchor):
		return "pass --anchor and --key (or set KVFENCE_ANCHOR and KVFENCE_KEY)"
	case errors.Is(err, errPubMismatch):
		return "check --db and --pub name the same receiver"
	case errors.Is(err, kvfence.ErrUnknownScope):
		return "kvfence status, to list the scopes"
	case errors.Is(err, kvfence.ErrScopeExists):
		return "kvfence status --scope S shows it; choose another --scope for a new one"
	case errors.Is(err, kvfence.ErrTargetExists):
		return "kvfence observe target K shows it; choose another --target for a new one"
	case errors.Is(err, kvfence.ErrUnknownTarget):
		return "check the target's name: kvfence observe target K, or kvfence observe events to see the targets created"
	case errors.Is(err, kvfence.ErrNotHeld):
		return "kvfence hold --scope S --reason R, then activate"
	case errors.Is(err, kvfence.ErrEpochMismatch):
		return "kvfence status --scope S, to see the current epoch"
	case errors.Is(err, kvfence.ErrHoldIDConflict):
		return "a hold id names one hold: repeat it with the same --scope, --reason and --expect-epoch, or choose another --hold-id"
	case errors.Is(err, kvfence.ErrGrantNotActive):
		return "kvfence status --scope S shows the scope's active grant; a held or superseded grant is activated anew, never extended"
	case errors.Is(err, kvfence.ErrGrantExpired):
		return "an expired grant stays expired: hold the scope and activate a new grant"
	case errors.Is(err, kvfence.ErrTTLTooLong):
		return "ask for a shorter --ttl; kvfence scope list shows each scope's maximum grant ttl"
	case errors.Is(err, fs.ErrExist):
		return "choose another --out path; kvfence never overwrites a file"
	case errors.Is(err, etcdanchor.ErrAuthOff):
		return "enable auth on the cluster as deploy/etcd/README.md says (auth enable comes last), or drop the etcd user " +
			"and its password file if the cluster is meant to run without auth"
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return "the etcd cluster has auth enabled and no user was given: pass --etcd-user and --etcd-password-file " +
			"(KVFENCE_ETCD_USER and KVFENCE_ETCD_PASSWORD_FILE; the ledger's KVFENCE_LEDGER_ETCD_USER and " +
			"KVFENCE_LEDGER_ETCD_PASSWORD_FILE), and for an etcd anchor --anchor-etcd-user and --anchor-etcd-password-file " +
			"(KVFENCE_ANCHOR_ETCD_*, the ledger's KVFENCE_LEDGER_ANCHOR_ETCD_*)"
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return "etcd auth refused this user these keys: use the user whose role covers them " +
			"(deploy/etcd/README.md: kvfence-receiver for the receiver's prefix and anchor, kvfence-ledger for the ledger's)"
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return "the etcd user or its password is wrong: check the user and the password file it was given with"
	}
	return ""
}

// readmit is the way back for a database whose history was questioned.
const readmit = "to re-admit this database deliberately, have the recovery key holder run " +
	"kvfence admission new and then kvfence recover"

// integrityHint says what an integrity error means and what the operator
// can do next. suggestVerify adds "run kvfence verify-chain"; verify-chain
// itself leaves it out.
func integrityHint(err error, suggestVerify bool) string {
	verify := ""
	if suggestVerify {
		verify = "; run kvfence verify-chain for the evidence"
	}
	var sre *audit.SuspectedRollbackError
	var ae *audit.ArchiveError
	switch {
	case errors.As(err, &ae), errors.Is(err, audit.ErrBadArchive):
		return "an --archive file is not an archive this receiver signed for this history, or it was altered, " +
			"cut short or given out of order: keep it as evidence, and pass the receiver's archives oldest first"
	case errors.Is(err, audit.ErrBaseMismatch):
		return "the database's base (where its stored chain begins after kvfence audit archive) is not the one its " +
			"chain records, or the --archive files do not run from seq 1 to exactly that base: archived entries " +
			"were put back, the base was edited, or an archive is missing or out of order; keep the files as evidence" + verify
	case errors.Is(err, audit.ErrAnchorArchived):
		return "the anchor names an entry the database archived, which the receiver never lets happen: an old copy " +
			"of the anchor was put back; restore the current anchor from where it is administered"
	case errors.As(err, &sre):
		return "the anchor file's newest slot is damaged and the database ends exactly at the write before it, " +
			"as a copy restored to that write would: keep both files as evidence" + verify + "; " + readmit
	case errors.Is(err, audit.ErrRollbackDetected):
		return "the database is older than its anchor: a backup may have been restored over it" + verify + "; " + readmit
	case errors.Is(err, audit.ErrForkDetected):
		return "the database's history differs from the anchored one: it was rewritten, or another copy was put " +
			"in its place; keep both files as evidence" + verify + "; " + readmit
	case errors.Is(err, audit.ErrStateMismatch):
		return "the database's state records are not the state its history and signed checkpoint describe: " +
			"state was restored or edited apart from its history; keep the files as evidence" + verify + "; " + readmit
	case errors.Is(err, audit.ErrAnchorMissing):
		return "there is no anchor file at --anchor, and kvfence never recreates one: check that --anchor " +
			"(or KVFENCE_ANCHOR) names this receiver's anchor, and restore it from where it is administered; " +
			"if it is lost for good, have the recovery key holder run kvfence admission new --lost-anchor and " +
			"then kvfence recover"
	case errors.Is(err, audit.ErrReceiverMismatch):
		return "the anchor belongs to another receiver: check that --anchor and --db name the same receiver's files"
	case errors.Is(err, audit.ErrAnchorNotRegular):
		return "--anchor must name a regular file, not a symbolic link or a directory"
	case errors.Is(err, audit.ErrAnchorPermissions):
		return "the anchor file may be written by group or others, so an old copy could be put back: " +
			"chmod 600 it and check its owner" + verify
	case errors.Is(err, audit.ErrAnchorStale):
		return "the anchor is older than --max-age: it may be frozen (an old but valid copy restored with the " +
			"database); check where the anchor came from and when the receiver last wrote"
	case errors.Is(err, audit.ErrAnchorRegression):
		return "the anchor would move backwards: another copy of this database has written a newer anchor; " +
			"stop the other writer" + verify
	case errors.Is(err, audit.ErrAdmissionExpired):
		return "an admission can be applied only until it expires (kvfence admission new --valid-for, " +
			"default 1h), by this machine's clock: have the recovery key holder check the evidence again and sign a new one"
	case errors.Is(err, audit.ErrAdmissionNotYetValid):
		return "this machine's clock is behind the one the admission was signed on by more than the " +
			"allowed skew: check both clocks (NTP), then apply it again"
	case errors.Is(err, audit.ErrAdmissionReplayed):
		return "this admission was applied already, and the receiver's anchor (or its database) says so: " +
			"if the database was put back from before that recovery, it is not the state to keep; if a new recovery is " +
			"needed, have the recovery key holder sign a new admission for the database as it is now"
	case errors.Is(err, audit.ErrAdmissionV2):
		return "admissions of the previous format do not expire and are no longer accepted: have the recovery key " +
			"holder run kvfence admission new again"
	case errors.Is(err, audit.ErrAdmissionMismatch):
		return "the admission names another receiver, anchor or database head than the ones at hand (they " +
			"changed after it was signed): have the recovery key holder run kvfence admission new again"
	case errors.Is(err, audit.ErrBadAdmission):
		return "--admission is not a kvfence recovery admission, or it was altered: have the recovery key " +
			"holder run kvfence admission new again"
	case errors.Is(err, audit.ErrBadAnchor), errors.Is(err, audit.ErrBadCheckpoint):
		return "the anchor file is damaged: it holds no readable anchor. Check that --anchor names the anchor, " +
			"not another file; if it does, it was altered or its disk failed: keep it as evidence and restore it " +
			"from where it is administered" + verify
	case errors.Is(err, audit.ErrBadSignature):
		return "the anchor is not signed by this receiver's key: check that --anchor (and --pub) belong to this " +
			"receiver (compare fingerprints with ssh-keygen -l); if they do, the anchor was altered or replaced" + verify
	case errors.Is(err, audit.ErrFenceViolation):
		return "the receiver applied a mutation under a superseded grant. Either it ran without its fence checks " +
			"(a defective or modified build), or its control, grant, target or receipt records were edited in the " +
			"store under the running receiver (by a process writing the database file, or an etcd user of the " +
			"prefix) by a version that did not compare them with the records it had verified. No receiver opens " +
			"this store any more: keep it and the anchor as evidence, review the change the entry records, find " +
			"who could write the store, and set up a new receiver"
	case errors.Is(err, audit.ErrBrokenLink), errors.Is(err, audit.ErrSeqGap), errors.Is(err, audit.ErrBadEntry):
		if suggestVerify {
			verify = "; run kvfence verify-chain to find the first bad entry"
		}
		return "the database's audit chain is damaged or was edited: keep a copy as evidence" + verify +
			"; restore a copy that verifies"
	}
	return "the database or its anchor cannot be trusted" + verify
}

// anchorPathError reports that --anchor names no file at all. A missing
// anchor is still an integrity event (exit code 4: kvfence never creates
// one in its place), but the usual cause is a mistyped path, and the
// message says that plainly instead of reading like tampering.
type anchorPathError struct {
	path string
	// dir is the anchor's directory when it does not exist either.
	dir string
	err error
}

func (e *anchorPathError) Error() string {
	if e.dir != "" {
		return fmt.Sprintf("no file exists at --anchor %s, and its directory %s does not exist either (%v)", e.path, e.dir, e.err)
	}
	return fmt.Sprintf("no file exists at --anchor %s (%v)", e.path, e.err)
}

func (e *anchorPathError) Unwrap() error { return e.err }

// explainAnchorPath turns a missing anchor into an anchorPathError when
// nothing exists at path; any other error is returned unchanged.
func explainAnchorPath(err error, path string) error {
	if path == "" || !errors.Is(err, audit.ErrAnchorMissing) {
		return err
	}
	if _, serr := os.Lstat(path); !errors.Is(serr, fs.ErrNotExist) {
		return err
	}
	e := &anchorPathError{path: path, err: err}
	if dir := filepath.Dir(path); dir != "." {
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			e.dir = dir
		}
	}
	return e
}
