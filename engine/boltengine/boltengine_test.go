package boltengine

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/enginetest"
	bolt "go.etcd.io/bbolt"
)

func newEngine(t testing.TB, lim engine.Limits) *Engine {
	// A commit that grows the memory map waits for open read
	// transactions; the isolation test commits while a View is open.
	db, err := bolt.Open(filepath.Join(t.TempDir(), "e.db"), 0o600, &bolt.Options{InitialMmapSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	e := New(db, &Options{Limits: lim})
	t.Cleanup(func() { e.Close() })
	return e
}

// Ensure that the bbolt engine passes the seam's conformance suite.
func TestConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, lim engine.Limits) engine.Engine { return newEngine(t, lim) })
}

// BenchmarkEngineUpdate measures one Update with one Put, fsynced, through
// the seam and straight on bbolt: the difference is the seam's cost.
func BenchmarkEngineUpdate(b *testing.B) {
	e := newEngine(b, engine.Limits{})
	bucket := []byte("b")
	if err := e.Update(context.Background(), func(tx engine.Tx) error { return tx.CreateBucket(bucket) }); err != nil {
		b.Fatal(err)
	}
	val := make([]byte, 100)
	for _, bc := range []struct {
		name   string
		update func(key []byte) error
	}{
		{"seam", func(key []byte) error {
			return e.Update(context.Background(), func(tx engine.Tx) error { return tx.Put(bucket, key, val) })
		}},
		{"bbolt", func(key []byte) error {
			return e.DB().Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(key, val) })
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			key := []byte(bc.name + "-0000")
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				n := len(key) - 4
				key[n], key[n+1], key[n+2], key[n+3] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
				if err := bc.update(key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
