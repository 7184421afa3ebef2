package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// AdmissionNewCommand is the recovery key holder's half of a recovery: it
// reads a questioned database's head and its anchor, shows them, and signs
// an admission for exactly those with the separately held recovery key.
// It changes neither the database nor the anchor; kvfence recover applies
// the admission.
type AdmissionNewCommand struct{ m *Main }

// admissionJSON is the --json shape of admission new. Hashes are lowercase
// hex.
type admissionJSON struct {
	Out            string  `json:"out"`
	Receiver       string  `json:"receiver"`
	AnchorSeq      uint64  `json:"anchor_seq"`
	AnchorHead     string  `json:"anchor_head"`
	HeadSeq        uint64  `json:"head_seq"`
	Head           string  `json:"head"`
	EpochHighWater uint64  `json:"epoch_high_water"`
	Reason         string  `json:"reason"`
	At             *string `json:"at"`
	RecoveryKey    string  `json:"recovery_key"`
	// AnchorDamage describes a damaged slot of the anchor file, or is
	// null; recover overwrites it.
	AnchorDamage *anchorDamageJSON `json:"anchor_damage"`
}

// Run runs the command.
func (c *AdmissionNewCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("admission new")
	cf := commonFlags{name: "admission new"}
	cf.register(fs, withDB|withoutLock|withoutPub)
	recoveryKey := fs.String("recovery-key", "", "")
	reason := fs.String("reason", "", "")
	out := fs.String("out", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if cf.db == "" {
		return missingFlag(cf.name, "db", envDB)
	}
	if cf.anchor == "" {
		return missingFlag(cf.name, "anchor", envAnchor)
	}
	if err := require(cf.name, [2]string{"recovery-key", *recoveryKey}, [2]string{"reason", *reason},
		[2]string{"out", *out}); err != nil {
		return err
	}
	if err := cf.checkAnchorPath(); err != nil {
		return err
	}
	if len(*reason) > audit.MaxReasonLen || !utf8.ValidString(*reason) {
		return &usageError{msg: fmt.Sprintf("kvfence admission new: --reason must be UTF-8 text of at most %d bytes",
			audit.MaxReasonLen), hint: "kvfence admission new -h"}
	}
	priv, err := loadPrivate(*recoveryKey)
	if err != nil {
		return err
	}
	if err := checkRecoveryKey(cf.db, ed25519PublicOf(priv)); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	q, err := kvfence.Inspect(cf.db, cf.fileAnchor())
	if err != nil {
		return err
	}
	at := time.Now().UTC()
	sa, err := audit.SignAdmission(priv, audit.Admission{Receiver: q.Receiver, SupersededAnchor: q.Anchor,
		AdmittedHead: q.Head, At: at.UnixNano(), Reason: *reason})
	if err != nil {
		return err
	}
	b, err := sa.Marshal()
	if err != nil {
		return err
	}
	if err := writeNew(*out, b, 0o600); err != nil {
		return fmt.Errorf("write --out: %w", err)
	}
	res := admissionJSON{Out: *out, Receiver: q.Receiver, AnchorSeq: q.Anchor.Seq, AnchorHead: headHex(q.Anchor),
		HeadSeq: q.Head.Seq, Head: headHex(q.Head), EpochHighWater: q.EpochHighWater, Reason: *reason,
		At: jsonTime(at), RecoveryKey: sa.Key.String(), AnchorDamage: anchorDamageOf(q.AnchorDamage)}
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "receiver\t%s\n", res.Receiver)
	fmt.Fprintf(tw, "anchor (superseded)\t%s\n", headText(q.Anchor))
	fmt.Fprintf(tw, "database head (admitted)\t%s\n", headText(q.Head))
	fmt.Fprintf(tw, "database vs anchor\t%s\n", compareHeads(q.Head, q.Anchor, q.AnchorDamage))
	if q.AnchorDamage != nil {
		fmt.Fprintf(tw, "anchor damage\t%v\n", q.AnchorDamage)
	}
	fmt.Fprintf(tw, "epoch high-water\t%d\n", res.EpochHighWater)
	fmt.Fprintf(tw, "reason\t%s\n", res.Reason)
	fmt.Fprintf(tw, "signed at\t%s\n", humanTime(at))
	fmt.Fprintf(tw, "recovery key\t%s\n", res.RecoveryKey)
	fmt.Fprintf(tw, "admission\t%s (mode 0600)\n", res.Out)
	return tw.Flush()
}

