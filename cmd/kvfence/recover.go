package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// RecoverCommand applies a recovery admission: it re-admits a database
// whose history was questioned (a rollback or fork), holds every scope at
// an epoch above any the anchor vouches for, clears every active grant,
// and supersedes the anchor.
type RecoverCommand struct{ m *Main }

// recoverJSON is the --json shape of recover.
type recoverJSON struct {
	AuditSeq   uint64          `json:"audit_seq"`
	Scopes     []holdScopeJSON `json:"scopes"`
	AnchorSeq  uint64          `json:"anchor_seq"`
	AnchorHead string          `json:"anchor_head"`
}

// Run runs the command.
func (c *RecoverCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("recover")
	cf := commonFlags{name: "recover"}
	cf.register(fs, withDB|withKey|withoutPub)
	admission := fs.String("admission", "", "")
	recoveryPub := fs.String("recovery-pub", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := cf.requireWriter(); err != nil {
		return err
	}
	if err := require(cf.name, [2]string{"admission", *admission}, [2]string{"recovery-pub", *recoveryPub}); err != nil {
		return err
	}
	adm, err := c.m.readInput(*admission)
	if err != nil {
		return fmt.Errorf("read --admission: %w", err)
	}
	rpub, err := keyfile.LoadPublic(*recoveryPub)
	if err != nil {
		return err
	}
	// Check the signature here first, so that a wrong key is reported as
	// such; Recover checks it again, with everything else.
	sa, err := audit.ParseSignedAdmission(adm)
	if err != nil {
		return fmt.Errorf("kvfence recover: --admission: %w", err)
	}
	if err := sa.Verify(rpub); err != nil {
		return withHint(fmt.Errorf("kvfence recover: --admission: %w", err),
			"only an admission signed by the recovery key recorded at init is accepted: check the key "+
				"fingerprints (ssh-keygen -l -f RECOVERY.pub), and have the recovery key holder sign a new one "+
				"with kvfence admission new")
	}
	priv, err := loadPrivate(cf.key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res, err := kvfence.Recover(cf.db, adm, kvfence.RecoverOptions{Key: priv, Anchor: cf.fileAnchor(),
		RecoveryKey: rpub, LockTimeout: cf.lockTimeout})
	if errors.Is(err, audit.ErrBadSignature) {
		// The admission verified above: either --recovery-pub is not the
		// key recorded at init, or the anchor is not the receiver's.
		return withHint(err, "check that --recovery-pub is the key given to kvfence init --recovery-pub and that "+
			"--anchor is this receiver's anchor (compare fingerprints with ssh-keygen -l)")
	}
	if err != nil {
		return err
	}
	out := recoverJSON{AuditSeq: res.AuditSeq, Scopes: []holdScopeJSON{}, AnchorSeq: res.Anchor.Seq,
		AnchorHead: headHex(res.Anchor)}
	for _, s := range res.Scopes {
		out.Scopes = append(out.Scopes, holdScopeJSON{Scope: s.Scope, PreviousEpoch: s.PreviousEpoch, Epoch: s.Epoch, Mode: "held"})
	}
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	if len(out.Scopes) == 0 {
		fmt.Fprintln(tw, "no scopes")
	} else {
		fmt.Fprintln(tw, "SCOPE\tPREVIOUS EPOCH\tEPOCH\tMODE")
		for _, s := range out.Scopes {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", s.Scope, s.PreviousEpoch, s.Epoch, s.Mode)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "audit seq\t%d\n", out.AuditSeq)
	fmt.Fprintf(tw, "new anchor\t%s\n", headText(res.Anchor))
	return tw.Flush()
}

// Usage prints the command's help.
func (c *RecoverCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence recover --admission ADM --recovery-pub FILE --db FILE --anchor FILE
                       --key FILE [--lock-timeout DURATION] [--json]

Re-admits a database whose history was questioned (kvfence verify-chain
reports rollback_detected or fork_detected), on the strength of an
admission signed with the separately held recovery key (kvfence admission
new) for exactly this receiver, this anchor and this database head. In one
transaction it records a "recovered" audit entry, sets every scope's epoch
above any epoch the anchor vouches for, holds every scope and clears every
active grant; then it replaces the anchor. No grant minted before the
recovery can be used again: activate new grants afterwards.

Prints each scope's previous and new epoch, and the new anchor. With
--json: {"audit_seq","scopes":[{"scope","previous_epoch","epoch","mode"}],
"anchor_seq","anchor_head"}.

Exit codes: 0 recovered; 4 the admission does not verify under
--recovery-pub, --recovery-pub is not the recovery key recorded at init, or
the admission does not name the current receiver, anchor and database head
(nothing was changed); 1 other errors.

Arguments:

	--admission ADM
	    The signed admission ("-" for stdin).
	--recovery-pub FILE
	    Your copy of the recovery public key (an ssh-ed25519 line). It must
	    be the one given to kvfence init --recovery-pub; the database's own
	    record of it is not enough.
`+usageKey+`	--db FILE
	    Receiver database. Defaults to $KVFENCE_DB.
	--anchor FILE
	    The receiver's anchor file, to be superseded. Defaults to
	    $KVFENCE_ANCHOR.
`+usageLock+usageJSON)
}
