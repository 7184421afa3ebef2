//go:build !unix

package etcdtest

import "os"

// alive reports whether the process pid still exists, where the system
// offers no better probe than finding it.
func alive(pid int) bool {
	_, err := os.FindProcess(pid)
	return err == nil
}