// checkRecoveryKey refuses, before anything is signed, a recovery key that
// the receiver at db would not accept: one that is not the recovery key
// recorded at init, or a receiver initialised without one. The database is
// only asked, not trusted: recover checks the admission again against the
// operator's copy of the recovery public key.
func checkRecoveryKey(db string, pub ed25519.PublicKey) error {
	r, err := kvfence.Open(db, &kvfence.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer r.Close()
	switch rk := r.RecoveryKey(); {
	case rk == nil:
		return withHint(errors.New("kvfence admission new: this receiver was initialised without a recovery key, "+
			"so no admission can re-admit it"),
			"a receiver needs kvfence init --recovery-pub to be recoverable; restore a database that verifies instead")
	case r.PublicKey().Equal(pub):
		return withHint(errors.New("kvfence admission new: --recovery-key is the receiver's own key, not its recovery key"),
			"sign with the separately held recovery key whose public half was given to kvfence init --recovery-pub")
	case !rk.Equal(pub):
		return withHint(fmt.Errorf("kvfence admission new: --recovery-key (%v) is not the recovery key recorded at init (%v)",
			audit.KeyFingerprint(pub), audit.KeyFingerprint(rk)),
			"sign with the recovery key whose public half was given to kvfence init --recovery-pub")
	}
	return nil
}

// compareHeads describes how a database head stands to its anchor, as far
// as the two positions tell.
func compareHeads(head, anchor audit.Head, damage *audit.SlotDamage) string {
	switch {
	case head.Seq < anchor.Seq:
		return "the database is older than its anchor (rollback)"
	case head == anchor && damage != nil && damage.Next():
		return "the database ends at the anchor, but the anchor file's newest slot, damaged, was written after it " +
			"(suspected rollback)"
	case head == anchor:
		return "the database and its anchor agree"
	case head.Seq == anchor.Seq:
		return "the database has another entry at the anchored seq (fork)"
	default:
		return "the database is ahead of its anchor (kvfence verify-chain compares their history)"
	}
}

// Usage prints the command's help.
func (c *AdmissionNewCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence admission new --recovery-key FILE --db FILE --anchor FILE --reason R
                             --out ADM [--json]

For the holder of the recovery key. Reads the receiver's database head and
its anchor without comparing or changing them, prints both, and signs an
admission for exactly this receiver, this anchor and this database head,
written to ADM (mode 0600; never overwritten). The admission is useless
against any other state: if the database or the anchor changes before
"kvfence recover" applies it, recover refuses it (exit code 4).

Sign only after you have seen the evidence (kvfence verify-chain) and
decided that this copy of the database is the one to keep. Recovery holds
every scope at an epoch above any the anchor vouches for, so no grant
minted before it can be used again.

Arguments:

	--recovery-key FILE
	    The recovery private key (OpenSSH Ed25519, not readable by group
	    or others): the one whose public half was given to
	    kvfence init --recovery-pub. Never the receiver's key.
	--reason R
	    Why this database is admitted; recorded in the admission and in
	    the audit chain (at most 1024 bytes).
	--out ADM
	    Where to write the signed admission.
	--db FILE
	    Receiver database. Defaults to $KVFENCE_DB.
	--anchor FILE
	    The receiver's anchor file. Defaults to $KVFENCE_ANCHOR.
`+usageJSON)
}
