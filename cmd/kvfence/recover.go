package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// RecoverCommand applies a recovery admission of either kind: it
// re-admits a database whose history was questioned (a rollback or fork)
// and supersedes its anchor, or re-anchors a database whose anchor is
// missing and creates a new one. Either way it holds every scope at a new
// epoch, clears every active grant and revokes every grant record.
type RecoverCommand struct{ m *Main }

// recoverJSON is the --json shape of recover.
type recoverJSON struct {
	AuditSeq      uint64          `json:"audit_seq"`
	LostAnchor    bool            `json:"lost_anchor"`
	Scopes        []holdScopeJSON `json:"scopes"`
	GrantsRevoked int             `json:"grants_revoked"`
	AnchorSeq     uint64          `json:"anchor_seq"`
	AnchorHead    string          `json:"anchor_head"`
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
	anchor, err := cf.anchorStore()
	if err != nil {
		return err
	}
	ropts := kvfence.RecoverOptions{Key: priv, Anchor: anchor, RecoveryKey: rpub, LockTimeout: cf.lockTimeout, Now: c.m.Now,
		AnchorClusterID: cf.anchorEtcd.clusterID}
	ropts.WitnessFaults = cf.witness.faults
	if ropts.Witnesses, ropts.WitnessQuorum, err = cf.witness.load(cf.name); err != nil {
		return err
	}
	var res kvfence.RecoverResult
	if cf.etcd.on() {
		e, eerr := cf.openEngine()
		if eerr != nil {
			return eerr
		}
		res, err = kvfence.RecoverEngine(e, adm, ropts) // closes e
	} else {
		res, err = kvfence.Recover(cf.db, adm, ropts)
	}
	switch {
	case errors.Is(err, kvfence.ErrAnchorPresent):
		return withHint(err, "the anchor at --anchor loads, so it is not lost: if the database disagrees with it, "+
			"have the recovery key holder sign an ordinary admission (kvfence admission new without --lost-anchor); "+
			"if the file does not belong here, move it aside and keep it as evidence")
	case sa.LostAnchor && errors.Is(err, audit.ErrBadAnchor):
		return withHint(err, "recover never writes over or moves a damaged anchor file, because it is evidence: "+
			"move it aside (for example to ANCHOR.damaged), then run kvfence recover again; it creates a new anchor file")
	case sa.LostAnchor && errors.Is(err, audit.ErrAdmissionMismatch):
		return withHint(err, "the admission names another receiver or database head than this one (it was used "+
			"already, or the database changed after it was signed): have the recovery key holder run "+
			"kvfence admission new --lost-anchor again")
	case !sa.LostAnchor && errors.Is(err, audit.ErrAnchorMissing):
		return withHint(err, "this admission supersedes an anchor, and there is none at --anchor: check --anchor; "+
			"if the anchor is lost, have the recovery key holder sign kvfence admission new --lost-anchor")
	}
	if errors.Is(err, audit.ErrBadSignature) {
		// The admission verified above: either --recovery-pub is not the
		// key recorded at init, or the anchor is not the receiver's.
		return withHint(err, "check that --recovery-pub is the key given to kvfence init --recovery-pub and that "+
			"--anchor is this receiver's anchor (compare fingerprints with ssh-keygen -l)")
	}
	if err != nil {
		return err
	}
	out := recoverJSON{AuditSeq: res.AuditSeq, LostAnchor: res.LostAnchor, Scopes: []holdScopeJSON{},
		GrantsRevoked: res.GrantsRevoked, AnchorSeq: res.Anchor.Seq, AnchorHead: headHex(res.Anchor)}
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
	fmt.Fprintf(tw, "grants revoked\t%d\n", out.GrantsRevoked)
	fmt.Fprintf(tw, "audit seq\t%d\n", out.AuditSeq)
	if out.LostAnchor {
		fmt.Fprintf(tw, "new anchor\t%s (created: the anchor was lost)\n", headText(res.Anchor))
	} else {
		fmt.Fprintf(tw, "new anchor\t%s\n", headText(res.Anchor))
	}
	return tw.Flush()
}

// Usage prints the command's help.
func (c *RecoverCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence recover --admission ADM --recovery-pub FILE --db FILE --anchor FILE
                       --key FILE [--lock-timeout DURATION] [--witness NAME=URL
                       --witness-pub NAME=FILE ... --witness-quorum K] [--json]

Applies an admission signed with the separately held recovery key
(kvfence admission new), of either kind:

  - An ordinary admission re-admits a database whose history was
    questioned (kvfence verify-chain reports rollback_detected or
    fork_detected); it must name this receiver, this anchor and this
    database head, and the anchor is then replaced.
  - A lost-anchor admission (kvfence admission new --lost-anchor)
    re-anchors a database whose anchor is missing; it must name this
    receiver and this database head, and a new anchor file is created at
    --anchor. It is refused while --anchor holds an anchor that loads.
    A damaged anchor file is refused too, and left as it is: move it
    aside, keeping it as evidence, then run recover again.

In one transaction recover records a "recovered" (or "reanchored") audit
entry naming the admission, sets every scope's epoch above any epoch the
anchor vouches for (or the admission's epoch floor) and above the
database's own, holds every scope, clears every active grant and marks
every grant record revoked; then it writes the anchor. No grant minted
before the recovery can be used again: activate new grants afterwards.
An admission works once: afterwards the database head has moved past the
one it names, and the new anchor, and every later one, names the
admission as applied. It also expires (kvfence admission new
--valid-for, default 1h): after that it is refused even where the anchor
was deleted.

Prints each scope's previous and new epoch, the number of grants revoked,
and the new anchor. With --json: {"audit_seq","lost_anchor",
"scopes":[{"scope","previous_epoch","epoch","mode"}],"grants_revoked",
"anchor_seq","anchor_head"}.

Exit codes: 0 recovered; 4 the admission does not verify under
--recovery-pub, --recovery-pub is not the recovery key recorded at init,
the admission does not name the current receiver, anchor and database
head, the anchor is not in the state the admission is for, the admission
has expired (or was signed more than 5 minutes ahead of this machine's
clock), or the anchor or the database records it, or a later one, as
already applied (nothing was changed); 1 other errors. If only the final anchor write fails, the error
says so: the database has moved, and a lost-anchor recovery then needs a
new admission for the new head.

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
	    The receiver's anchor file: superseded, or created after a
	    lost-anchor admission. Defaults to $KVFENCE_ANCHOR.
`+usageEtcdSee+usageLock+usageWitness+`	    With witnesses, recover needs N-K+1 of them to answer and refuses
	    an admission that does not name each one that answered at exactly
	    the checkpoint it holds (admission new --witnessed); after it, the
	    witnesses accept the recovered chain on the first write.
`+usageJSON)
}
