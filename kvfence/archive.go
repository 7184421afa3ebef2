package kvfence

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/dirsync"
)

// KindArchived is the audit kind of an archive's entry: the entries up to
// its base_seq were written to a signed archive file and removed from the
// database in the transaction that appended it.
const KindArchived = audit.KindArchived

// checkpointBase is where the checkpoints bucket keeps the base record
// (audit.MarshalBase) of a chain whose older entries were archived: the
// newest archived entry's seq and hash and each scope's fence state there.
// It is absent until the first archive. It is not a state record: the state
// digest covers what decisions read, and archiving changes none of it. The
// archive entry that wrote it records its digest, so the chain, which the
// anchor covers, vouches for it.
var checkpointBase = []byte("base")

// ErrArchiveConflict means the chain's base moved between the reading and
// the writing of an archive: another archive ran meanwhile.
var ErrArchiveConflict = errors.New("kvfence: the audit chain was archived meanwhile")

// ArchiveRequest says which entries to archive and where.
type ArchiveRequest struct {
	// Before is the newest entry to archive: the entries after the current
	// base (seq 1 if the chain was never archived) up to Before go into the
	// archive. It must not be past the anchored seq, so that the anchor
	// always names an entry the database still has or its base.
	Before uint64
	// Path is the archive file to create. It must not exist; it is created
	// with mode 0600 and is durable (file and directory synced) before any
	// entry is removed.
	Path string
}

// ArchiveResult describes a committed archive.
type ArchiveResult struct {
	// From is the base the archive continues (the zero Head for the start
	// of the chain), To the newest archived entry: the new base.
	From, To audit.Head
	// Entries is how many entries the archive holds and the database no
	// longer does.
	Entries uint64
	// AuditSeq is the seq of the archive entry that records the new base.
	AuditSeq uint64
	// Path is the archive file.
	Path string
}

// Archive moves the oldest entries of the audit chain, up to req.Before,
// into a signed archive file and removes them from the database. It first
// verifies those entries (canonical, in seq order, linked) from the current
// base and replays the fence over them, then writes the archive (the signed
// statement, the base record it continues and the entries; see Archive
// Format in package audit) and syncs it; only then, in one write
// transaction, it removes the entries, stores the new base record and
// appends an "archived" entry recording the new base's seq, hash and
// record digest. That transaction is anchored like every write, so the
// head never moves back, and the state digest does not change: no state
// record is touched.
//
// If the transaction fails, the archive file is kept and the error says
// so: the database still holds the entries, and the file is a valid
// archive of them that no base refers to.
func (a *Admin) Archive(ctx context.Context, req ArchiveRequest) (ArchiveResult, error) {
	p, err := a.prepareArchive(ctx, req)
	if err != nil {
		return ArchiveResult{}, err
	}
	return a.commitArchive(p)
}

// archivePlan is an archive written and synced, whose entries are still in
// the database.
type archivePlan struct {
	fromRaw, toRaw []byte     // the base records at both ends; fromRaw nil for the start
	from, to       audit.Head // the base the archive continues, and its newest entry
	path           string
	// statement and fromFile are the archive's signed statement and the
	// base record it begins with.
	statement audit.SignedArchiveStatement
	fromFile  []byte
}

