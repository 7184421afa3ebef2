package boltfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
)

// CheckPages checks the page structure of the bbolt file r (size bytes)
// before bbolt maps it.
//
// bbolt keeps no checksum except on its two meta pages and trusts every
// page they reach. A damaged page can therefore send it into code that a
// recover cannot stop: a branch page that points back at one of its
// ancestors makes a cursor descend forever, growing its stack until the
// runtime aborts ("fatal error: out of memory" or a stack overflow), and
// bbolt's own Tx.Check recurses the same way, in a goroutine of its own.
// Other damage only panics, which the receiver recovers, or silently
// changes answers: a freelist entry that names a page in use makes the next
// write overwrite live data, and a key out of order hides a record (a
// missing receipt would let an action apply twice).
//
// CheckPages walks every reachable page iteratively and refuses the file
// unless: the meta page bbolt will use is valid; every page id is inside
// the high-water mark and the file; every page is reachable once only and
// is not also free; every page has the type its parent expects and names
// its own id; every element, key and value lies inside its page; keys are
// in strictly increasing order and inside the range their parent assigns;
// inline buckets are leaf pages without sub-buckets; the tree is at most
// maxTreeDepth deep; and the freelist is synced, in range and without
// duplicates. Its cost is one read of every reachable page.
func CheckPages(r io.ReaderAt, size int64) error { return checkPages(r, size, false) }

// CheckPagesUnsynced is CheckPages for a file that bbolt writes without a
// freelist (its NoFreelistSync): it also accepts a meta page that names no
// freelist. bbolt then finds the free pages at open by walking every
// bucket's tree in a goroutine of its own, where a fault or an endless
// descent could not be recovered. This check walks the same trees first
// and refuses every page that walk could fault or loop on (outside the
// high-water mark or the file, of the wrong type, reached twice, with
// elements outside it): on a file it accepts, that walk ends.
func CheckPagesUnsynced(r io.ReaderAt, size int64) error { return checkPages(r, size, true) }

func checkPages(r io.ReaderAt, size int64, unsynced bool) error {
	c := &pageChecker{r: r, size: size, unsynced: unsynced}
	if err := c.meta(); err != nil {
		return err
	}
	if err := c.freelist(); err != nil {
		return err
	}
	return c.tree(c.m.root)
}

// bbolt's on-disk layout (go.etcd.io/bbolt/internal/common), in the
// machine's byte order as bbolt writes it.
const (
	boltMagic          = 0xED0CDAED
	boltVersion        = 2
	boltPageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	boltElementSize    = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags u32, pos u32, ksize u32, vsize u32
	boltBucketHeader   = 16 // root pgid u64, sequence u64
	boltMetaSize       = 64 // magic, version, pageSize, flags u32; root, sequence, freelist, pgid, txid, checksum u64
	boltNoFreelist     = ^uint64(0)

	boltBranchPage   = 0x01
	boltLeafPage     = 0x02
	boltMetaPage     = 0x04
	boltFreelistPage = 0x10
	boltBucketLeaf   = 0x01

	// maxTreeDepth bounds the depth of one bucket's B+tree, and of bucket
	// nesting. A tree of 4 KiB pages holding 2^64 keys is far shallower.
	maxTreeDepth = 32
	// maxPageSpan bounds a page with its overflow pages, so that a damaged
	// overflow count cannot make the check allocate the whole file. A
	// receiver's largest page holds one target value (MaxTargetValueSize)
	// or a freelist; this leaves room for 30 million free pages.
	maxPageSpan = 256 << 20
)

var ne = binary.NativeEndian

// ErrPages is the error of a file whose pages are damaged; the caller
// wraps it in its BadFormat.
var ErrPages = errors.New("damaged bbolt page structure")

type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

type pageChecker struct {
	r        io.ReaderAt
	size     int64
	pageSize int64
	m        boltMeta
	// seen has a bit for every page below the high-water mark that is
	// reachable or free.
	seen []uint64
	buf  []byte // the page last read
	// unsynced accepts a file without a synced freelist.
	unsynced bool
}

func (c *pageChecker) fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrPages, fmt.Sprintf(format, args...))
}

