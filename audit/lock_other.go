//go:build !windows && !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package audit

import (
	"os"
	"sync"
)

// fileLock serialises FileAnchor writes within this process on platforms
// without flock; writers in other processes are not excluded there.
var fileLock sync.Mutex

func lockFile(*os.File) error {
	fileLock.Lock()
	return nil
}

// lockFileShared is lockFile: without flock, readers in this process
// wait for each other too.
func lockFileShared(f *os.File) error { return lockFile(f) }

func unlockFile(*os.File) { fileLock.Unlock() }
