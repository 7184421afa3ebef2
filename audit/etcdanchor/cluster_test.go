package etcdanchor

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// Ensure that every member of one cluster answers with the same cluster
// ID, that a Store held to another cluster (ExpectCluster) refuses its
// answers before their content is used, reads and writes alike, and that
// a cluster that does not answer gives an error, never an ID.
func TestStoreClusterID(t *testing.T) {
	c, cl := startCluster(t)
	key := testKey(t)
	first := at(t, 1)
	text, err := first.MarshalAnchor()
	if err != nil {
		t.Fatal(err)
	}
	put(t, cl, key, text)
	ctx := context.Background()
	var id uint64
	for i, ep := range c.Endpoints() {
		s, err := New(newClient(t, []string{ep}), key, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.ClusterID(ctx)
		if err != nil || got == 0 || (i > 0 && got != id) {
			t.Fatalf("member %d: cluster ID %x, %v (member 0: %x)", i, got, err, id)
		}
		id = got
	}

	s, err := New(cl, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.ExpectCluster(id + 1)
	s.ExpectCluster(id) // a second call does not move the Store
	if _, err := s.Load(); !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("Load from a cluster other than the expected one: %v", err)
	}
	if _, err := s.ClusterID(ctx); !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("ClusterID of a cluster other than the expected one: %v", err)
	}
	if err := s.Store(&first, at(t, 2)); !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("Store to a cluster other than the expected one: %v", err)
	}
	if string(get(t, cl, key)) != string(text) {
		t.Fatal("a Store held to another cluster wrote")
	}
	good, err := New(cl, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	good.ExpectCluster(id)
	if sc, err := good.Load(); err != nil || sc != first {
		t.Fatalf("Load from the expected cluster: %+v, %v", sc, err)
	}
	if err := good.Store(&first, at(t, 2)); err != nil {
		t.Fatalf("Store to the expected cluster: %v", err)
	}

	// Nothing listens here: no ID, an error within the timeout.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	a, err := ParseAddress(Scheme + addr + key)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := Open(a, &Options{Timeout: 500 * time.Millisecond, DialTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	began := time.Now()
	if got, err := dead.ClusterID(ctx); err == nil || got != 0 {
		t.Fatalf("a cluster that does not answer: %x, %v", got, err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("ClusterID of a dead address took %v", d)
	}
}
