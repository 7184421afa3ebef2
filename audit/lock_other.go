//go:build !windows && !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package audit

import (
	"os"
	"sync"
)

// dirLock serialises FileAnchor writes within this process on platforms
// without flock; writers in other processes are not excluded there.
var dirLock sync.Mutex

func lockDir(*os.File) (unlock func(), err error) {
	dirLock.Lock()
	return dirLock.Unlock, nil
}

// lockExcludesProcesses says that lockDir does not exclude other
// processes here: a temporary file may belong to a live writer.
const lockExcludesProcesses = false
