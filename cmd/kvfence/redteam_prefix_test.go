package main

import (
	"strings"
	"testing"
)

// Ensure that an --etcd-prefix none of whose segments is a bucket name of
// the receiver or the ledger is the only kind accepted. The engine keeps
// bucket b's key k at PREFIX b "/" k, so a prefix such as
// /kvfence/control/ nests inside the default receiver's control bucket: the
// second receiver's control record of scope s is the first one's record of
// scope control/s, and whoever may write the second prefix writes the
// first receiver's fence state (and its init alone makes the first refuse
// to open, as a state mismatch).
func TestRedteam_EtcdPrefixInsideAnotherReceiversBucket(t *testing.T) {
	c := newCLI(t)
	ep := "http://127.0.0.1:2379"
	for _, p := range []string{"/kvfence/control/", "/kvfence/grants/", "/kvfence/targets/x/", "/a/receipts/",
		"/kvfence/audit/", "/kvfence/checkpoints/", "/kvfence/meta/", "/kvfence/holds/", "/kvfence/effects/", "/l/claims/", "/l/approvals/", "/l/actions/"} {
		r := c.must(ExitUsage, "status", "--etcd", ep, "--etcd-prefix", p)
		if !strings.Contains(r.stderr, "--etcd-prefix") || !strings.Contains(r.stderr, "bucket") {
			t.Errorf("--etcd-prefix %s: %s", p, r)
		}
	}
	for _, p := range []string{"/kvfence/", "/team-b/receiver/", "/kvfence/controls/", "/a/Control-x/"} {
		if err := checkEtcdPrefix(p); err != nil {
			t.Errorf("checkEtcdPrefix(%q) = %v, want nil", p, err)
		}
	}
}
