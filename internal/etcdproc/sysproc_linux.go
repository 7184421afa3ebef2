package etcdproc

import "syscall"

// sysProcAttr makes the kernel kill a member when the test binary dies
// before its cleanup runs (a -timeout panic, a signal), so that no member
// outlives the test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
