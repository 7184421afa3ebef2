// Package dirsync makes a directory's entries durable: a file created,
// linked or renamed in it, whose own contents were synced, can still be
// lost in a crash until its directory is synced too.
package dirsync

import "os"

// Sync fsyncs the directory dir, so that the entries made in it so far
// survive a crash. Platforms that cannot open a directory for sync
// (Windows) fail here; a caller that accepts their weaker promise checks
// for them first.
func Sync(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	syncErr := d.Sync()
	if err := d.Close(); syncErr == nil {
		syncErr = err
	}
	return syncErr
}
