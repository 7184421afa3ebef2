//go:build !linux

package etcddev

import "syscall"

// sysProcAttr has nothing to add where the kernel cannot tie a child's
// life to its parent's; dev-cluster stops its members when it ends.
func sysProcAttr() *syscall.SysProcAttr { return nil }
