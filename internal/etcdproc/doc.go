// Package etcdproc runs real etcd clusters for tests: standalone etcd
// processes on loopback, on free ports, with data in the test's temporary
// directory. A test can SIGKILL a member and restart it on the same data
// and ports, as a machine crash and reboot would. Every process is killed
// when the test ends, failed or not, and dies with the test binary if that
// is killed first (Linux).
//
// The etcd binary is internal/etcdbin's: $KVFENCE_ETCD_BIN if set, else cmd/kvfence-etcd, which
// is etcd's own main built from the etcd module in go.mod: Binary builds it
// once into the user's cache directory, so a machine with only Go runs these
// tests. Without a binary Start fails the test with a message that says how
// to get one: a test that needs a real cluster never passes without one.
package etcdproc
