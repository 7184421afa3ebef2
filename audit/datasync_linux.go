//go:build kvfenceosfile

package audit

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's data durable with fdatasync(2), which skips the
// metadata that reading the data does not need, such as the modification
// time. FileAnchor writes only within the file's size, so nothing else is
// needed.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
