package main

import "testing"

// Ensure that the ledger's buckets for registered receivers and
// containments are bucket names an --etcd-prefix may not use: a receiver
// or ledger under /l/receivers/ would otherwise write its keys into the
// receivers bucket of a ledger at /l/, as records of that ledger.
func TestRedteam20_EtcdPrefixInsideLedgerReceivers(t *testing.T) {
	for _, p := range []string{"/l/receivers/", "/kvfence-ledger/containments/"} {
		if err := checkEtcdPrefix(p); err == nil {
			t.Errorf("checkEtcdPrefix(%q) = nil, want a refusal", p)
		}
	}
}
