//go:build !windows

package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfence/kvfence/internal/dirsync"
)

// FileAnchor is an AnchorStore in one file at an operator-given Path, in
// the anchor file format: two fixed-size slots, each holding a generation
// number, a checkpoint and a SHA-256 over both. Each write overwrites the
// slot that is not current, in place, and is durable when Store returns.
//
// Overwriting in place is safe because the current slot is never written:
// a crash during a write, or a Load racing it, can find only the other
// slot damaged; its checksum then fails, and Load returns the current
// slot, the previous anchor, which the receiver already accepts as the
// crash window between a commit and its anchor write. Inspect describes
// the damaged slot, so that the receiver reports it, and refuses a
// database that the write which damaged it shows to be older (see Anchor
// Rules in the package documentation). Slots are ordered by
// generation, not by seq, so that Supersede, which may move seq back after
// a recovery, still wins. The file never changes size after it is created,
// so one fdatasync makes a write durable: no temporary file, no rename, no
// directory fsync.
//
// Each write used to replace the file atomically (lock the directory, read,
// compare, write a temporary file, fsync, rename, fsync the directory).
// On a shared 2-core VM (ext4, virtio disk), in runs of the old and new
// code taken in turn, BenchmarkAnchorWrite measured that replace at 0.69
// to 1.2 ms per write and the slot write at 0.27 to 0.35 ms, both
// including a 27 µs signature; appending to a log with fsync took 0.24 to
// 0.39 ms. BenchmarkSubmit with a file anchor went from 1.1 to 2.1 ms per
// durable fenced write to 0.69 to 0.87 ms, against 0.45 to 0.67 ms for
// BenchmarkBoltUpdate, a bare bbolt Update: within one run, from 0.29 to
// 0.52 (median 0.41) times its rate to 0.58 to 0.84 (median 0.65) times.
// The log would cost about the same per write but grow without bound and
// end in a torn record after a crash; the slots keep the file at 8192
// bytes and turn a torn write into a checksum mismatch in the slot that is
// not needed.
//
// Every write opens the file, locks it and reads both slots under the
// lock, so that the compare-and-swap sees what any other writer left. What
// a process keeps between writes is only the bytes it last wrote or read
// in each slot of the file at each path, with their parse: a slot that
// holds exactly those bytes is not parsed and checked again, and one that
// holds any other bytes is. A write then takes ten system calls (lstat,
// open, fstat, flock, lstat, pread, pwrite, fdatasync, flock, close) and
// three small allocations; with an *os.File, two reads and a parse of
// both slots it took seventeen and 47. In runs of the old and new code
// taken in turn on tmpfs, where fdatasync costs almost nothing,
// BenchmarkAnchorStore went from 18 to 22 µs per write to 10 to 12 µs, and
// BenchmarkAnchorStoreAlternating, where every write finds a slot another
// writer changed, from 20 to 21 µs to 13.5 to 14 µs (19 allocations).
type FileAnchor struct {
	// Path is the anchor file. It comes from the operator's configuration,
	// never from the database it anchors.
	Path string
	// LockTimeout is how long Load, Inspect and Store wait for another
	// holder's lock on the file before they fail with ErrAnchorBusy. A
	// writer holds it for one write and its fdatasync; anything that can
	// read the file can hold it longer. Zero means
	// DefaultAnchorLockTimeout.
	LockTimeout time.Duration
}

// DefaultAnchorLockTimeout is FileAnchor.LockTimeout when it is zero.
const DefaultAnchorLockTimeout = 5 * time.Second

// lockTimeout returns f.LockTimeout, or its default.
func (f FileAnchor) lockTimeout() time.Duration {
	if f.LockTimeout > 0 {
		return f.LockTimeout
	}
	return DefaultAnchorLockTimeout
}

// lockOrBusy takes file's lock (shared, or exclusive), waiting at most
// the lock timeout; a lock still held by another then is ErrAnchorBusy.
func (f FileAnchor) lockOrBusy(file anchorFD, shared bool) error {
	deadline := time.Now().Add(f.lockTimeout())
	wait := 100 * time.Microsecond
	for {
		ok, err := file.tryLock(shared)
		if err != nil {
			return fmt.Errorf("audit: locking anchor: %w", err)
		}
		if ok {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%w: %s: locked by another holder for %v", ErrAnchorBusy, f.Path, f.lockTimeout())
		}
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Millisecond)
	}
}

