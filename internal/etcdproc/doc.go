// Package etcdproc runs real etcd clusters for tests: standalone etcd
// processes on loopback, on free ports, with data in the test's temporary
// directory. A test can SIGKILL a member and restart it on the same data
// and ports, as a machine crash and reboot would. Every process is killed
// when the test ends, failed or not, and dies with the test binary if that
// is killed first (Linux).
//
// The etcd binary is $KVFENCE_ETCD_BIN if set, else etcd on PATH. Debian's
// etcd-server package installs it; .ci/run does. Without it Start fails
// the test with a message that says how to install it: a test that needs
// a real cluster never passes without one.
package etcdproc
