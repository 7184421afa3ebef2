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

// slotMemo remembers, for each slot of one anchor file, the last bytes
// this process read or wrote there that parseSlot accepts, with what
// parseSlot returns for them. parseSlot depends on nothing but those
// bytes, so a slot read later that holds the same bytes parses to the same
// result whoever wrote it, and one that holds other bytes, such as a write
// by another process or damage, is parsed. What it saves is parsing and
// checking, never reading: the compare-and-swap always compares against
// the file as read under the lock.
//
// It also remembers whether those bytes were made durable in this file
// (durable, file): by this process's write and fdatasync, or by a
// reader's fdatasync after it read them. A reader that finds the same
// bytes in the same file again needs no fdatasync to return them. The
// bytes hold their slot's generation, which every write raises, so a
// slot never holds them again once another write replaced them.
type slotMemo struct {
	mu      sync.Mutex
	ok      [AnchorSlots]bool
	data    [AnchorSlots][AnchorSlotSize]byte
	slots   [AnchorSlots]anchorSlot
	durable [AnchorSlots]bool
	file    [AnchorSlots]anchorStat
}

// parse returns parseSlot(s) for s read from slot i.
func (m *slotMemo) parse(i int, s []byte) (anchorSlot, error) {
	if slot, ok := m.lookup(i, s); ok {
		return slot, nil
	}
	slot, err := parseSlot(s)
	if err == nil {
		m.remember(i, s, slot)
	}
	return slot, err
}

func (m *slotMemo) lookup(i int, s []byte) (anchorSlot, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.ok[i] || !bytes.Equal(s, m.data[i][:]) {
		return anchorSlot{}, false
	}
	return m.slots[i], true
}

// remember records that slot i holds s, which parses to slot. After a
// write, s is what appendSlot wrote for slot; appendSlot and parseSlot
// are inverses (TestAnchorSlot_RoundTrip, FuzzAnchorSlotRoundTrip), so
// that is what parseSlot returns for s.
func (m *slotMemo) remember(i int, s []byte, slot anchorSlot) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ok[i] = len(s) == AnchorSlotSize
	copy(m.data[i][:], s)
	m.slots[i] = slot
	m.durable[i] = false
}

// markDurable records that slot i of file holds s durably, if s is what
// the memo holds for slot i.
func (m *slotMemo) markDurable(i int, s []byte, file anchorStat) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ok[i] && bytes.Equal(s, m.data[i][:]) {
		m.durable[i], m.file[i] = true, file
	}
}

// isDurable reports whether slot i of file is known to hold s durably.
func (m *slotMemo) isDurable(i int, s []byte, file anchorStat) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ok[i] && m.durable[i] && sameFile(m.file[i], file) && bytes.Equal(s, m.data[i][:])
}

// maxSlotMemos bounds the anchor files remembered, each about 8 KiB; a
// process writes one anchor per receiver or ledger it has open.
const maxSlotMemos = 16

// slotMemos holds the slotMemo of each anchor path. The path is only
// where to look: what is remembered is keyed on the slots' bytes.
var slotMemos struct {
	mu sync.Mutex
	m  map[string]*slotMemo
}

// slotMemoFor returns the slotMemo for path, making one if needed.
func slotMemoFor(path string) *slotMemo {
	slotMemos.mu.Lock()
	defer slotMemos.mu.Unlock()
	if m, ok := slotMemos.m[path]; ok {
		return m
	}
	if slotMemos.m == nil {
		slotMemos.m = make(map[string]*slotMemo)
	}
	if len(slotMemos.m) >= maxSlotMemos {
		// Forget any one; a write in progress that still uses it stays
		// correct, since it is keyed on bytes.
		for k := range slotMemos.m {
			delete(slotMemos.m, k)
			break
		}
	}
	m := new(slotMemo)
	slotMemos.m[path] = m
	return m
}
