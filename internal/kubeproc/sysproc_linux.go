package kubeproc

import "syscall"

// sysProcAttr makes the kernel kill the server when the test binary dies
// before its cleanup runs (a -timeout panic, a signal), so that no server
// outlives the test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