// readMeta parses the meta page at off. ok is false when it does not
// validate, exactly when bbolt's Meta.Validate refuses it.
func (c *pageChecker) readMeta(off int64) (m boltMeta, ok bool) {
	var b [boltPageHeaderSize + boltMetaSize]byte
	if _, err := c.r.ReadAt(b[:], off); err != nil {
		return m, false
	}
	mb := b[boltPageHeaderSize:]
	h := fnv.New64a()
	h.Write(mb[:56])
	if ne.Uint32(mb[0:]) != boltMagic || ne.Uint32(mb[4:]) != boltVersion || ne.Uint64(mb[56:]) != h.Sum64() {
		return m, false
	}
	return boltMeta{pageSize: ne.Uint32(mb[8:]), root: ne.Uint64(mb[16:]), freelist: ne.Uint64(mb[32:]),
		pgid: ne.Uint64(mb[40:]), txid: ne.Uint64(mb[48:])}, true
}

// meta picks the meta page that bbolt will use: the page size from the
// first valid meta page bbolt finds (DB.getPageSize), then of the two meta
// pages the one with the higher txid if it validates, else the other
// (DB.meta).
func (c *pageChecker) meta() error {
	first, ok := c.readMeta(0)
	if !ok {
		// bbolt probes for the second meta page at every page size from
		// 1 KiB, since the page size is stored in the damaged first one.
		for i := 0; i <= 14; i++ {
			pos := int64(1024) << i
			if pos >= c.size-1024 {
				break
			}
			if first, ok = c.readMeta(pos); ok {
				break
			}
		}
	}
	if !ok {
		return c.fail("no valid meta page")
	}
	ps := int64(first.pageSize)
	if ps < 1024 || ps > 1<<16 || ps&(ps-1) != 0 {
		return c.fail("page size %d", ps)
	}
	c.pageSize = ps
	m0, ok0 := c.readMeta(0)
	m1, ok1 := c.readMeta(ps)
	// bbolt compares txids whether or not the pages validate.
	var tx0, tx1 uint64
	var b [boltPageHeaderSize + boltMetaSize]byte
	if _, err := c.r.ReadAt(b[:], 0); err == nil {
		tx0 = ne.Uint64(b[boltPageHeaderSize+48:])
	}
	if _, err := c.r.ReadAt(b[:], ps); err == nil {
		tx1 = ne.Uint64(b[boltPageHeaderSize+48:])
	}
	switch {
	case tx1 > tx0 && ok1, tx1 <= tx0 && !ok0 && ok1:
		c.m = m1
	case ok0:
		c.m = m0
	default:
		return c.fail("no valid meta page at page size %d", ps)
	}
	if c.m.pageSize != uint32(ps) {
		return c.fail("meta page names page size %d, file uses %d", c.m.pageSize, ps)
	}
	if c.m.pgid < 3 || c.m.pgid > uint64(c.size/ps) {
		return c.fail("high-water mark %d pages, file has %d", c.m.pgid, c.size/ps)
	}
	c.seen = make([]uint64, (c.m.pgid+63)/64)
	return nil
}

// mark records that pages id to id+overflow are in use, refusing any
// outside the high-water mark or already in use.
func (c *pageChecker) mark(id uint64, overflow uint32, what string) error {
	if id < 2 || id >= c.m.pgid || uint64(overflow) >= c.m.pgid-id {
		return c.fail("%s page %d (+%d) outside pages 2 to %d", what, id, overflow, c.m.pgid-1)
	}
	for p := id; p <= id+uint64(overflow); p++ {
		if c.seen[p/64]&(1<<(p%64)) != 0 {
			return c.fail("%s page %d is referenced twice, or is both in use and free", what, p)
		}
		c.seen[p/64] |= 1 << (p % 64)
	}
	return nil
}

// page reads page id, with its overflow pages, after checking its header.
// The bytes are valid until the next call.
func (c *pageChecker) page(id uint64, what string) ([]byte, uint16, error) {
	if id < 2 || id >= c.m.pgid {
		return nil, 0, c.fail("%s page %d outside pages 2 to %d", what, id, c.m.pgid-1)
	}
	if int64(cap(c.buf)) < c.pageSize {
		c.buf = make([]byte, c.pageSize)
	}
	buf := c.buf[:c.pageSize]
	if _, err := c.r.ReadAt(buf, int64(id)*c.pageSize); err != nil {
		return nil, 0, c.fail("%s page %d: %v", what, id, err)
	}
	flags, overflow := ne.Uint16(buf[8:]), ne.Uint32(buf[12:])
	if got := ne.Uint64(buf[0:]); got != id {
		return nil, 0, c.fail("%s page %d names itself %d", what, id, got)
	}
	if err := c.mark(id, overflow, what); err != nil {
		return nil, 0, err
	}
	if overflow == 0 {
		return buf, flags, nil
	}
	span := (int64(overflow) + 1) * c.pageSize
	if span > maxPageSpan {
		return nil, 0, c.fail("%s page %d spans %d pages", what, id, int64(overflow)+1)
	}
	if int64(cap(c.buf)) < span {
		c.buf = make([]byte, span)
		copy(c.buf, buf)
	}
	buf = c.buf[:span]
	if _, err := c.r.ReadAt(buf[c.pageSize:], (int64(id)+1)*c.pageSize); err != nil {
		return nil, 0, c.fail("%s page %d: %v", what, id, err)
	}
	return buf, flags, nil
}

// freelist checks the freelist page and marks every free page.
func (c *pageChecker) freelist() error {
	if c.m.freelist == boltNoFreelist {
		if c.unsynced {
			// Every page that the tree walk does not reach is free.
			return nil
		}
		// bbolt would rebuild the list by walking the tree in a goroutine
		// of its own, where a panic cannot be recovered: accepted only
		// from a caller that writes files so (CheckPagesUnsynced), since
		// the tree walk below must then run before bbolt's.
		return c.fail("no synced freelist")
	}
	p, flags, err := c.page(c.m.freelist, "freelist")
	if err != nil {
		return err
	}
	if flags != boltFreelistPage {
		return c.fail("freelist page %d has type %#x", c.m.freelist, flags)
	}
	idx, count := uint64(0), uint64(ne.Uint16(p[10:]))
	if count == 0xFFFF {
		if len(p) < boltPageHeaderSize+8 {
			return c.fail("freelist page %d is short", c.m.freelist)
		}
		idx, count = 1, ne.Uint64(p[boltPageHeaderSize:])
	}
	if count > uint64(len(p)-boltPageHeaderSize)/8-idx {
		return c.fail("freelist page %d lists %d ids, it has room for %d", c.m.freelist, count, (len(p)-boltPageHeaderSize)/8)
	}
	for i := range count {
		id := ne.Uint64(p[boltPageHeaderSize+(idx+i)*8:])
		if err := c.mark(id, 0, "free"); err != nil {
			return err
		}
	}
	return nil
}

// treeItem is a page still to visit, with the key range its parent
// assigned (lo inclusive, hi exclusive, nil for unbounded).
type treeItem struct {
	id           uint64
	depth, level int // depth in its bucket's tree; level of bucket nesting
	lo, hi       []byte
}

// tree walks the B+tree rooted at page root and every bucket reachable
// from it, without recursion.
func (c *pageChecker) tree(root uint64) error {
	stack := []treeItem{{id: root}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if it.depth > maxTreeDepth || it.level > maxTreeDepth {
			return c.fail("page %d is %d levels deep", it.id, max(it.depth, it.level))
		}
		p, flags, err := c.page(it.id, "tree")
		if err != nil {
			return err
		}
		switch flags {
		case boltBranchPage:
			children, err := c.branch(it, p)
			if err != nil {
				return err
			}
			stack = append(stack, children...)
		case boltLeafPage:
			buckets, err := c.leaf(p, it.lo, it.hi, it.level, pageName(it.id))
			if err != nil {
				return err
			}
			stack = append(stack, buckets...)
		default:
			return c.fail("page %d has type %#x, want a branch or leaf page", it.id, flags)
		}
	}
	return nil
}

// pageName and branchName name a page in an error; a where is formatted
// only when it is printed, since most pages are fine.
type pageName uint64
type branchName uint64

func (p pageName) String() string   { return fmt.Sprintf("page %d", uint64(p)) }
func (p branchName) String() string { return fmt.Sprintf("branch page %d", uint64(p)) }

// inlineName names an inline bucket on a page.
type inlineName struct {
	page fmt.Stringer
	key  []byte
}

func (n inlineName) String() string { return fmt.Sprintf("%s: inline bucket %q", n.page, n.key) }

// elements returns the count and checks that the element headers fit in p.
func (c *pageChecker) elements(p []byte, where fmt.Stringer) (int, error) {
	n := int(ne.Uint16(p[10:]))
	if boltPageHeaderSize+n*boltElementSize > len(p) {
		return 0, c.fail("%s: %d elements do not fit in %d bytes", where, n, len(p))
	}
	return n, nil
}

// span returns p[off+pos : off+pos+n], or false if that is outside p.
func span(p []byte, off int, pos, n uint32) ([]byte, bool) {
	start := uint64(off) + uint64(pos)
	end := start + uint64(n)
	if end > uint64(len(p)) {
		return nil, false
	}
	return p[start:end], true
}

