package separation

import (
	"errors"
	"fmt"
	"os"
)

// ErrUnsupported means the platform does not say which device holds a
// file or which uid owns it.
var ErrUnsupported = errors.New("separation: file devices and owners are not available on this platform")

// Stat is what Of compares of one file.
type Stat struct {
	// Dev is the device that holds the file (st_dev).
	Dev uint64
	// UID owns the file.
	UID uint32
}

// Facts are the separation facts of a database file and its anchor file.
type Facts struct {
	// SameDevice says both files are on one file system (device).
	SameDevice bool
	// SameOwner says one uid owns both files.
	SameOwner bool
}

// Compare returns the facts of two files' Stats.
func Compare(db, anchor Stat) Facts {
	return Facts{SameDevice: db.Dev == anchor.Dev, SameOwner: db.UID == anchor.UID}
}

// Of stats the database file and the anchor file and compares them. Each
// path is resolved as the receiver opens it (a symbolic link is followed
// to the file it names), so the facts are about the files themselves.
func Of(db, anchor string) (Facts, error) {
	d, err := statOf(db)
	if err != nil {
		return Facts{}, err
	}
	a, err := statOf(anchor)
	if err != nil {
		return Facts{}, err
	}
	return Compare(d, a), nil
}

func statOf(path string) (Stat, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Stat{}, fmt.Errorf("separation: %w", err)
	}
	return statOfInfo(fi)
}