// Location returns the anchor file's absolute path (Locator).
func (a FileAnchor) Location() string {
	if abs, err := filepath.Abs(a.Path); err == nil {
		return abs
	}
	return a.Path
}

// Load reads the anchor file and returns the checkpoint in its current
// slot: the valid slot with the higher generation. A missing file is
// ErrAnchorMissing; a symbolic link, directory or other non-regular file
// is ErrAnchorNotRegular; a file writable by group or others is
// ErrAnchorPermissions; a file of the wrong size, without a valid slot or
// with two slots of one generation is ErrBadAnchor. A damaged slot beside
// a valid one does not stop Load, as a crash during a write leaves it;
// Inspect describes it. Load never creates or changes the file.
func (f FileAnchor) Load() (SignedCheckpoint, error) {
	rep, err := f.Inspect()
	return rep.Current, err
}

// Inspect reads the anchor file as Load does, with the same errors, and
// also describes the other slot if it is damaged, so that a receiver can
// report the damage, and judge it (SlotDamage.Check), before its next
// write overwrites it. Inspect never creates or changes the file.
func (f FileAnchor) Inspect() (AnchorFileReport, error) {
	// What a reader returns, another process sharing the file may act on
	// (chain.Advance takes an anchor found at or past its own checkpoint
	// as cover), so it must be durable. A writer holds the lock from its
	// write to the end of its fdatasync and puts the slot back if either
	// fails (swap); a creator holds it until its file's directory entry
	// is durable, and removes the file if that fails (create). Under a
	// shared lock a reader therefore sees what a Store completed, or what
	// a writer that died before its sync left in the page cache, which
	// the reader's own fdatasync makes durable before it is returned.
	for range 3 {
		rep, err := f.inspect()
		if !errors.Is(err, errAnchorReplaced) {
			return rep, err
		}
	}
	return AnchorFileReport{}, fmt.Errorf("%w: %s kept changing while it was being read", ErrAnchorBusy, f.Path)
}

// errAnchorReplaced means the path named another file, or none, by the
// time inspect had its lock: a creation that failed and was undone.
var errAnchorReplaced = errors.New("audit: anchor replaced while locking it")

func (f FileAnchor) inspect() (AnchorFileReport, error) {
	file, st, err := f.open(os.O_RDONLY)
	if err != nil {
		return AnchorFileReport{}, err
	}
	defer file.close()
	if err := f.lockOrBusy(file, true); err != nil {
		return AnchorFileReport{}, err
	}
	defer file.unlock()
	if now, err := lstatAnchor(f.Path); err != nil || !sameFile(now, st) {
		return AnchorFileReport{}, errAnchorReplaced
	}
	buf := anchorBufs.Get().(*anchorBuf)
	defer anchorBufs.Put(buf)
	memo := slotMemoFor(f.Path)
	i, cur, damage, err := f.readSlots(file, buf, st.size, memo)
	if err != nil {
		return AnchorFileReport{}, err
	}
	if slot := buf.file[i*AnchorSlotSize : (i+1)*AnchorSlotSize]; !memo.isDurable(i, slot, st) {
		if err := file.datasync(); err != nil {
			return AnchorFileReport{}, fmt.Errorf("audit: anchor: making what was read durable: %w", err)
		}
		memo.markDurable(i, slot, st)
	}
	return AnchorFileReport{Current: cur.sc, Slot: i, Generation: cur.gen, Damage: damage}, nil
}

// open opens the anchor file with flag after checking that it is a regular
// file that only its owner may write, and returns it with its identity.
func (f FileAnchor) open(flag int) (anchorFD, anchorStat, error) {
	if f.Path == "" {
		return anchorFD{}, anchorStat{}, errors.New("audit: anchor path is empty")
	}
	st, err := lstatAnchor(f.Path)
	if err != nil {
		return anchorFD{}, anchorStat{}, f.statError(err)
	}
	if err := checkAnchorMode(f.Path, st.mode); err != nil {
		return anchorFD{}, anchorStat{}, err
	}
	file, err := openAnchorFD(f.Path, flag)
	if err != nil {
		return anchorFD{}, anchorStat{}, f.statError(err)
	}
	// The path was checked before it was opened; make sure it is still the
	// same file, not a symbolic link swapped in between.
	ost, err := file.stat(f.Path)
	if err != nil {
		file.close()
		return anchorFD{}, anchorStat{}, fmt.Errorf("audit: anchor: %w", err)
	}
	if err := f.checkSame(st, ost); err != nil {
		file.close()
		return anchorFD{}, anchorStat{}, err
	}
	return file, ost, nil
}

