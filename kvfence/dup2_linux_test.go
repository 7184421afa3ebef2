package kvfence

import "syscall"

// dup2 makes newfd refer to what oldfd refers to (Dup3 exists on every
// Linux architecture, Dup2 not on all).
func dup2(oldfd, newfd int) error { return syscall.Dup3(oldfd, newfd, 0) }
