package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"

	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// Exit codes (DESIGN §9). exitCode is the only place that chooses one.
const (
	ExitOK        = 0 // success, including already_applied
	ExitError     = 1 // operational error
	ExitUsage     = 2 // bad flags, a missing required flag, an unknown command
	ExitDenied    = 3 // the fence denied the request
	ExitIntegrity = 4 // rollback, fork, tampering, bad signature (reserved)
	ExitBusy      = 5 // the database lock was not obtained in time
)

// exitCode maps an error returned by a command to the process exit code.
//
// Exit code 4 is reserved for integrity problems. The library reports none
// yet (rollback and fork detection arrive with the anchor); when it does,
// its integrity sentinels belong in the case below. kvfence.ErrBadFormat is
// deliberately not one of them: a file that is not a receiver database is an
// operational error, not evidence of tampering.
func exitCode(err error) int {
	var ue *usageError
	var de *deniedError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &de):
		return ExitDenied
	case errors.Is(err, kvfence.ErrStorageBusy):
		return ExitBusy
	default:
		return ExitError
	}
}

// usageError is a command line the program cannot act on: a bad flag, a
// missing required flag, an unknown command. It exits with ExitUsage.
type usageError struct {
	msg  string
	hint string
}

func (e *usageError) Error() string { return e.msg }

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

// errKeyMismatch means the private key given for a privileged command is
// not the one whose public half init recorded.
var errKeyMismatch = errors.New("the private key does not match the receiver's public key recorded at init; refusing")

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
	switch {
	case errors.As(err, &ue):
		return ue.hint
	case errors.As(err, &he):
		return he.hint
	case errors.Is(err, kvfence.ErrNotInitialized):
		return "kvfence init --db DB --id RECEIVER_ID --key KEY, or check --db / KVFENCE_DB"
	case errors.Is(err, kvfence.ErrAlreadyInitialized):
		return "choose another --db path; init never touches an existing file"
	case errors.Is(err, kvfence.ErrStorageBusy):
		return "wait for the other process to release the database, or raise --lock-timeout"
	case errors.Is(err, kvfence.ErrBadFormat):
		return "check that --db names a kvfence receiver database"
	case errors.Is(err, keyfile.ErrKeyPermissions):
		return "chmod 600 the private key file"
	case errors.Is(err, errKeyMismatch):
		return "pass the receiver's own private key (--key or KVFENCE_KEY), the one given to kvfence init"
	case errors.Is(err, errPubMismatch):
		return "check --db and --pub name the same receiver"
	case errors.Is(err, kvfence.ErrUnknownScope):
		return "kvfence status, to list the scopes"
	case errors.Is(err, kvfence.ErrNotHeld):
		return "kvfence hold --scope S --reason R, then activate"
	case errors.Is(err, kvfence.ErrEpochMismatch):
		return "kvfence status --scope S, to see the current epoch"
	case errors.Is(err, fs.ErrExist):
		return "choose another --out path; kvfence never overwrites a file"
	}
	return ""
}
