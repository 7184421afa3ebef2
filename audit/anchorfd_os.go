//go:build !windows && (!linux || kvfenceosfile)

package audit

import (
	"io"
	"io/fs"
	"os"
)

// anchorFD is an open anchor file. Outside Linux it is an *os.File, so
// that the platform's own sync (F_FULLFSYNC on Darwin) and open flags
// apply.
type anchorFD struct{ f *os.File }

// anchorStat is what FileAnchor needs to know about a file: its identity,
// its mode and its size.
type anchorStat struct {
	fi   fs.FileInfo
	mode fs.FileMode
	size int64
}

func sameFile(a, b anchorStat) bool { return os.SameFile(a.fi, b.fi) }

func statOfInfo(fi fs.FileInfo) anchorStat {
	return anchorStat{fi: fi, mode: fi.Mode(), size: fi.Size()}
}

func lstatAnchor(path string) (anchorStat, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return anchorStat{}, err
	}
	return statOfInfo(fi), nil
}

func openAnchorFD(path string, flag int) (anchorFD, error) {
	f, err := os.OpenFile(path, flag, 0)
	return anchorFD{f}, err
}

func (a anchorFD) stat(string) (anchorStat, error) {
	fi, err := a.f.Stat()
	if err != nil {
		return anchorStat{}, err
	}
	return statOfInfo(fi), nil
}

// readAt reads into b from offset off, returning 0 and no error at the
// end of the file.
func (a anchorFD) readAt(_ string, b []byte, off int64) (int, error) {
	n, err := a.f.ReadAt(b, off)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func (a anchorFD) writeAt(_ string, b []byte, off int64) error {
	_, err := a.f.WriteAt(b, off)
	return err
}

func (a anchorFD) tryLock(shared bool) (bool, error) { return tryLockFile(a.f, shared) }

func (a anchorFD) unlock() { unlockFile(a.f) }

func (a anchorFD) datasync() error {
	if anchorSyncFault != nil {
		if err := anchorSyncFault(); err != nil {
			return err
		}
	}
	return datasync(a.f)
}

func (a anchorFD) close() { a.f.Close() }
