package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/kvfence"
)

// AuditArchiveCommand moves the oldest audit entries into a signed archive
// file and removes them from the database. It is privileged.
type AuditArchiveCommand struct{ m *Main }

// auditArchiveJSON is the --json shape of audit archive. from_seq and
// from_hash are the base the archive continues (0 and "" for the start of
// the chain); to_seq and to_hash its newest entry, the new base.
type auditArchiveJSON struct {
	Archive  string `json:"archive"`
	FromSeq  uint64 `json:"from_seq"`
	FromHash string `json:"from_hash"`
	ToSeq    uint64 `json:"to_seq"`
	ToHash   string `json:"to_hash"`
	Entries  uint64 `json:"entries"`
	AuditSeq uint64 `json:"audit_seq"`
}

// Run runs the command.
func (c *AuditArchiveCommand) Run(ctx context.Context, args []string) (err error) {
	flags := newFlagSet("audit archive")
	cf := commonFlags{name: "audit archive"}
	cf.register(flags, withDB|withKey)
	before := flags.Uint64("before", 0, "")
	out := flags.String("out", "", "")
	if err := parseFlags(flags, c.Usage, args, 0); err != nil {
		return err
	}
	cf.resolve(flags, c.m.Getenv)
	if err := cf.requireWriter(); err != nil {
		return err
	}
	if !isSet(flags, "before") {
		return missingFlag(cf.name, "before", "")
	}
	if *before == 0 {
		return &usageError{msg: "kvfence audit archive: --before must be a seq of at least 1", hint: "kvfence audit archive -h"}
	}
	if err := require(cf.name, [2]string{"out", *out}); err != nil {
		return err
	}
	if *out == "-" {
		return &usageError{msg: "kvfence audit archive: --out - is refused: the archive must be a file that is synced before the entries are removed",
			hint: "name a new file, e.g. --out audit-1.kva"}
	}
	r, err := cf.openWriter(c.m.warn)
	if err != nil {
		return err
	}
	defer closeReceiver(r, &err)
	res, err := localAdmin(r).Archive(ctx, kvfence.ArchiveRequest{Before: *before, Path: *out})
	if err != nil {
		if errors.Is(err, kvfence.ErrInvalidArgument) {
			return &usageError{msg: err.Error(), hint: "kvfence observe events --db DB shows the seqs; kvfence status shows the audit seq"}
		}
		return err
	}
	o := auditArchiveJSON{Archive: res.Path, FromSeq: res.From.Seq, FromHash: headHex(res.From), ToSeq: res.To.Seq,
		ToHash: hex.EncodeToString(res.To.Hash[:]), Entries: res.Entries, AuditSeq: res.AuditSeq}
	if cf.json {
		return writeJSON(c.m.Stdout, o)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "archive\t%s\n", o.Archive)
	fmt.Fprintf(tw, "entries\t%d to %d (%d)\n", o.FromSeq+1, o.ToSeq, o.Entries)
	fmt.Fprintf(tw, "new base\t%s\n", headText(res.To))
	fmt.Fprintf(tw, "audit seq\t%d\n", o.AuditSeq)
	return tw.Flush()
}

// Usage prints the command's help.
func (c *AuditArchiveCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence audit archive --before SEQ --out FILE [common arguments]

Moves the oldest audit entries, from the chain's current base (seq 1 if
it was never archived) up to SEQ, into a new archive file, and removes
them from the database. The archive holds the entries, the fence state
they continue from, and a statement signed by the receiver's key naming
the first and last entry's hashes and the fence state at each end, so it
verifies on its own. It is written and synced before anything is removed;
then one write transaction removes the entries and appends an "archived"
entry recording the new base (its seq, hash and fence state digest), and
the anchor moves forward as after any write. The head, the anchor and the
state digest never move back.

Verify the chain from its base with "kvfence verify-chain", and the whole
history with "kvfence verify-chain --archive FILE ..." (oldest first).
Privileged: requires the receiver's private key.

Arguments:

	--before SEQ
	    The newest entry to archive. It must be after the current base and
	    not past the anchored seq.
	--out FILE
	    The archive file to create (mode 0600); it must not exist. "-" is
	    refused: the file must be synced before entries are removed.
`+usageKey+usageDB+usageJSON)
}
