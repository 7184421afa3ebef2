package etcddev

import "syscall"

// sysProcAttr makes the kernel kill a member when dev-cluster dies without
// stopping it, so that no member outlives its cluster.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