// checkSame reports whether the open file, which ost describes, is the
// one st describes.
func (f FileAnchor) checkSame(st, ost anchorStat) error {
	if !sameFile(st, ost) {
		return fmt.Errorf("%w: %s changed while it was being opened", ErrAnchorNotRegular, f.Path)
	}
	return nil
}

// readSlots reads the whole file into buf and returns its current slot
// and the damage of the other one, if any; memo holds the slots last
// parsed. size is the size of the open file as
// last seen, just before the read: a read that ends short at that size
// has reached the end of the file, which saves the read that would find
// it; a file that changed size in between is read until a read returns
// nothing, as before.
func (f FileAnchor) readSlots(file anchorFD, buf *anchorBuf, size int64, memo *slotMemo) (int, anchorSlot, *SlotDamage, error) {
	n := 0
	for n < len(buf.file) {
		m, err := file.readAt(f.Path, buf.file[n:], int64(n))
		if err != nil {
			return 0, anchorSlot{}, nil, fmt.Errorf("audit: anchor: %w", err)
		}
		if m == 0 {
			break
		}
		n += m
		if int64(n) == size {
			break
		}
	}
	i, cur, damage, err := parseAnchorFileMemo(buf.file[:n], memo)
	if err != nil {
		return 0, anchorSlot{}, nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return i, cur, damage, nil
}

func (f FileAnchor) statError(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrAnchorMissing, f.Path)
	}
	return fmt.Errorf("audit: anchor: %w", err)
}

func checkAnchorMode(path string, m fs.FileMode) error {
	switch {
	case m&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link", ErrAnchorNotRegular, path)
	case m.IsDir():
		return fmt.Errorf("%w: %s is a directory", ErrAnchorNotRegular, path)
	case !m.IsRegular():
		return fmt.Errorf("%w: %s has mode %v", ErrAnchorNotRegular, path, m)
	case m.Perm()&0o022 != 0:
		return fmt.Errorf("%w: %s has mode %v", ErrAnchorPermissions, path, m.Perm())
	}
	return nil
}

// Store implements AnchorStore.Store. A new file has mode 0600.
func (f FileAnchor) Store(old *SignedCheckpoint, next SignedCheckpoint) error {
	return f.swap(old, next, false)
}

// Supersede implements AnchorStore.Supersede.
func (f FileAnchor) Supersede(old, next SignedCheckpoint) error {
	return f.swap(&old, next, true)
}

func (f FileAnchor) swap(old *SignedCheckpoint, next SignedCheckpoint, supersede bool) error {
	file, ost, err := f.open(os.O_RDWR)
	if errors.Is(err, ErrAnchorMissing) {
		return f.create(old, next)
	}
	if err != nil {
		return err
	}
	defer file.close()
	// The file is never replaced, so a lock on it makes read-compare-write
	// one step for every FileAnchor on it, across processes where the
	// platform allows.
	if err := f.lockOrBusy(file, false); err != nil {
		return err
	}
	defer file.unlock()
	// Whoever held the lock before may have been an operator's tool that
	// put another file at the path; write only to the file the path names.
	// The open file's identity cannot have changed since open took it.
	st, err := lstatAnchor(f.Path)
	if err != nil {
		return f.statError(err)
	}
	if err := f.checkSame(st, ost); err != nil {
		return err
	}

	// A file without a valid slot is evidence; it is never overwritten.
	buf := anchorBufs.Get().(*anchorBuf)
	defer anchorBufs.Put(buf)
	memo := slotMemoFor(f.Path)
	i, cur, damage, err := f.readSlots(file, buf, st.size, memo)
	if err != nil {
		return err
	}
	if err := checkSwap(&cur.sc, old, &next, supersede); err != nil {
		if damage != nil && errors.Is(err, ErrWriteConflict) {
			// A writer that expected a newer anchor than the current one
			// wrote it into the slot that is now damaged: say so, or the
			// conflict hides the damage.
			return fmt.Errorf("%w; %s: %v", err, f.Path, damage)
		}
		return err
	}
	if cur.sc == next {
		if !supersede {
			return nil
		}
		// A supersession retried after its copy failed: the other slot
		// may still hold the superseded anchor, which the copy exists to
		// overwrite.
		other := 1 - i
		if s, err := parseSlot(buf.file[other*AnchorSlotSize : (other+1)*AnchorSlotSize]); err == nil && s.sc == next {
			return nil
		}
		return f.copySuperseding(file, buf, memo, ost, other, cur.gen, next)
	}
	if cur.gen == ^uint64(0) {
		return fmt.Errorf("%w: %s: generation counter exhausted", ErrBadAnchor, f.Path)
	}
	slot, err := appendSlot(buf.slot[:0], cur.gen+1, &next)
	if err != nil {
		return err
	}
	// The other slot is the previous anchor or damage from an interrupted
	// write, which the caller has seen through Inspect when it opened; the
	// current one is not touched until the next write.
	off := int64(1-i) * AnchorSlotSize
	err = file.writeAt(f.Path, slot, off)
	if err == nil {
		err = file.datasync()
	}
	if err != nil {
		// The slot may now hold next in the page cache without anything
		// saying it is durable, and Load would return it once the lock
		// is released: to this process, which Advance then takes as
		// written, and to another one sharing the file, which would take
		// it as cover for its own commits. Put the slot's bytes back
		// first. They need no sync: they were durable before the write,
		// and if the failed write reached the disk after all, the
		// checkpoint it left is one the caller signed after its commit.
		if rerr := file.writeAt(f.Path, buf.file[off:off+AnchorSlotSize], off); rerr != nil {
			return fmt.Errorf("audit: anchor: %w; putting the slot back failed too, and a reader may find the checkpoint of this write: %v", err, rerr)
		}
		return fmt.Errorf("audit: anchor: %w", err)
	}
	memo.remember(1-i, slot, anchorSlot{gen: cur.gen + 1, sc: next})
	memo.markDurable(1-i, slot, ost)
	if !supersede {
		return nil
	}
	return f.copySuperseding(file, buf, memo, ost, i, cur.gen+1, next)
}

