package main

import (
	"fmt"
	"os"

	"github.com/kvfence/kvfence/kvfence"
)

// localAdmin returns the administrative handle of a receiver that this
// process opened itself. Its changes record the invoking user as
// "unix:uid:N", the same identity the served receiver gives a peer on its
// admin socket, so that the chain names the same person either way. The
// uid is the kernel's account of this process, not a claim the user typed;
// what authorised the change is still the receiver's private key. Where
// there are no uids (os.Getuid returns -1), no actor is recorded.
func localAdmin(r *kvfence.Receiver) *kvfence.Admin {
	return r.Admin().As(localActor())
}

// localActor is the invoking user as an actor, or "".
func localActor() string {
	uid := os.Getuid()
	if uid < 0 {
		return ""
	}
	return fmt.Sprintf("unix:uid:%d", uid)
}
