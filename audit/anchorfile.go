//go:build !windows

package audit

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"
)

// FileAnchor is an AnchorStore in one file at an operator-given Path, in
// the anchor file format. Each write replaces the file atomically and is
// durable when Store returns. A temporary file that a writer killed in the
// middle of a write left beside the anchor is removed by the next write.
//
// Atomic replace was chosen over appending checkpoints to an fsynced log,
// although BenchmarkAnchorWrite on a 2-core VM (ext4, virtio disk) measured
// it slower: a Store (read, compare, temporary file, fsync, rename,
// directory fsync) took 0.76 to 2.0 ms, typically about 1 ms, and an append
// with fsync 0.19 to 0.33 ms, typically 0.23 ms; both include a 27 µs
// signature, and fsyncing the new inode is most of the difference. With
// replace, a crash leaves the old anchor or the new one; an append can leave
// a torn last record, which Load would then have to refuse (every crash
// mid-write would stop the receiver) or skip (the parser would accept
// damaged files). The log would also grow without bound, and its
// compaction needs an atomic replace anyway. Group commit pays the
// difference once per batch, not once per request.
type FileAnchor struct {
	// Path is the anchor file. It comes from the operator's configuration,
	// never from the database it anchors.
	Path string
}

// Load reads and parses the anchor file. A missing file is ErrAnchorMissing;
// a symbolic link, directory or other non-regular file is
// ErrAnchorNotRegular; a file writable by group or others is
// ErrAnchorPermissions; content that is not one canonical anchor is
// ErrBadAnchor. Load never creates or changes the file.
func (f FileAnchor) Load() (SignedCheckpoint, error) {
	data, err := f.read()
	if err != nil {
		return SignedCheckpoint{}, err
	}
	sc, err := ParseAnchor(data)
	if err != nil {
		return SignedCheckpoint{}, fmt.Errorf("%s: %w", f.Path, err)
	}
	return sc, nil
}

func (f FileAnchor) read() ([]byte, error) {
	if f.Path == "" {
		return nil, errors.New("audit: anchor path is empty")
	}
	fi, err := os.Lstat(f.Path)
	if err != nil {
		return nil, f.statError(err)
	}
	if err := checkAnchorInfo(f.Path, fi); err != nil {
		return nil, err
	}
	file, err := os.Open(f.Path)
	if err != nil {
		return nil, f.statError(err)
	}
	defer file.Close()
	// The path was checked before it was opened; make sure it is still the
	// same file, not a symbolic link swapped in between.
	if ofi, err := file.Stat(); err != nil {
		return nil, fmt.Errorf("audit: anchor: %w", err)
	} else if !os.SameFile(fi, ofi) {
		return nil, fmt.Errorf("%w: %s changed while it was being opened", ErrAnchorNotRegular, f.Path)
	}
	data, err := io.ReadAll(io.LimitReader(file, MaxCheckpointSize+1))
	if err != nil {
		return nil, fmt.Errorf("audit: anchor: %w", err)
	}
	return data, nil
}

func (f FileAnchor) statError(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrAnchorMissing, f.Path)
	}
	return fmt.Errorf("audit: anchor: %w", err)
}

func checkAnchorInfo(path string, fi fs.FileInfo) error {
	switch m := fi.Mode(); {
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

// removeAbandoned removes the temporary files that writers which died
// between creating and renaming them left in dir (renameio names them
// "." + the anchor's name + a decimal number). The caller holds the
// directory lock, so no live writer's file can match. A failure to remove
// one is no reason to fail the write.
func (f FileAnchor) removeAbandoned(dir *os.File) {
	names, err := dir.Readdirnames(-1)
	if _, serr := dir.Seek(0, io.SeekStart); err != nil || serr != nil {
		return
	}
	prefix := "." + filepath.Base(f.Path)
	for _, name := range names {
		digits, ok := strings.CutPrefix(name, prefix)
		if ok && digits != "" && strings.Trim(digits, "0123456789") == "" {
			os.Remove(filepath.Join(dir.Name(), name))
		}
	}
}

// Store implements AnchorStore.Store. The new file has mode 0600.
func (f FileAnchor) Store(old *SignedCheckpoint, next SignedCheckpoint) error {
	return f.swap(old, next, false)
}

// Supersede implements AnchorStore.Supersede.
func (f FileAnchor) Supersede(old, next SignedCheckpoint) error {
	return f.swap(&old, next, true)
}

func (f FileAnchor) swap(old *SignedCheckpoint, next SignedCheckpoint, supersede bool) error {
	text, err := next.MarshalAnchor()
	if err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(f.Path))
	if err != nil {
		return fmt.Errorf("audit: anchor directory: %w", err)
	}
	defer dir.Close()
	// The lock makes read-compare-replace one step for every FileAnchor on
	// this directory, across processes where the platform allows.
	unlock, err := lockDir(dir)
	if err != nil {
		return fmt.Errorf("audit: locking anchor directory: %w", err)
	}
	defer unlock()

	var cur *SignedCheckpoint
	switch sc, err := f.Load(); {
	case err == nil:
		cur = &sc
	case !errors.Is(err, ErrAnchorMissing):
		// A damaged anchor is evidence; it is never overwritten.
		return err
	}
	if err := checkSwap(cur, old, &next, supersede); err != nil {
		return err
	}
	if lockExcludesProcesses {
		f.removeAbandoned(dir)
	}
	if cur != nil && *cur == next {
		return nil
	}
	pf, err := renameio.NewPendingFile(f.Path, renameio.WithTempDir(dir.Name()), renameio.WithStaticPermissions(0o600))
	if err != nil {
		return fmt.Errorf("audit: anchor: %w", err)
	}
	defer pf.Cleanup()
	if _, err := pf.Write(text); err != nil {
		return fmt.Errorf("audit: anchor: %w", err)
	}
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("audit: anchor: %w", err)
	}
	// renameio fsyncs the file but not the directory; without this the
	// rename itself may not survive a crash.
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("audit: anchor directory: %w", err)
	}
	return nil
}
