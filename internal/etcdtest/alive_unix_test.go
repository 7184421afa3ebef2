//go:build unix

package etcdtest

import "syscall"

// alive reports whether the process pid still exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }
