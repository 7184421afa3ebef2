package kvfence

import (
	"encoding/binary"
	"io"

	"github.com/kvfence/kvfence/engine/boltengine"
)

// bbolt's on-disk layout, for the tests that damage receiver files; the
// page check itself is the bbolt engine's (boltengine.CheckPages).
const (
	boltPageHeaderSize = 16
	boltElementSize    = 16
	boltMetaSize       = 64
	boltNoFreelist     = ^uint64(0)
	boltBranchPage     = 0x01
	boltLeafPage       = 0x02
	boltMetaPage       = 0x04
)

// ne is the byte order bbolt writes, the machine's.
var ne = binary.NativeEndian

// The page check and its error, under the names these tests use.
var (
	checkPages = boltengine.CheckPages
	errPages   = boltengine.ErrDamagedPages
)

// boltMeta is the part of a file's meta page the tests use.
type boltMeta struct{ root, freelist, pgid uint64 }

// pageChecker reads a file's meta page for the tests, as the page check
// does (boltengine.Layout).
type pageChecker struct {
	r        io.ReaderAt
	size     int64
	pageSize int64
	m        boltMeta
}

func (c *pageChecker) meta() error {
	l, err := boltengine.Layout(c.r, c.size)
	if err != nil {
		return err
	}
	c.pageSize, c.m = l.PageSize, boltMeta{root: l.Root, freelist: l.Freelist, pgid: l.HighWater}
	return nil
}
