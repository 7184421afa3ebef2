package main

import (
	"context"
	"fmt"
	"os"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// VerifyChainCommand checks a receiver's whole audit chain against its
// anchor and the operator's copy of the receiver's public key, and reports
// the first problem. It changes neither the database nor the anchor.
type VerifyChainCommand struct{ m *Main }

// verifyChainJSON is the --json shape of verify-chain (docs/design.md §9). Head and
// entries describe the part of the chain that verified; anchor_seq and
// anchor_head the anchor as read, verified or not. A hash is lowercase hex,
// or "" when there is none (an empty chain, no readable anchor). Detail is
// empty when ok. AnchorDamage describes a damaged slot of the anchor file,
// or is null; it is reported with ok as with any problem.
type verifyChainJSON struct {
	OK           bool              `json:"ok"`
	Problem      string            `json:"problem"`
	Entries      uint64            `json:"entries"`
	Head         string            `json:"head"`
	HeadSeq      uint64            `json:"head_seq"`
	AnchorSeq    uint64            `json:"anchor_seq"`
	AnchorHead   string            `json:"anchor_head"`
	Detail       string            `json:"detail"`
	AnchorDamage *anchorDamageJSON `json:"anchor_damage"`
	// BaseSeq and BaseHash are where the stored chain begins once older
	// entries were archived (0 and "" if never); entries counts from
	// there. Archived counts the entries verified in --archive files.
	BaseSeq  uint64 `json:"base_seq"`
	BaseHash string `json:"base_hash"`
	Archived uint64 `json:"archived_entries"`
	// The file anchor's separation facts (null for an etcd store or
	// anchor).
	separationJSON
}

// Run runs the command.
func (c *VerifyChainCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("verify-chain")
	cf := commonFlags{name: "verify-chain"}
	cf.register(fs, withDB)
	maxAge := fs.Duration("max-age", 0, "")
	recoveryPub := fs.String("recovery-pub", "", "")
	var archives stringList
	fs.Var(&archives, "archive", "")
	var rf remoteFlags
	rf.register(fs)
	// "--archive A B C": the files after the flag are archives too, and
	// flags may follow them.
	err := parseInterspersed(fs, c.Usage, args, func(arg string) error {
		if len(archives) == 0 {
			return &usageError{msg: fmt.Sprintf("kvfence verify-chain: unexpected argument %q", arg), hint: "kvfence verify-chain -h"}
		}
		archives = append(archives, arg)
		return nil
	})
	if err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "verify-chain"); err != nil {
		return err
	}
	if rf.on() {
		for _, f := range []string{"archive", "max-age", "recovery-pub"} {
			if isSet(fs, f) {
				return &usageError{msg: fmt.Sprintf("kvfence verify-chain: --%s does not go with --server: the receiver verifies what it stores, against its own anchor", f),
					hint: "verify a backup or a copy of the database with --" + f}
			}
		}
		return c.runRemote(ctx, &rf, cf.json)
	}
	if cf.db == "" && !cf.etcd.on() {
		return missingFlag(cf.name, "db", envDB)
	}
	if cf.anchor == "" {
		return missingFlag(cf.name, "anchor", envAnchor)
	}
	if err := require(cf.name, [2]string{"pub", cf.pub}); err != nil {
		return err
	}
	if err := cf.checkAnchorPath(); err != nil {
		return err
	}
	if *maxAge < 0 {
		return &usageError{msg: "kvfence verify-chain: --max-age must not be negative", hint: "kvfence verify-chain -h"}
	}
	pub, err := keyfile.LoadPublic(cf.pub)
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
	srcs, closeAll, err := openArchives(archives)
	if err != nil {
		return err
	}
	defer closeAll()
	vopts := kvfence.VerifyOptions{Anchor: anchor, PublicKey: pub, Progress: c.progress(),
		MaxAge: *maxAge, LockTimeout: cf.lockTimeout, Archives: srcs,
		AnchorClusterID: cf.anchorEtcd.clusterID}
	vopts.WitnessFaults = cf.witness.faults
	if vopts.Witnesses, vopts.WitnessQuorum, err = cf.witness.load(cf.name); err != nil {
		return err
	}
	if *recoveryPub != "" {
		if len(vopts.Witnesses) == 0 {
			return &usageError{msg: "kvfence verify-chain: --recovery-pub goes with --witness: it judges the recovery admission shown for witnesses still on a superseded tree",
				hint: "kvfence verify-chain -h"}
		}
		if vopts.RecoveryKey, err = keyfile.LoadPublic(*recoveryPub); err != nil {
			return err
		}
		if vopts.RecoveryKey.Equal(pub) {
			return withHint(tagged(kvfence.ErrRecoveryKeyIsReceiverKey, "kvfence verify-chain: --recovery-pub is the receiver's own key (--pub)"),
				"give the recovery key's public half, the one given to kvfence init --recovery-pub")
		}
	}
	var rep audit.Report
	if cf.etcd.on() {
		e, eerr := cf.openEngine()
		if eerr != nil {
			return eerr
		}
		rep, err = kvfence.VerifyChainEngine(e, vopts) // closes e
	} else {
		rep, err = kvfence.VerifyChain(cf.db, vopts)
	}
	if err != nil {
		return notAReceiver(cf.name, cf.db, cf.lockTimeout, err, "kvfence ledger verify-chain")
	}
	out := verifyChainJSON{OK: rep.OK(), Problem: string(rep.Problem), Entries: rep.Entries,
		Head: headHex(rep.Head), HeadSeq: rep.Head.Seq, AnchorSeq: rep.Anchor.Seq, AnchorHead: headHex(rep.Anchor),
		Detail: rep.Detail, AnchorDamage: anchorDamageOf(rep.AnchorDamage), BaseSeq: rep.Base.Seq, BaseHash: headHex(rep.Base),
		Archived: rep.Archived}
	sep := cf.anchorSeparation()
	out.separationJSON = separationOf(sep)
	if cf.json {
		err = writeJSON(c.m.Stdout, out)
	} else {
		tw := newTable(c.m.Stdout)
		fmt.Fprintf(tw, "ok\t%v\n", out.OK)
		fmt.Fprintf(tw, "problem\t%s\n", out.Problem)
		fmt.Fprintf(tw, "entries\t%d\n", out.Entries)
		if rep.Base.Seq > 0 {
			fmt.Fprintf(tw, "base\t%s\n", headText(rep.Base))
		}
		if len(archives) > 0 {
			fmt.Fprintf(tw, "archived\t%d entries in %d archives\n", rep.Archived, rep.Archives)
		}
		fmt.Fprintf(tw, "head\t%s\n", headText(rep.Head))
		fmt.Fprintf(tw, "anchor\t%s\n", headText(rep.Anchor))
		if *maxAge > 0 {
			fmt.Fprintf(tw, "max age\t%v\n", *maxAge)
		}
		if out.Detail != "" {
			fmt.Fprintf(tw, "detail\t%s\n", out.Detail)
		}
		if d := rep.AnchorDamage; d != nil {
			fmt.Fprintf(tw, "anchor damage\t%v\n", d)
		}
		printSeparation(tw, sep)
		err = tw.Flush()
	}
	if err != nil {
		return err
	}
	return verifyOutcome("kvfence verify-chain", "receiver", rep, func(err error) string { return integrityHint(err, false) })
}

