package bench

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// boltMode is how a bbolt row commits.
type boltMode int

const (
	boltUpdate boltMode = iota // one put per DB.Update
	boltBatch                  // one put per DB.Batch call, bbolt's defaults
	boltNoSync                 // one put per DB.Update with NoSync
)

var boltBucket = []byte("records")

// boltCell puts one RecordSize value per operation under an 8-byte
// big-endian key, the operation's number, into a plain bbolt database.
type boltCell struct {
	db     *bolt.DB
	path   string
	mode   boltMode
	record []byte
	// txid0 and size0 are the transaction id and file size at open.
	txid0 int
	size0 int64
	ops   atomic.Int64
}

func openBolt(dir string, mode boltMode) (cell, error) {
	path := filepath.Join(dir, "bolt.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: mode == boltNoSync})
	if err != nil {
		return nil, err
	}
	c := &boltCell{db: db, path: path, mode: mode, record: record(1)}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket(boltBucket)
		return err
	})
	if err == nil {
		c.txid0, err = c.txid()
	}
	if err == nil {
		c.size0, err = fileSize(path)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return c, nil
}

func (c *boltCell) op(_ context.Context, _ int, i int64) error {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], uint64(i))
	put := func(tx *bolt.Tx) error { return tx.Bucket(boltBucket).Put(key[:], c.record) }
	if c.mode == boltBatch {
		return c.db.Batch(put)
	}
	return c.db.Update(put)
}

// syncs computes bbolt's calls: two fdatasyncs per commit, commits counted
// by the transaction id, plus one fsync per growth of the file.
func (c *boltCell) syncs() (float64, error) {
	if c.mode == boltNoSync {
		return 0, nil
	}
	id, err := c.txid()
	if err != nil {
		return 0, err
	}
	size, err := fileSize(c.path)
	if err != nil {
		return 0, err
	}
	return float64(2*(id-c.txid0) + boltGrowths(c.size0, size)), nil
}

// txid returns the id of the newest committed write transaction.
func (c *boltCell) txid() (id int, err error) {
	err = c.db.View(func(tx *bolt.Tx) error {
		id = tx.ID()
		return nil
	})
	return id, err
}

func (c *boltCell) close() error { return c.db.Close() }

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// boltAllocSize is bbolt's default growth step (DefaultAllocSize).
const boltAllocSize = 16 << 20

// boltGrowths estimates how often bbolt grew a file from size a to size b,
// each growth costing one fsync (bbolt's NoGrowSync is off by default): up
// to 16 MiB the file takes the size of its memory map, which doubles from
// 32 KiB; beyond, each growth adds at least 16 MiB.
func boltGrowths(a, b int64) int {
	if b <= a {
		return 0
	}
	n := 0
	for s := int64(32 << 10); s <= boltAllocSize; s *= 2 {
		if s > a && s <= b {
			n++
		}
	}
	if b > boltAllocSize {
		n += max(1, int((b-max(a, boltAllocSize))/boltAllocSize))
	}
	return n
}