// copySuperseding writes next, the anchor of a supersession already
// durable at generation gen, a second time into slot i at gen+1.
//
// A supersession leaves no slot older than itself: the slot it left would
// hold the superseded anchor, which damage to the new slot would make
// current again, and against which the recovery's admission, or a copy of
// the database from before it, would pass once more. So the new anchor is
// written again into the other slot once its first write is durable. If
// that copy fails, the supersession stands but the call fails; the same
// Supersede retried makes the copy, and the next Store overwrites that
// slot anyway.
func (f FileAnchor) copySuperseding(file anchorFD, buf *anchorBuf, memo *slotMemo, ost anchorStat, i int, gen uint64, next SignedCheckpoint) error {
	if gen == ^uint64(0) {
		return fmt.Errorf("%w: %s: generation counter exhausted", ErrBadAnchor, f.Path)
	}
	again, err := appendSlot(buf.slot[:0], gen+1, &next)
	if err != nil {
		return err
	}
	off := int64(i) * AnchorSlotSize
	err = file.writeAt(f.Path, again, off)
	if err == nil {
		err = file.datasync()
	}
	if err != nil {
		// The copy may sit in the page cache while the disk keeps the
		// superseded anchor: put the slot's bytes back, so that a retry
		// finds the superseded anchor there and makes the copy again,
		// rather than taking the cached copy as written.
		if rerr := file.writeAt(f.Path, buf.file[off:off+AnchorSlotSize], off); rerr != nil {
			return fmt.Errorf("audit: anchor superseded, but its copy over the superseded slot failed: %w; putting the slot back failed too: %v", err, rerr)
		}
		return fmt.Errorf("audit: anchor superseded, but its copy over the superseded slot failed: %w", err)
	}
	memo.remember(i, again, anchorSlot{gen: gen + 1, sc: next})
	memo.markDurable(i, again, ost)
	return nil
}

// anchorSyncFault, set by tests only, is called before each fdatasync of
// an anchor file and, if it returns an error, fails that sync with it.
var anchorSyncFault func() error

