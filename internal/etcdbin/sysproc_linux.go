package etcdbin

import "syscall"

// sysProcAttr makes the kernel kill etcd when the process that started it dies
// before it stops etcd (a -timeout panic, a signal), so that no etcd
// outlives its starter.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
