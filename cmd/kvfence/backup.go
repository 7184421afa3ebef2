package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// BackupCommand writes a verified backup file of a receiver: from a
// running one over --server, or from a stopped one's database file.
type BackupCommand struct{ m *Main }

// RestoreCommand writes a backup file's database to the path a stopped
// receiver opens, after verifying it.
type RestoreCommand struct{ m *Main }

// backupJSON is the --json shape of backup and restore (docs/design.md
// §9): the file written and the checkpoint the database in it verified
// against.
type backupJSON struct {
	File     string `json:"file"`
	Bytes    int64  `json:"bytes"`
	Receiver string `json:"receiver"`
	Seq      uint64 `json:"seq"`
	Head     string `json:"head"`
	State    string `json:"state"`
	// EpochHighWater is the checkpoint's epoch high-water.
	EpochHighWater uint64 `json:"epoch_high_water"`
	// At is when the receiver signed the checkpoint: the backup holds
	// every commit up to then, and none after.
	At string `json:"at"`
}

// Run runs the command.
func (c *BackupCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("backup")
	cf := commonFlags{name: "backup"}
	cf.register(fs, withDB)
	var rf remoteFlags
	rf.register(fs)
	out := fs.String("out", "", "")
	force := fs.Bool("force", false, "")
	maxSize := fs.Int64("max-size", 0, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "backup", "pub"); err != nil {
		return err
	}
	if *maxSize < 0 {
		return &usageError{msg: "kvfence backup: --max-size must not be negative", hint: "kvfence backup -h"}
	}
	if err := require("backup", [2]string{"out", *out}, [2]string{"pub", cf.pub}); err != nil {
		return err
	}
	pub, err := keyfile.LoadPublic(cf.pub)
	if err != nil {
		return err
	}
	opts := backup.SaveOptions{Out: *out, PublicKey: pub, Overwrite: *force, MaxSize: *maxSize}
	var res backup.Result
	if rf.on() {
		cl, err := rf.dial()
		if err != nil {
			return err
		}
		defer cl.Close()
		res, err = cl.Backup(ctx, opts)
		if err != nil {
			return backupErr("backup", err)
		}
	} else {
		if cf.anchor == "" {
			return missingFlag(cf.name, "anchor", envAnchor)
		}
		r, err := cf.openObserver(c.m.warn)
		if err != nil {
			return err
		}
		res, err = saveLocal(ctx, r, opts)
		r.Close()
		if err != nil {
			return backupErr("backup", err)
		}
	}
	return c.m.printBackup(*out, res, cf.json)
}

// saveLocal streams r's snapshot through backup.Save, as the server does.
func saveLocal(ctx context.Context, r *kvfence.Receiver, opts backup.SaveOptions) (backup.Result, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := r.Snapshot(ctx, func(s kvfence.Snapshot) error {
			_, err := backup.Write(pw, s)
			return err
		})
		pw.CloseWithError(err)
		done <- err
	}()
	res, err := backup.Save(ctx, pr, opts)
	// Save stops reading at an error: the writer is told so, and ends.
	pr.CloseWithError(errors.New("backup: the reader stopped"))
	if werr := <-done; err == nil && werr != nil {
		err = werr
	}
	return res, err
}

// backupErr names the command and turns a refused overwrite into a usage
// error with its remedy.
func backupErr(cmd string, err error) error {
	switch {
	case errors.Is(err, backup.ErrExists):
		return &usageError{msg: fmt.Sprintf("kvfence %s: %v", cmd, err), hint: "choose another file, or give --force to replace it"}
	case errors.Is(err, audit.ErrBadSignature):
		return withHint(fmt.Errorf("kvfence %s: %w", cmd, err),
			"the backup's checkpoint is not signed by --pub: check that --pub is this receiver's key (ssh-keygen -l); "+
				"if it is, the backup is not this receiver's or was altered: keep it as evidence; nothing was written")
	case errors.Is(err, backup.ErrMismatch), errors.Is(err, backup.ErrSumMismatch):
		return withHint(fmt.Errorf("kvfence %s: %w", cmd, err),
			"the backup does not hold the database its signed checkpoint describes, or its bytes were altered: "+
				"keep it as evidence and take another; nothing was written")
	}
	return fmt.Errorf("kvfence %s: %w", cmd, err)
}

