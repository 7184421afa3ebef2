package main

import (
	"context"
	"errors"
	"io/fs"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/audit/etcdanchor"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/contain"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
	"github.com/kvfence/kvfence/receiptproof"
)

// errorJSON is what a failed command writes to stdout with --json:
// {"error":{"code","message","hint"}}, hint omitted when there is none.
// The code is stable (errorCodes); the message and hint are for people.
type errorJSON struct {
	Error errorBodyJSON `json:"error"`
}

// errorBodyJSON is the error itself.
type errorBodyJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
}

// errorCodeEntry gives the errors that match err their --json code.
type errorCodeEntry struct {
	code string
	err  error
}

// integrityCodes are the integrity errors, coded as verify-chain names the
// same problems (audit.Problem), so that one word means one thing in both
// outputs.
var integrityCodes = []errorCodeEntry{
	{string(audit.ProblemAnchorMissing), audit.ErrAnchorMissing},
	{string(audit.ProblemAnchorDamaged), audit.ErrBadAnchor},
	{string(audit.ProblemAnchorDamaged), audit.ErrBadCheckpoint},
	{string(audit.ProblemBadSignature), audit.ErrBadSignature},
	{string(audit.ProblemReceiverMismatch), audit.ErrReceiverMismatch},
	{string(audit.ProblemRollbackDetected), audit.ErrRollbackDetected},
	{string(audit.ProblemForkDetected), audit.ErrForkDetected},
	{string(audit.ProblemBrokenLink), audit.ErrBrokenLink},
	{string(audit.ProblemSeqGap), audit.ErrSeqGap},
	{string(audit.ProblemBadEntry), audit.ErrBadEntry},
	{string(audit.ProblemFenceViolation), audit.ErrFenceViolation},
	{string(audit.ProblemAnchorStale), audit.ErrAnchorStale},
	{string(audit.ProblemStateMismatch), audit.ErrStateMismatch},
	{string(audit.ProblemBadArchive), audit.ErrBadArchive},
	{string(audit.ProblemBaseMismatch), audit.ErrBaseMismatch},
	{string(audit.ProblemTreeMismatch), audit.ErrTreeMismatch},
	{"anchor_not_regular", audit.ErrAnchorNotRegular},
	{"anchor_permissions", audit.ErrAnchorPermissions},
	{"anchor_regression", audit.ErrAnchorRegression},
	{"bad_admission", audit.ErrBadAdmission},
	{"admission_mismatch", audit.ErrAdmissionMismatch},
	{"admission_expired", audit.ErrAdmissionExpired},
	{"admission_not_yet_valid", audit.ErrAdmissionNotYetValid},
	{"admission_replayed", audit.ErrAdmissionReplayed},
	{api.CodeIntegrity, client.ErrIntegrity},
	{"containment_mismatch", contain.ErrVerifyMismatch},
	// After the audit codes: a backup whose database fails for one of
	// those reasons is coded by the reason.
	{"backup_mismatch", backup.ErrMismatch},
	{"backup_altered", backup.ErrSumMismatch},
	{"receipt_unproven", receiptproof.ErrUnproven},
}

