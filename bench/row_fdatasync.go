package bench

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
)

// fdatasyncCell appends a RecordSize record to one file shared by every
// writer and fdatasyncs it: the cost of making a small write durable, the
// floor under every durable row.
type fdatasyncCell struct {
	f      *os.File
	record []byte
	n      atomic.Int64
}

func openFdatasync(_ context.Context, dir string, _ int) (cell, error) {
	f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return &fdatasyncCell{f: f, record: record(0)}, nil
}

func (c *fdatasyncCell) op(_ context.Context, _ int, _ int64) error {
	if _, err := c.f.Write(c.record); err != nil {
		return err
	}
	c.n.Add(1)
	return fdatasync(c.f)
}

// syncs is exact: one fdatasync per operation.
func (c *fdatasyncCell) syncs() (float64, error) { return float64(c.n.Load()), nil }

func (c *fdatasyncCell) close() error { return c.f.Close() }

// record returns a RecordSize value that differs with seed, so that no
// layer below can take it for a repeated write.
func record(seed int64) []byte {
	b := make([]byte, RecordSize)
	x := uint64(seed)*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}
