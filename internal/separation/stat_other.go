//go:build !unix

package separation

import "io/fs"

// statOfInfo cannot read a device or an owner here.
func statOfInfo(fs.FileInfo) (Stat, error) { return Stat{}, ErrUnsupported }