// cliCodes are the codes of errors that internal/api does not define,
// because they never cross the served API: files, keys, the ledger, the
// command line. A code that api.Sentinels defines is never redefined here.
var cliCodes = []errorCodeEntry{
	{"not_reached", errNotReached},
	// Too few witnesses answered: the database's freshness cannot be
	// established. An availability failure (exit 1, as an unreachable
	// etcd is), not evidence of tampering.
	{"witnesses_unavailable", kvfence.ErrWitnessAnswers},
	{"malformed_receipt_proof", receiptproof.ErrMalformed},
	{"not_initialized", kvfence.ErrNotInitialized},
	{"already_initialized", kvfence.ErrAlreadyInitialized},
	{"bad_format", kvfence.ErrBadFormat},
	{"key_mismatch", kvfence.ErrKeyMismatch},
	{"no_anchor", kvfence.ErrNoAnchor},
	{"anchor_present", kvfence.ErrAnchorPresent},
	{"archive_conflict", kvfence.ErrArchiveConflict},
	{"recovery_key_is_receiver_key", kvfence.ErrRecoveryKeyIsReceiverKey},
	{"anchor_not_apart", kvfence.ErrAnchorNotApart},
	{"anchor_cluster_changed", kvfence.ErrAnchorClusterChanged},
	{"anchor_cluster_changed", etcdanchor.ErrClusterMismatch},
	{"etcd_auth_off", etcdanchor.ErrAuthOff},
	{"anchor_cluster_unrecorded", kvfence.ErrAnchorClusterUnrecorded},
	{"malformed_envelope", kvfence.ErrMalformedEnvelope},
	{"pub_mismatch", errPubMismatch},
	{"key_permissions", keyfile.ErrKeyPermissions},
	{"key_not_regular", keyfile.ErrSymlink},
	{"key_not_regular", keyfile.ErrNotRegularFile},
	{"key_passphrase_protected", keyfile.ErrPassphraseProtected},
	{"bad_key", keyfile.ErrKeyTooLarge},
	{"bad_key", keyfile.ErrMalformedKey},
	{"bad_key", keyfile.ErrUnsupportedKeyType},
	{"bad_key", keyfile.ErrInvalidComment},
	{"bad_key", keyfile.ErrInvalidPrivateKey},
	{"bad_key", audit.ErrBadKey},
	{"not_initialized", ledger.ErrNotInitialized},
	{"already_initialized", ledger.ErrAlreadyInitialized},
	{"storage_busy", ledger.ErrStorageBusy},
	{"anchor_busy", audit.ErrAnchorBusy},
	{"bad_format", ledger.ErrBadFormat},
	{"no_anchor", ledger.ErrNoAnchor},
	{"key_mismatch", ledger.ErrKeyMismatch},
	{"read_only", ledger.ErrReadOnly},
	{"not_acknowledged", ledger.ErrNotAcknowledged},
	{"invalid_argument", ledger.ErrInvalidArgument},
	{"already_approved", ledger.ErrAlreadyApproved},
	{"not_approved", ledger.ErrNotApproved},
	{"approval_expired", ledger.ErrApprovalExpired},
	{"claimed", ledger.ErrClaimed},
	{"settled", ledger.ErrSettled},
	{"no_claim", ledger.ErrNoClaim},
	{"not_owner", ledger.ErrNotOwner},
	{"superseded", ledger.ErrSuperseded},
	{"bad_transition", ledger.ErrBadTransition},
	{"not_found", ledger.ErrNotFound},
	{"unknown_receiver", ledger.ErrUnknownReceiver},
	{"receiver_exists", ledger.ErrReceiverExists},
	{"receiver_key_pinned", ledger.ErrReceiverKeyPinned},
	{"no_boundaries", ledger.ErrNoBoundaries},
	{"no_containment", ledger.ErrNoContainment},
	{"not_contained", ledger.ErrNotContained},
	{"not_reconciled", ledger.ErrNotReconciled},
	{"unverified_acknowledgment", ledger.ErrUnverifiedAcknowledgment},
	{"acknowledgment_conflict", ledger.ErrAcknowledgmentConflict},
	{"already_acknowledged", ledger.ErrAlreadyAcknowledged},
	{"containment_tampered", ledger.ErrContainmentTampered},
	{"backup_truncated", backup.ErrTruncated},
	{"backup_too_large", backup.ErrTooLarge},
	{"database_in_use", backup.ErrInUse},
	{"backup_bad_format", backup.ErrBadFormat},
	{"backup_bad_format", backup.ErrTrailingData},
	// contain: a successor refused or activated at some boundaries only.
	{"not_successor", contain.ErrNotSuccessor},
	{"activation_incomplete", contain.ErrActivationIncomplete},
	{api.CodeUnauthenticated, client.ErrUnauthenticated},
	{api.CodeForbidden, client.ErrForbidden},
	{api.CodeTooLarge, client.ErrTooLarge},
	{api.CodeBadRequest, client.ErrBadRequest},
	{api.CodeInternal, client.ErrServer},
	{"protocol", client.ErrProtocol},
	{"untrusted_server", client.ErrUntrustedServer},
	{api.CodeCanceled, context.Canceled},
	{"deadline_exceeded", context.DeadlineExceeded},
	{"file_exists", fs.ErrExist},
	{"file_not_found", fs.ErrNotExist},
	{"permission_denied", fs.ErrPermission},
}

// Codes of the classes of error that no entry above names, by exit code.
const (
	codeUsage     = "usage"
	codeDenied    = "denied"
	codeRefused   = "refused"
	codeWarning   = "anchor_slot_damaged"
	codePartial   = "partial_containment"
	codeError     = "error"
	codeIntegrity = api.CodeIntegrity
)

// errorCode returns the stable --json code of err. The order matters
// where one error matches several entries: a change that committed but
// was not acknowledged comes first, as in api.Sentinels, since whatever
// caused it the caller must check the state before repeating the call;
// then an anchor write conflict (which may wrap a missing anchor); then
// the integrity problems, a malformed patch (which a malformed request
// wraps), kvfence's sentinels as the served API codes them, the rest, and
// last the class of the error.
func errorCode(err error) string {
	var ue *usageError
	var de *deniedError
	var we *warningError
	var pe *partialError
	switch {
	case errors.Is(err, kvfence.ErrNotAcknowledged):
		return "not_acknowledged"
	case errors.Is(err, audit.ErrWriteConflict):
		return "anchor_write_conflict"
	}
	for _, e := range integrityCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	if errors.Is(err, kvfence.ErrMalformedPatch) {
		return "malformed_patch"
	}
	if s, ok := api.SentinelOf(err); ok {
		return s.Code
	}
	for _, e := range cliCodes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	switch {
	case errors.As(err, &we):
		return codeWarning
	case errors.As(err, &pe):
		return codePartial
	case errors.As(err, &ue):
		return codeUsage
	case errors.As(err, &de):
		return codeDenied
	}
	switch exitCode(err) {
	case ExitIntegrity:
		return codeIntegrity
	case ExitDenied:
		return codeRefused
	}
	return codeError
}

// allErrorCodes returns every code errorCode can return, each once, in
// table order: the list README documents.
func allErrorCodes() []string {
	var codes []string
	seen := map[string]bool{}
	add := func(c string) {
		if !seen[c] {
			seen[c] = true
			codes = append(codes, c)
		}
	}
	add("not_acknowledged")
	add("anchor_write_conflict")
	for _, e := range integrityCodes {
		add(e.code)
	}
	add("malformed_patch")
	for _, s := range api.Sentinels {
		add(s.Code)
	}
	for _, e := range cliCodes {
		add(e.code)
	}
	for _, c := range []string{codeWarning, codePartial, codeUsage, codeDenied, codeIntegrity, codeRefused, codeError} {
		add(c)
	}
	return codes
}
