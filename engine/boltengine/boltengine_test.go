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
	return newEngineWith(t, lim, bolt.Options{})
}

// newEngineWith is newEngine on a database opened with bo.
func newEngineWith(t testing.TB, lim engine.Limits, bo bolt.Options) *Engine {
	// A commit that grows the memory map waits for open read
	// transactions; the isolation test commits while a View is open.
	bo.InitialMmapSize = 16 << 20
	db, err := bolt.Open(filepath.Join(t.TempDir(), "e.db"), 0o600, &bo)
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

// BenchmarkUpdateMixed measures an Update shaped like a receiver's write:
// reads in several buckets, a few of them of keys written earlier in the
// transaction, writes in three, and the last key of one; fsynced, and
// without fsync to show the CPU alone.
func BenchmarkUpdateMixed(b *testing.B) {
	for _, bc := range []struct {
		name string
		bo   bolt.Options
	}{
		{"sync", bolt.Options{}},
		{"sync/nofreelistsync", bolt.Options{NoFreelistSync: true}},
		{"sync/hashmap", bolt.Options{FreelistType: bolt.FreelistMapType}},
		{"nosync", bolt.Options{NoSync: true}},
		{"nosync/nofreelistsync", bolt.Options{NoSync: true, NoFreelistSync: true}},
		{"nosync/hashmap", bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := filledWith(b, 2000, bc.bo)
			buckets := [][]byte{[]byte("b"), []byte("c"), []byte("d"), []byte("e")}
			if err := e.Update(context.Background(), func(tx engine.Tx) error {
				for _, bk := range buckets[2:] {
					if err := tx.CreateBucket(bk); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			val := make([]byte, 256)
			keys := make([][]byte, 4000)
			for i := range keys {
				keys[i] = keyN(i)
			}
			b.ReportAllocs()
			writes, cpu := pageWrites(e), cpuTime()
			for i := 0; b.Loop(); i++ {
				err := e.Update(context.Background(), func(tx engine.Tx) error {
					for j, bk := range buckets {
						for k := range 3 {
							if _, err := tx.Get(bk, keys[2*((i+k*j*97)%2000)]); err != nil {
								return err
							}
						}
					}
					for _, bk := range buckets[1:] {
						if err := tx.Put(bk, keys[i%1000], val); err != nil {
							return err
						}
						if _, err := tx.Get(bk, keys[i%1000]); err != nil {
							return err
						}
					}
					_, _, err := tx.Last(buckets[3])
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(pageWrites(e)-writes)/float64(b.N), "pwrites/op")
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// pageWrites returns the pages e's database has written.
func pageWrites(e *Engine) int64 {
	st := e.DB().Stats()
	return st.TxStats.GetWrite()
}

// BenchmarkViewGets measures a View that reads eight keys in two
// buckets: a read-only bbolt transaction opens a bucket anew on each
// lookup, which the engine's transaction does once per bucket.
func BenchmarkViewGets(b *testing.B) {
	e := filled(b, 2000)
	keys := make([][]byte, 4000)
	for i := range keys {
		keys[i] = keyN(i)
	}
	buckets := [][]byte{[]byte("b"), []byte("c")}
	b.ReportAllocs()
	cpu := cpuTime()
	for i := 0; b.Loop(); i++ {
		err := e.View(context.Background(), func(tx engine.Tx) error {
			for k := range 8 {
				if _, err := tx.Get(buckets[k%2], keys[(i*7+k*131)%4000]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}