// printBackup prints what a backup or a restore wrote.
func (m *Main) printBackup(file string, res backup.Result, asJSON bool) error {
	sc := res.Checkpoint
	out := backupJSON{File: file, Bytes: res.Size, Receiver: sc.Receiver, Seq: sc.Seq, Head: hex.EncodeToString(sc.Head[:]),
		State: hex.EncodeToString(sc.State[:]), EpochHighWater: sc.EpochHighWater,
		At: time.Unix(0, sc.At).UTC().Format(time.RFC3339Nano)}
	if asJSON {
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	fmt.Fprintf(tw, "file\t%s\n", out.File)
	fmt.Fprintf(tw, "bytes\t%d\n", out.Bytes)
	fmt.Fprintf(tw, "receiver\t%s\n", out.Receiver)
	fmt.Fprintf(tw, "head\t%s\n", headText(audit.Head{Seq: sc.Seq, Hash: sc.Head}))
	fmt.Fprintf(tw, "epoch high-water\t%d\n", out.EpochHighWater)
	fmt.Fprintf(tw, "signed at\t%s\n", out.At)
	fmt.Fprintf(tw, "verified\tchain, state and checkpoint signature\n")
	return tw.Flush()
}

// Usage prints the command's help.
func (c *BackupCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence backup --server URL --pub FILE --out FILE [--force] [--max-size BYTES] [--json]
       kvfence backup --db FILE --anchor FILE --pub FILE --out FILE [--force] [--max-size BYTES] [--json]

Writes a backup file: a consistent copy of the receiver's bbolt database
with the signed checkpoint of its newest entry. With --server the running
receiver sends it from one read transaction while it goes on serving
(administrators only); without, a stopped receiver's database is opened
read-only and checked against its anchor first.

The file is written beside --out under a temporary name and fsynced; then
the checkpoint's signature is checked under --pub, and the database in it
is verified against the checkpoint as verify-chain does (every entry and
link, the chain ending exactly at the checkpoint's head, the state records
hashing to what it commits to). Only then is it renamed to --out and the
directory fsynced. A stream cut short, bytes that do not match the file's
SHA-256, a checkpoint not signed by --pub, or a database that does not
match its checkpoint leave no file. An existing --out is not replaced
without --force.

A receiver kept in etcd has no file snapshot (snapshot_unsupported): back
up the etcd cluster itself (etcdctl snapshot save), which holds every
prefix.

Restore with "kvfence restore" (README: Restore from a backup).

With --json: {"file","bytes","receiver","seq","head","state",
"epoch_high_water","at"}.

Exit codes: 0 written, 4 the backup did not verify (its checkpoint or its
database), 2 --out exists, 1 any other failure (a stream cut short).

Arguments:

	--out FILE
	    The backup file to write.
	--force
	    Replace an existing --out.
	--max-size BYTES
	    Refuse a backup longer than this (backup_too_large, exit 1, no
	    file), so that a server cannot fill the disk. Default: no bound.
	--pub FILE
	    The receiver's public key (an ssh-ed25519 line), from your own
	    records: the backup must verify under it.
	--db FILE, --anchor FILE
	    Without --server: the stopped receiver's database and anchor.
`+usageWitness+usageServer+usageJSON)
}

// Run runs the command.
func (c *RestoreCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("restore")
	in := fs.String("in", "", "")
	db := fs.String("db", "", "")
	pubFile := fs.String("pub", "", "")
	force := fs.Bool("force", false, "")
	asJSON := fs.Bool("json", false, "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	if !isSet(fs, "db") {
		*db = c.m.Getenv(envDB)
	}
	if err := require("restore", [2]string{"in", *in}, [2]string{"db", *db}, [2]string{"pub", *pubFile}); err != nil {
		return err
	}
	pub, err := keyfile.LoadPublic(*pubFile)
	if err != nil {
		return err
	}
	res, err := backup.Restore(ctx, *in, backup.RestoreOptions{DB: *db, PublicKey: pub, Overwrite: *force})
	if err != nil {
		return backupErr("restore", err)
	}
	return c.m.printBackup(*db, res, *asJSON)
}

// Usage prints the command's help.
func (c *RestoreCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence restore --in FILE --db FILE --pub FILE [--force] [--json]

Writes the database held in a backup file (kvfence backup) to --db, for a
stopped receiver: the backup is verified as kvfence backup verifies it
(its SHA-256, the checkpoint's signature under --pub, the database against
the checkpoint), written beside --db under a temporary name, fsynced,
renamed to --db and the directory fsynced. An existing --db is not
replaced without --force, and never while a process holds it open
(database_in_use): stop the receiver first.

The anchor is not touched: it is ahead of the restored database, which
verify-chain then reports as rollback_detected and the receiver refuses
to open. Re-admit it with a recovery admission (kvfence admission new,
kvfence recover); the commits between the backup and the anchor are lost
from the database (README: Restore from a backup).

With --json: as kvfence backup's, "file" being --db.

Exit codes: 0 written, 4 the backup did not verify, 2 --db exists, 1 any
other failure.

Arguments:

	--in FILE
	    The backup file.
	--db FILE
	    The database file to write. Defaults to $KVFENCE_DB.
	--pub FILE
	    The receiver's public key (an ssh-ed25519 line), from your own
	    records.
	--force
	    Replace an existing --db.
`+usageJSON)
}