// create writes a new anchor file holding next in slot 0 at generation 1.
func (f FileAnchor) create(old *SignedCheckpoint, next SignedCheckpoint) error {
	if err := checkSwap(nil, old, &next, false); err != nil {
		return err
	}
	data, err := appendSlot(make([]byte, 0, AnchorFileSize), 1, &next)
	if err != nil {
		return err
	}
	data = append(data, make([]byte, AnchorSlotSize)...)
	// The file is written whole under a temporary name, locked, and then
	// linked to its path, which fails if the path exists: a reader or a
	// concurrent creator never sees a created but still empty anchor
	// file, which would read as damaged, and a reader waits on the lock
	// until the file's directory entry is durable too. Where the file
	// system has no hard links, the file is created in place with O_EXCL
	// instead.
	file, err := f.createLinked(data)
	if errors.Is(err, errNoLinks) {
		file, err = f.createInPlace(data)
	}
	if err != nil {
		return err
	}
	defer file.close()
	defer file.unlock()
	// A new file's directory entry is durable only once the directory is.
	if err := dirsync.Sync(filepath.Dir(f.Path)); err != nil {
		// Nothing says the entry is durable: take it away before the lock
		// goes, if the path still names this file, so that no reader acts
		// on a checkpoint a crash may lose.
		if st, lerr := lstatAnchor(f.Path); lerr == nil {
			if ost, serr := file.stat(f.Path); serr == nil && sameFile(st, ost) {
				os.Remove(f.Path)
			}
		}
		return fmt.Errorf("audit: anchor directory: %w", err)
	}
	return nil
}

// errNoLinks means the anchor's file system refused a hard link for a
// reason other than an existing path.
var errNoLinks = errors.New("audit: anchor: no hard links here")

// createLinked writes data to a new temporary file beside the anchor,
// syncs it, locks it, and links it to the anchor's path, never replacing
// a file. It returns the file, open and locked.
func (f FileAnchor) createLinked(data []byte) (anchorFD, error) {
	tmp, err := os.CreateTemp(filepath.Dir(f.Path), "."+filepath.Base(f.Path)+".new-*")
	if err != nil {
		return anchorFD{}, fmt.Errorf("audit: anchor: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := tmp.Chmod(0o600); err != nil {
		return anchorFD{}, fmt.Errorf("audit: anchor: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return anchorFD{}, fmt.Errorf("audit: anchor: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return anchorFD{}, fmt.Errorf("audit: anchor: %w", err)
	}
	file, err := openAnchorFD(tmp.Name(), os.O_RDWR)
	if err != nil {
		return anchorFD{}, fmt.Errorf("audit: anchor: %w", err)
	}
	if err := f.lockOrBusy(file, false); err != nil {
		file.close()
		return anchorFD{}, err
	}
	err = os.Link(tmp.Name(), f.Path)
	if err != nil {
		file.unlock()
		file.close()
	}
	switch {
	case errors.Is(err, fs.ErrExist):
		return anchorFD{}, fmt.Errorf("%w: expected no anchor, but %s was created meanwhile", ErrWriteConflict, f.Path)
	case err != nil:
		return anchorFD{}, fmt.Errorf("%w: %v", errNoLinks, err)
	}
	return file, nil
}

// createInPlace creates the anchor file with O_EXCL, locks it, and writes
// data to it. It returns the file, open and locked. A reader that opens
// the file between its creation and the lock finds it empty, and refuses
// it as damaged; only file systems without hard links take this way.
func (f FileAnchor) createInPlace(data []byte) (anchorFD, error) {
	created, err := os.OpenFile(f.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return anchorFD{}, fmt.Errorf("%w: expected no anchor, but %s was created meanwhile", ErrWriteConflict, f.Path)
	}
	if err != nil {
		return anchorFD{}, fmt.Errorf("audit: anchor: %w", err)
	}
	defer created.Close()
	file, st, err := f.open(os.O_RDWR)
	if err != nil {
		return anchorFD{}, err
	}
	fail := func(err error) (anchorFD, error) {
		file.unlock()
		file.close()
		return anchorFD{}, err
	}
	if err := f.lockOrBusy(file, false); err != nil {
		file.close()
		return anchorFD{}, err
	}
	// The locked file must be the one created: the path names both.
	cst, cerr := created.Stat()
	pfi, perr := os.Lstat(f.Path)
	now, nerr := lstatAnchor(f.Path)
	if cerr != nil || perr != nil || nerr != nil || !os.SameFile(cst, pfi) || !sameFile(now, st) {
		return fail(fmt.Errorf("%w: %s changed while it was being created", ErrAnchorNotRegular, f.Path))
	}
	if _, err := created.Write(data); err != nil {
		os.Remove(f.Path)
		return fail(fmt.Errorf("audit: anchor: %w", err))
	}
	if err := created.Sync(); err != nil {
		os.Remove(f.Path)
		return fail(fmt.Errorf("audit: anchor: %w", err))
	}
	return file, nil
}
