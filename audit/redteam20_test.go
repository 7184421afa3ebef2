package audit

import (
	"strings"
	"testing"
)

// Ensure that no message the receiver's key signs can be read as a message
// of another kind: each kind's message starts with its own prefix, and no
// prefix is a prefix of another, so no byte string is two kinds at once.
// One key signs checkpoints, hold acknowledgments and, in a recovery,
// admissions.
func TestRedteam20_SigningDomainsDisjoint(t *testing.T) {
	ack := testHoldAck()
	ackMsg, err := holdAckMessage(&ack)
	if err != nil {
		t.Fatal(err)
	}
	cp := testCheckpoint()
	cpMsg, err := checkpointMessage(&cp)
	if err != nil {
		t.Fatal(err)
	}
	adm := testAdmission()
	admMsg, err := admissionMessage(&adm)
	if err != nil {
		t.Fatal(err)
	}
	msgs := map[string][]byte{holdAckPrefix: ackMsg, checkpointPrefix: cpMsg, admissionPrefix: admMsg}
	for p, m := range msgs {
		if !strings.HasPrefix(string(m), p) {
			t.Fatalf("message %q does not start with its prefix %q", m[:min(len(m), 24)], p)
		}
	}
	prefixes := []string{holdAckPrefix, checkpointPrefix, admissionPrefix, reanchorPrefix, archivePrefix}
	for i, p := range prefixes {
		if !strings.HasSuffix(p, "\n") {
			t.Fatalf("prefix %q does not end its line", p)
		}
		for j, q := range prefixes {
			if i != j && strings.HasPrefix(p, q) {
				t.Fatalf("prefix %q begins with %q: one kind's message could be another's", p, q)
			}
		}
	}
}
