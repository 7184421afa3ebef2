//go:build unix

package separation

import (
	"io/fs"
	"syscall"
)

// statOfInfo reads the device and owner from fi.
func statOfInfo(fi fs.FileInfo) (Stat, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Stat{}, ErrUnsupported
	}
	// Dev is not a uint64 on every unix.
	return Stat{Dev: uint64(st.Dev), UID: st.Uid}, nil
}
