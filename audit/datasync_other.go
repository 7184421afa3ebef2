//go:build !windows && !linux

package audit

import "os"

// datasync makes f's data durable; without fdatasync here, that is fsync.
func datasync(f *os.File) error { return f.Sync() }