// prepareArchive verifies the stored chain and writes the archive.
func (a *Admin) prepareArchive(ctx context.Context, req ArchiveRequest) (*archivePlan, error) {
	r := a.r
	if err := a.checkActor(); err != nil {
		return nil, err
	}
	if r.opts.ReadOnly {
		return nil, ErrReadOnly
	}
	if req.Path == "" {
		return nil, fmt.Errorf("%w: an archive path is required", ErrInvalidArgument)
	}
	if req.Before == 0 {
		return nil, fmt.Errorf("%w: before must be a seq of at least 1", ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	anchored := r.anchorNow().Seq
	if req.Before > anchored {
		return nil, fmt.Errorf("%w: seq %d is past the anchored seq %d; only entries the anchor covers are archived",
			ErrInvalidArgument, req.Before, anchored)
	}
	p := &archivePlan{path: req.Path}
	err := r.view(func(tx engine.Tx) error {
		var err error
		if p.fromRaw, p.from, err = readBase(tx); err != nil {
			return err
		}
		if req.Before <= p.from.Seq {
			return fmt.Errorf("%w: the entries up to %d are archived already; the chain begins after seq %d",
				ErrInvalidArgument, p.from.Seq, p.from.Seq)
		}
		// The whole stored chain is walked, not only the part archived:
		// the base record the archive continues must be the one the chain
		// records.
		var scanErr error
		p.toRaw, p.to, err = audit.AdvanceBase(p.fromRaw, storedEntries(tx, ^uint64(0), &scanErr), req.Before)
		if scanErr != nil {
			return scanErr
		}
		if err != nil {
			return fmt.Errorf("kvfence: %s: the stored chain does not verify; nothing was archived: %w", r.path, err)
		}
		fromRaw := p.fromRaw
		if fromRaw == nil {
			fromRaw, _ = audit.MarshalBase(&audit.Base{})
		}
		st, err := audit.SignArchive(r.opts.Key, audit.ArchiveStatement{Receiver: r.id, FromSeq: p.from.Seq, FromHash: p.from.Hash,
			FromFence: audit.BaseDigest(fromRaw), ToSeq: p.to.Seq, ToHash: p.to.Hash, ToFence: audit.BaseDigest(p.toRaw),
			At: r.opts.Now().UnixNano()})
		if err != nil {
			return err
		}
		// The file is written once the view's reads are done: a view
		// may run more than once, and a file is not part of it.
		p.statement, p.fromFile = st, fromRaw
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = r.view(func(tx engine.Tx) error {
		var scanErr error
		err := writeArchive(req.Path, p.statement, p.fromFile, storedEntries(tx, req.Before, &scanErr))
		if err == nil && scanErr != nil {
			// A short read made a short archive: remove the file this
			// run created, so that a run again (etcd, after a
			// compaction) may create it anew.
			os.Remove(req.Path)
			err = scanErr
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// commitArchive removes a written archive's entries, stores its base record
// and appends the archive entry, in one anchored write transaction. The
// base must still be the one the archive continues: another archive that
// committed meanwhile makes this one ErrArchiveConflict.
func (a *Admin) commitArchive(p *archivePlan) (ArchiveResult, error) {
	digest := audit.BaseDigest(p.toRaw)
	seq, err := update(a.r, len(p.toRaw), func(w *wtx) (uint64, error) {
		cur, err := w.tx.Get(bucketCheckpoints, checkpointBase)
		if err != nil {
			return 0, err
		}
		if !bytes.Equal(cur, p.fromRaw) {
			return 0, ErrArchiveConflict
		}
		if h, err := hashAt(w.tx, p.to.Seq); err != nil || h != p.to.Hash {
			return 0, fmt.Errorf("%w: entry %d changed while it was being archived", ErrArchiveConflict, p.to.Seq)
		}
		if err := removeEntries(w.tx, p.to.Seq); err != nil {
			return 0, err
		}
		if err := w.tx.Put(bucketCheckpoints, checkpointBase, p.toRaw); err != nil {
			return 0, err
		}
		return w.appendAudit(&audit.Entry{Kind: KindArchived, BaseSeq: p.to.Seq, BaseHash: p.to.Hash[:], BaseFence: digest[:],
			Actor: a.actor, Note: fmt.Sprintf("entries %d to %d archived to %s", p.from.Seq+1, p.to.Seq, filepath.Base(p.path))})
	})
	if err != nil {
		return ArchiveResult{}, fmt.Errorf("%w (the archive %s was written and is kept; the database still holds its entries unless the error says the write was not acknowledged)",
			err, p.path)
	}
	return ArchiveResult{From: p.from, To: p.to, Entries: p.to.Seq - p.from.Seq, AuditSeq: seq, Path: p.path}, nil
}

// readBase returns the stored base record and its position, or nil and
// the zero Head when the chain was never archived. The bytes are copied
// out of the transaction.
func readBase(tx engine.Tx) ([]byte, audit.Head, error) {
	raw, err := tx.Get(bucketCheckpoints, checkpointBase)
	if err != nil {
		return nil, audit.Head{}, err
	}
	if raw == nil {
		return nil, audit.Head{}, nil
	}
	b, err := audit.ParseBase(raw)
	if err != nil {
		return nil, audit.Head{}, fmt.Errorf("%w: %w", audit.ErrBaseMismatch, err)
	}
	if b.Seq == 0 {
		return nil, audit.Head{}, fmt.Errorf("%w: the base record is at seq 0", audit.ErrBaseMismatch)
	}
	return bytes.Clone(raw), b.Head(), nil
}

// storedEntries yields the stored entries in seq order up to seq last. A
// read that fails ends the sequence and sets *scanErr.
func storedEntries(tx engine.Tx, last uint64, scanErr *error) iter.Seq2[[]byte, []byte] {
	end := audit.SeqKey(last)
	return func(yield func(k, v []byte) bool) {
		*scanErr = tx.Scan(bucketAudit, nil, func(k, v []byte) error {
			if bytes.Compare(k, end) > 0 || !yield(k, v) {
				return engine.StopScan
			}
			return nil
		})
	}
}

// removeEntries deletes every stored entry up to seq last.
func removeEntries(tx engine.Tx, last uint64) error {
	end := audit.SeqKey(last)
	// The keys are collected first: a transaction must not write during
	// its scan.
	var keys [][]byte
	err := tx.Scan(bucketAudit, nil, func(k, _ []byte) error {
		if bytes.Compare(k, end) > 0 {
			return engine.StopScan
		}
		keys = append(keys, bytes.Clone(k))
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := tx.Delete(bucketAudit, k); err != nil {
			return err
		}
	}
	return nil
}

// writeArchive creates path, writes the archive and makes it durable: the
// file synced, then its directory, so that no entry is removed before its
// archive would survive a crash.
func writeArchive(path string, st audit.SignedArchiveStatement, fromRaw []byte, entries iter.Seq2[[]byte, []byte]) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("kvfence: archive: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path)
			err = fmt.Errorf("kvfence: archive %s: %w", path, err)
		}
	}()
	aw, err := audit.NewArchiveWriter(f, st, fromRaw)
	if err != nil {
		return err
	}
	for _, v := range entries {
		if err := aw.Add(v); err != nil {
			return err
		}
	}
	if err := aw.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return dirsync.Sync(filepath.Dir(path))
}

// checkBase is Open's cheap check of the base: the stored chain must begin
// right after it, linked to its hash, or at seq 1 when there is none. The
// full check, that the newest archive entry records exactly this base, is
// verify-chain's, which walks the chain.
func checkBase(tx engine.Tx) error {
	_, base, err := readBase(tx)
	if err != nil {
		return err
	}
	var k, v []byte
	err = tx.Scan(bucketAudit, nil, func(key, val []byte) error {
		k, v = bytes.Clone(key), bytes.Clone(val)
		return engine.StopScan
	})
	if err != nil {
		return err
	}
	if k == nil {
		return fmt.Errorf("%w: empty audit chain", ErrBadFormat)
	}
	if want := audit.SeqKey(base.Seq + 1); !bytes.Equal(k, want) {
		if base.Seq == 0 {
			return fmt.Errorf("%w: the stored chain begins at seq %d, but there is no base record saying that the entries before it were archived",
				audit.ErrBaseMismatch, binaryUint(k))
		}
		return fmt.Errorf("%w: the base record says the entries up to %d were archived, but the stored chain begins at seq %d",
			audit.ErrBaseMismatch, base.Seq, binaryUint(k))
	}
	e, err := audit.DecodeEntry(v)
	if err != nil {
		return fmt.Errorf("%w: the first stored entry: %w", ErrBadFormat, err)
	}
	if !bytes.Equal(e.Prev, base.Hash[:]) {
		return fmt.Errorf("%w: the first stored entry, seq %d, links to %x, but the base record says %x",
			audit.ErrBaseMismatch, e.Seq, e.Prev, base.Hash[:])
	}
	return nil
}

// binaryUint reads an 8-byte seq key, or 0 for a key of another size.
func binaryUint(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}
