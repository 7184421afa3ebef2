package ledger

import (
	"context"
	"errors"
	"testing"
)

// Ensure that on etcd the receivers and containments buckets are created
// by the first write that needs them (their markers are under the
// prefix, so another process's engine finds them), and that a
// containment record put back to an older copy, or a receiver record
// swapped for another's, by an etcd user of the prefix, reads as
// tampered, with the ledger open and after a reopen.
func TestRedteam20_EtcdSealedRecords(t *testing.T) {
	const prefix = "/ledger-rt20/"
	c, newEngine, anchor := etcdLedger(t, prefix)
	opts := &Options{Key: testKey, Anchor: anchor}
	l, err := OpenEngine(newEngine(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.Close() }()
	rs := map[string]*fakeRecv{"r1": addRecv(t, l, "r1"), "r2": addRecv(t, l, "r2")}
	superseded(t, l, "act", Boundary{"r1", "s1"}, Boundary{"r2", "s2"})
	ct := begin(t, l, "act")
	if _, err := l.RecordBoundaries(ctx, ct.ID, []BoundaryContainment{rs["r1"].ackFor(t, ct.Boundaries[0], 0)}); err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t)
	bg := context.Background()
	for _, b := range []string{"receivers", "containments"} {
		if r, err := cli.Get(bg, prefix+b); err != nil || len(r.Kvs) != 1 {
			t.Fatalf("bucket %s has no marker: %v", b, err)
		}
	}
	key := prefix + "containments/" + ct.ID
	older, err := cli.Get(bg, key)
	if err != nil || len(older.Kvs) != 1 {
		t.Fatalf("containment record: %v", err)
	}
	full, err := l.RecordBoundaries(ctx, ct.ID, []BoundaryContainment{rs["r2"].ackFor(t, ct.Boundaries[1], 0)})
	if err != nil || full.State != ContainmentFull {
		t.Fatalf("second ack: %v %s", err, full.State)
	}
	// Another process sees the buckets and the record.
	l2, err := OpenEngine(newEngine(), &Options{ReadOnly: true, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := l2.Containment("act"); err != nil || got.State != ContainmentFull {
		t.Fatalf("another engine reads %v %s", err, got.State)
	}
	l2.Close()
	if _, err := cli.Put(bg, key, string(older.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Containment("act"); !errors.Is(err, ErrContainmentTampered) {
		t.Fatalf("older copy put back under the open ledger: %v, want ErrContainmentTampered", err)
	}
	l.Close()
	if l, err = OpenEngine(newEngine(), opts); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Containment("act"); !errors.Is(err, ErrContainmentTampered) {
		t.Fatalf("older copy after reopen: %v, want ErrContainmentTampered", err)
	}
	r2, err := cli.Get(bg, prefix+"receivers/r2")
	if err != nil || len(r2.Kvs) != 1 {
		t.Fatalf("receiver record: %v", err)
	}
	if _, err := cli.Put(bg, prefix+"receivers/r1", string(r2.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Receiver("r1"); err == nil {
		t.Fatal("r2's record read as r1's")
	}
}