// keyInRange checks that key follows prev and lies in [lo, hi).
func keyInRange(key, prev, lo, hi []byte, first bool) bool {
	if !first && bytes.Compare(prev, key) >= 0 {
		return false
	}
	if lo != nil && bytes.Compare(key, lo) < 0 {
		return false
	}
	return hi == nil || bytes.Compare(key, hi) < 0
}

func (c *pageChecker) branch(it treeItem, p []byte) ([]treeItem, error) {
	where := branchName(it.id)
	n, err := c.elements(p, where)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, c.fail("%s is empty", where)
	}
	keys := make([][]byte, n)
	ids := make([]uint64, n)
	for i := range n {
		off := boltPageHeaderSize + i*boltElementSize
		key, ok := span(p, off, ne.Uint32(p[off:]), ne.Uint32(p[off+4:]))
		if !ok {
			return nil, c.fail("%s: key %d lies outside the page", where, i)
		}
		if !keyInRange(key, keys[max(i-1, 0)], it.lo, it.hi, i == 0) {
			return nil, c.fail("%s: key %d is out of order", where, i)
		}
		keys[i] = bytes.Clone(key)
		ids[i] = ne.Uint64(p[off+8:])
	}
	children := make([]treeItem, n)
	for i := range n {
		hi := it.hi
		if i+1 < n {
			hi = keys[i+1]
		}
		children[i] = treeItem{id: ids[i], depth: it.depth + 1, level: it.level, lo: keys[i], hi: hi}
	}
	return children, nil
}

// leaf checks a leaf page (a real one, or an inline bucket's) and returns
// the root pages of the buckets it holds. Inline buckets are checked in
// place.
func (c *pageChecker) leaf(p []byte, lo, hi []byte, level int, where fmt.Stringer) ([]treeItem, error) {
	n, err := c.elements(p, where)
	if err != nil {
		return nil, err
	}
	var prev []byte
	var out []treeItem
	for i := range n {
		off := boltPageHeaderSize + i*boltElementSize
		flags, pos, ksize, vsize := ne.Uint32(p[off:]), ne.Uint32(p[off+4:]), ne.Uint32(p[off+8:]), ne.Uint32(p[off+12:])
		key, ok := span(p, off, pos, ksize)
		if !ok {
			return nil, c.fail("%s: key %d lies outside the page", where, i)
		}
		if !keyInRange(key, prev, lo, hi, i == 0) {
			return nil, c.fail("%s: key %d is out of order", where, i)
		}
		prev = key
		value, ok := span(p, off, pos+ksize, vsize)
		if !ok || pos+ksize < pos {
			return nil, c.fail("%s: value %d lies outside the page", where, i)
		}
		switch flags {
		case 0:
			continue
		case boltBucketLeaf:
		default:
			return nil, c.fail("%s: element %d has flags %#x", where, i, flags)
		}
		if level+1 > maxTreeDepth {
			return nil, c.fail("%s: buckets nested %d deep", where, level+1)
		}
		if len(value) < boltBucketHeader {
			return nil, c.fail("%s: bucket %q has a %d-byte header", where, key, len(value))
		}
		if root := ne.Uint64(value); root != 0 {
			out = append(out, treeItem{id: root, level: level + 1})
			continue
		}
		inline := value[boltBucketHeader:]
		in := inlineName{page: where, key: key}
		if len(inline) < boltPageHeaderSize || ne.Uint16(inline[8:]) != boltLeafPage {
			return nil, c.fail("%s is not a leaf page", in)
		}
		sub, err := c.leaf(inline, nil, nil, level+1, in)
		if err != nil {
			return nil, err
		}
		if len(sub) > 0 {
			// bbolt never writes a bucket inside an inline bucket.
			return nil, c.fail("%s holds a bucket", in)
		}
	}
	return out, nil
}

// Meta reads the meta page bbolt will use, as CheckPages does: the page
// size, the root bucket's page, the freelist's page and the high-water
// mark (the number of pages in use).
func Meta(r io.ReaderAt, size int64) (pageSize int64, root, freelist, pgid uint64, err error) {
	c := &pageChecker{r: r, size: size}
	if err := c.meta(); err != nil {
		return 0, 0, 0, 0, err
	}
	return c.pageSize, c.m.root, c.m.freelist, c.m.pgid, nil
}
