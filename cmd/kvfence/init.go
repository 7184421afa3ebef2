package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/clusterid"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// InitCommand creates a receiver database, records the public half of the
// receiver's key (which every writer is later checked against) and writes
// the first signed checkpoint to a new anchor file.
type InitCommand struct{ m *Main }

// initJSON is the --json shape of init.
type initJSON struct {
	Receiver    string  `json:"receiver"`
	DB          string  `json:"db"`
	Anchor      string  `json:"anchor"`
	AnchorSeq   uint64  `json:"anchor_seq"`
	AnchorHead  string  `json:"anchor_head"`
	PublicKey   string  `json:"public_key"`
	RecoveryKey *string `json:"recovery_key"`
	// Fingerprint and RecoveryFingerprint are the keys' SHA256
	// fingerprints, as the anchor's checkpoints and kvfence's messages
	// name them (RecoveryFingerprint is null without a recovery key).
	Fingerprint         string  `json:"fingerprint"`
	RecoveryFingerprint *string `json:"recovery_fingerprint"`
	// AnchorClusterID is the etcd anchor's cluster ID that init recorded
	// (null for an anchor file).
	AnchorClusterID *string `json:"anchor_cluster_id"`
}

// Run runs the command.
func (c *InitCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("init")
	cf := commonFlags{name: "init"}
	cf.register(fs, withDB|withKey|withoutLock|withoutWitnesses)
	id := fs.String("id", "", "")
	recoveryPub := fs.String("recovery-pub", "", "")
	noRecovery := fs.Bool("no-recovery-key", false, "")
	maxTTL := fs.Duration("max-ttl", kvfence.DefaultMaxGrantTTL, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := cf.requireWriter(); err != nil {
		return err
	}
	if err := require("init", [2]string{"id", *id}); err != nil {
		return err
	}
	if *maxTTL <= 0 {
		return &usageError{msg: "kvfence init: --max-ttl must be positive", hint: "kvfence init -h"}
	}
	// A receiver without a recovery key can never be re-admitted after a
	// restore or a lost anchor: that is chosen explicitly, never by
	// leaving a flag out.
	switch {
	case *recoveryPub != "" && *noRecovery:
		return &usageError{msg: "kvfence init: --recovery-pub and --no-recovery-key exclude each other", hint: "give one of them"}
	case *recoveryPub == "" && !*noRecovery:
		return &usageError{msg: "kvfence init: --recovery-pub FILE is required (or --no-recovery-key, to give up recovery)",
			hint: "kvfence keygen --out recovery.key on a machine apart from the receiver, keep recovery.key there, " +
				"and pass --recovery-pub recovery.key.pub"}
	}
	priv, err := loadPrivate(cf.key)
	if err != nil {
		return err
	}
	pub := ed25519PublicOf(priv)
	if cf.pub != "" {
		want, err := keyfile.LoadPublic(cf.pub)
		if err != nil {
			return err
		}
		if !want.Equal(pub) {
			return withHint(errors.New("--pub is not the public half of --key; refusing"),
				"pass the .pub file written next to the private key")
		}
	}
	var recovery ed25519.PublicKey
	if *recoveryPub != "" {
		if recovery, err = keyfile.LoadPublic(*recoveryPub); err != nil {
			return err
		}
		// The recovery key exists to overrule the receiver key; the same
		// key in both roles would make that meaningless.
		if recovery.Equal(pub) {
			return withHint(tagged(kvfence.ErrRecoveryKeyIsReceiverKey, "--recovery-pub is the receiver's own key; the recovery key must be a separately held key"),
				"kvfence keygen --out recovery.key, and keep it away from the receiver")
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if *noRecovery {
		c.m.warn(noRecoveryWarning)
	}
	anchor, err := cf.anchorStore()
	if err != nil {
		return err
	}
	iopts := &kvfence.InitOptions{ReceiverID: *id, Key: priv, Anchor: anchor, RecoveryKey: recovery, MaxGrantTTL: *maxTTL}
	if cf.etcd.on() {
		e, err := cf.openEngine()
		if err != nil {
			return err
		}
		err = kvfence.InitEngine(e, iopts)
		if cerr := e.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	} else if err := kvfence.Init(cf.db, iopts); err != nil {
		return err
	}
	for _, w := range separationWarnings(cf.anchorSeparation()) {
		c.m.warn(w)
	}
	// Read the anchor back, so that the operator sees what it vouches for
	// and can compare it with verify-chain later.
	sc, err := anchor.Load()
	if err != nil {
		return fmt.Errorf("kvfence init: the receiver was created, but its anchor cannot be read back: %w", err)
	}
	head := audit.Head{Seq: sc.Seq, Hash: sc.Head}
	res := initJSON{Receiver: *id, DB: cf.storeName(), Anchor: cf.anchor, AnchorSeq: head.Seq, AnchorHead: headHex(head),
		PublicKey: publicLine(pub), Fingerprint: audit.KeyFingerprint(pub).String()}
	if recovery != nil {
		s, f := publicLine(recovery), audit.KeyFingerprint(recovery).String()
		res.RecoveryKey, res.RecoveryFingerprint = &s, &f
	}
	if st := cf.anchorEtcd.store; st != nil {
		// The receiver recorded the cluster it was given; the anchor store
		// is held to it, so this names the same one.
		id, err := st.ClusterID(ctx)
		if err != nil {
			return fmt.Errorf("kvfence init: the receiver was created, but its anchor's cluster cannot be asked again: %w", err)
		}
		s := clusterid.Format(id)
		res.AnchorClusterID = &s
	}
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "receiver\t%s\n", res.Receiver)
	fmt.Fprintf(tw, "db\t%s\n", res.DB)
	fmt.Fprintf(tw, "anchor\t%s\n", res.Anchor)
	fmt.Fprintf(tw, "anchored head\t%s\n", headText(head))
	if res.AnchorClusterID != nil {
		fmt.Fprintf(tw, "anchor cluster\t%s\n", *res.AnchorClusterID)
	}
	fmt.Fprintf(tw, "public key\t%s\n", res.PublicKey)
	fmt.Fprintf(tw, "fingerprint\t%s\n", res.Fingerprint)
	if res.RecoveryKey != nil {
		fmt.Fprintf(tw, "recovery key\t%s\n", *res.RecoveryKey)
		fmt.Fprintf(tw, "recovery fingerprint\t%s\n", *res.RecoveryFingerprint)
	}
	return tw.Flush()
}

// noRecoveryWarning says what --no-recovery-key gives up.
const noRecoveryWarning = "--no-recovery-key: this receiver will have no recovery key. After a restored or rewritten " +
	"database (rollback, fork) or a lost anchor, no admission can re-admit it: kvfence recover will refuse, and the " +
	"receiver stays unusable for good; the only way on is a new receiver (kvfence init) with new grants."

// publicLine formats pub as an ssh-ed25519 line without a comment.
func publicLine(pub ed25519.PublicKey) string {
	line, err := keyfile.MarshalPublic(pub, "")
	if err != nil {
		return fmt.Sprintf("(unprintable key: %v)", err)
	}
	return string(line[:len(line)-1])
}

// Usage prints the command's help.
func (c *InitCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence init --db FILE --anchor FILE --key FILE --id RECEIVER_ID
                    (--recovery-pub FILE | --no-recovery-key)
                    [--max-ttl 24h] [--pub FILE] [--json]

Creates a receiver database (mode 0600), records the public half of the
receiver's private key, and writes the first signed checkpoint to a new
anchor file (mode 0600). Every command that writes later refuses any other
key, and checks the database against the anchor. An existing database is
never touched, and an anchor that already holds a checkpoint is never
replaced.

Keep the anchor apart from the database (another volume, another backup
schedule, another administrator): restoring an old database does not
restore the anchor, so the old copy is detected.

Arguments:

	--id RECEIVER_ID
	    Names the receiver in its audit chain and checkpoints.
	--recovery-pub FILE
	    Public key (ssh-ed25519 line) of the separately held recovery key,
	    which alone can re-admit a database whose history was questioned
	    or whose anchor was lost (kvfence admission new, kvfence recover).
	    It must differ from the receiver's key. Create it with kvfence
	    keygen on a machine apart from the receiver and keep the private
	    half there. Required, unless --no-recovery-key.
	--no-recovery-key
	    Initialise without a recovery key, and say so on stderr: such a
	    receiver can never be re-admitted after a restore or a lost
	    anchor, and stays unusable. Not with --recovery-pub.
	--max-ttl DURATION
	    The longest any grant may stay valid after its activation
	    (default 24h): every scope's maximum, unless "scope create
	    --max-ttl" sets a shorter one. "activate --ttl" above it is
	    refused (exit code 3). Fixed at init.
`+usageKey+`	--db FILE
	    The database file to create. Defaults to $KVFENCE_DB.
	--anchor FILE
	    The anchor file to create (required). Defaults to $KVFENCE_ANCHOR.
`+usageEtcdSee+`	--pub FILE
	    If set, refuse unless it is the public half of --key.
`+usageJSON)
}