// verifyOutcome turns a verification report into the command's result: nil
// for a sound chain; a warning (exit 6) for a sound chain beside a damaged
// anchor slot, not 0 so that a monitor reading only the exit code notices,
// not 4 because the chain verifies and opens (a crash during an anchor
// write leaves exactly this); otherwise the problem as an integrity error
// (exit 4) with hint's explanation. owner names whose next write replaces
// a damaged slot.
func verifyOutcome(cmd, owner string, rep audit.Report, hint func(error) string) error {
	if rep.OK() && rep.AnchorDamage != nil {
		return &warningError{msg: fmt.Sprintf("%s: the chain verifies, but %v", cmd, rep.AnchorDamage),
			hint: "a crash during an anchor write leaves a damaged slot, and the " + owner + "'s next write replaces it; " +
				"if there was no crash, the anchor file was altered: keep a copy as evidence and find out by whom"}
	}
	if rep.OK() {
		return nil
	}
	perr := problemError(cmd, rep)
	return withHint(perr, hint(perr))
}

// problemError returns the error for a report's problem; it is an
// integrity error, so the command exits with code 4.
func problemError(cmd string, rep audit.Report) error {
	if err := rep.Err(); err != nil {
		return fmt.Errorf("%s: %s: %w", cmd, rep.Problem, err)
	}
	// Err is documented to be set for every problem; should it not be, the
	// problem still must not exit 0.
	return fmt.Errorf("%s: %s: %s: %w", cmd, rep.Problem, rep.Detail, audit.ErrBadEntry)
}

