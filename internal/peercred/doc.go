// Package peercred reads the credentials of the process at the other end
// of a unix socket connection, as the kernel recorded them when the
// connection was made (SO_PEERCRED, Linux only): the server reads its
// client's to admit it, and the client reads its server's before it sends
// anything. Neither end can forge them.
package peercred
