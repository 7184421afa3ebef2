//go:build !linux

package etcdbin

import "syscall"

// sysProcAttr has nothing to add where the kernel cannot tie a child's
// life to its parent's; the test's cleanup kills the members.
func sysProcAttr() *syscall.SysProcAttr { return nil }