// Usage prints the command's help.
func (c *VerifyChainCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence verify-chain --db FILE --anchor FILE --pub FILE [--max-age DURATION]
                            [--lock-timeout DURATION] [--json] [--archive FILE ...]
       kvfence verify-chain --server URL [--json]

Checks the receiver's audit chain against its anchor without changing
either: the anchor's signature under --pub and its receiver id, then every
entry (canonical encoding, its own seq, the link to the one before), the
hash at the anchored seq, and that the chain reaches the anchor. It also
replays each scope's epoch, mode and active grant from the chain and checks
that every applied mutation used the scope's active grant. Prints the first
problem, or ok with the head:

	ok                  the chain verifies and contains the anchored head
	anchor_missing      there is no anchor file
	anchor_damaged      the anchor file holds no readable anchor (no valid
	                    slot, two slots of one generation, the wrong size)
	bad_signature       the anchor is not signed by --pub
	receiver_mismatch   the anchor names another receiver
	bad_entry           an entry does not decode canonically
	seq_gap             the seqs do not run 1, 2, 3, ...
	broken_link         an entry does not link to the one before it
	fork_detected       the chain has another hash at the anchored seq
	rollback_detected   the chain ends before the anchored seq: the database
	                    is older than its anchor (a restored backup); or the
	                    anchor file's newest slot is damaged and the chain
	                    ends exactly at the write before it
	fence_violation     an intact chain records a mutation applied under a
	                    grant that was not its scope's active grant then (or
	                    while the scope was held): the receiver skipped its
	                    checks, or its records were edited in the store under
	                    a running receiver; Open refuses such a store
	anchor_stale        the anchor is older than --max-age, or names an
	                    entry the database archived (an old anchor put back)
	bad_archive         an --archive file is not well-formed, is cut short,
	                    or holds other entries than its signed statement
	base_mismatch       the base where the stored chain begins is not the
	                    one its newest "archived" entry records (archived
	                    entries put back, the base record edited), or the
	                    --archive files do not run from seq 1 to exactly
	                    that base (out of order, a gap, one missing)

After "kvfence audit archive" the database holds the chain from its base
on; it is verified from there, the fence replay continuing from the fence
state the base records. With --archive, the archives are verified first
(each one's signature under --pub, every entry and link, the fence
replay) and must chain to each other and to the database exactly: the
whole history from seq 1.

The anchor file keeps the anchor in two slots. A damaged slot beside a
valid one is reported with any of these, ok included ("anchor damage"):
a crash during an anchor write leaves one, and so does tampering. If the
damaged slot was the newest write, the chain must reach past the other
slot's seq, since the receiver commits before it writes the anchor;
otherwise that is rollback_detected.

With --json: {"ok","problem","entries","head","head_seq","anchor_seq",
"anchor_head","detail","anchor_damage","base_seq","base_hash",
"archived_entries","anchor_same_device","anchor_same_owner"}; hashes in
lowercase hex, "" when there is none; anchor_damage is null or {"slot",
"problem","claimed_generation","current_generation","newer","detail"}.
anchor_same_device and anchor_same_owner say whether the anchor file is on
the database file's file system and owned by its uid (facts, not a
verdict; also "anchor same device" and "anchor same owner" in the text;
null for an etcd store or anchor).

