//go:build !windows

package audit

import (
	"bytes"
	"sync"
)

// anchorBuf holds the bytes of one anchor file read and one slot written.
// Buffers are reused through anchorBufs, so that a write allocates none.
type anchorBuf struct {
	// file has one byte more than the format allows, to tell a longer
	// file apart.
	file [AnchorFileSize + 1]byte
	slot [AnchorSlotSize]byte
}

var anchorBufs = sync.Pool{New: func() any { return new(anchorBuf) }}

// parsedAnchor remembers one anchor file's bytes, exactly, with what
// parseAnchorFile returns for them: the index and content of the current
// slot, of a file whose other slot is not damaged. parseAnchorFile depends
// on nothing but those bytes, so a file read later that holds the same
// bytes parses to the same result whoever wrote it, and one that holds
// other bytes, such as a write by another process or a damaged slot, is
// parsed. What it saves is parsing and checking, never reading: the
// compare-and-swap always compares against the file as read under the
// lock.
type parsedAnchor struct {
	mu   sync.Mutex
	ok   bool
	data [AnchorFileSize]byte
	cur  int
	slot anchorSlot
}

// lookup returns the parse of data if it is the remembered file.
func (p *parsedAnchor) lookup(data []byte) (int, anchorSlot, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ok || !bytes.Equal(data, p.data[:]) {
		return 0, anchorSlot{}, false
	}
	return p.cur, p.slot, true
}

// remember records that data parses to the current slot cur holding slot
// and another slot that is not damaged.
func (p *parsedAnchor) remember(data []byte, cur int, slot anchorSlot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ok = len(data) == AnchorFileSize
	copy(p.data[:], data)
	p.cur, p.slot = cur, slot
}

// rememberWrite records the file that writing slot, which holds next at
// generation gen, over slot i of data leaves: its current slot is i,
// holding next, and its other slot is data's current slot, not damaged.
// appendSlot and parseSlot are inverses (TestAnchorSlot_RoundTrip and
// FuzzAnchorSlotRoundTrip), so this is what parseAnchorFile returns for
// that file.
func (p *parsedAnchor) rememberWrite(data []byte, i int, slot []byte, gen uint64, next SignedCheckpoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ok = len(data) == AnchorFileSize && len(slot) == AnchorSlotSize
	copy(p.data[:], data)
	copy(p.data[i*AnchorSlotSize:], slot)
	p.cur, p.slot = i, anchorSlot{gen: gen, sc: next}
}

// maxParsedAnchors bounds the anchor files remembered, each about 8 KiB;
// a process writes one anchor per receiver or ledger it has open.
const maxParsedAnchors = 16

// parsedAnchors remembers the last file read or written at each anchor
// path. The path is only where to look: what is remembered is keyed on
// the file's bytes.
var parsedAnchors struct {
	mu sync.Mutex
	m  map[string]*parsedAnchor
}

// parsedFor returns the parsedAnchor for path, making one if needed.
func parsedFor(path string) *parsedAnchor {
	parsedAnchors.mu.Lock()
	defer parsedAnchors.mu.Unlock()
	if p, ok := parsedAnchors.m[path]; ok {
		return p
	}
	if parsedAnchors.m == nil {
		parsedAnchors.m = make(map[string]*parsedAnchor)
	}
	if len(parsedAnchors.m) >= maxParsedAnchors {
		// Forget any one; an entry still in use by a write in progress
		// stays correct, since it is keyed on bytes.
		for k := range parsedAnchors.m {
			delete(parsedAnchors.m, k)
			break
		}
	}
	p := new(parsedAnchor)
	parsedAnchors.m[path] = p
	return p
}