With --server, a running receiver (kvfence serve) runs the same checks on
itself, administrators only: it reads its anchor between two anchor
writes, then the chain, the base, the state records and the newest
checkpoint in one read transaction, while it goes on serving. Output and
exit codes are the same (the separation facts are null). It is the
receiver's own report: a compromised receiver can answer ok for anything.
The independent check is this command with --db on a backup (kvfence
backup, kvfence restore to a scratch path) and your copy of --pub.
--archive and --max-age do not go with --server.

With --witness, the witnesses are asked last, for the largest tree of
this receiver each cosigned: one ahead of the database is
rollback_detected, one beside it fork_detected (the restore of a database
together with its anchor, which the anchor cannot see); too few answers
exit 1 (witnesses_unavailable). After kvfence recover, witnesses still on
the tree the recovery superseded diverge until the receiver, opened with
its key, shows them the admission and they accept it; before that, give
--recovery-pub to have them judged here by the admission the database
keeps: forgiven only if it verifies with that key and names each of them
at exactly what it holds.

Exit codes: 0 ok, 4 any problem, 6 ok but an anchor slot is damaged, 1
when the check could not run (a missing database, an unreadable key), 5
when the database is locked by a writer.

Arguments:

	--db FILE
	    Receiver database. Defaults to $KVFENCE_DB.
	--anchor FILE
	    The receiver's anchor file. Defaults to $KVFENCE_ANCHOR.
`+usageEtcdSee+`	--pub FILE
	    The receiver's public key (an ssh-ed25519 line), from your own
	    records: the one in the database is not trusted for this.
	--max-age DURATION
	    Report an anchor older than this as anchor_stale: a valid but old
	    anchor may have been restored together with the database. Useful
	    only if the receiver writes at least that often. Default: no limit.
	--archive FILE ...
	    Archive files written by "kvfence audit archive", oldest first;
	    repeat the flag or list the files after it. Verifies the whole
	    history from seq 1 through the archives into the database.
	--recovery-pub FILE
	    With --witness: your copy of the recovery public key (the one
	    given to kvfence init --recovery-pub), to judge the recovery
	    admission the database keeps for witnesses still on a superseded
	    tree. The key the database records is not trusted for this.
`+usageLock+usageWitness+usageServer+usageJSON)
}

// progress returns a callback that reports verified entries on stderr when
// stderr is a terminal, and nil otherwise, so logs and tests stay clean.
func (c *VerifyChainCommand) progress() func(uint64) {
	f, ok := c.m.Stderr.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return func(n uint64) { fmt.Fprintf(f, "verify-chain: %d entries read\n", n) }
}

// openArchives opens each archive file for verification; closeAll closes
// them.
func openArchives(paths []string) ([]audit.ArchiveSource, func(), error) {
	var srcs []audit.ArchiveSource
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, p := range paths {
		// Opening a FIFO blocks until a writer comes: look before opening,
		// then check the opened file again below.
		if fi, err := os.Stat(p); err == nil && !fi.Mode().IsRegular() {
			closeAll()
			return nil, nil, &usageError{msg: fmt.Sprintf("kvfence verify-chain: --archive %s is not a regular file", p),
				hint: "pass the files kvfence audit archive wrote"}
		}
		f, err := os.Open(p)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("kvfence verify-chain: archive: %w", err)
		}
		files = append(files, f)
		// A FIFO or a device would hang or never end: an archive is a file.
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			closeAll()
			return nil, nil, &usageError{msg: fmt.Sprintf("kvfence verify-chain: --archive %s is not a regular file", p),
				hint: "pass the files kvfence audit archive wrote"}
		}
		srcs = append(srcs, audit.ArchiveSource{Name: p, Reader: f})
	}
	return srcs, closeAll, nil
}
