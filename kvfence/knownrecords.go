package kvfence

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/maphash"

	"github.com/kvfence/kvfence/audit"
)

// Records edited under a running receiver. The state digest is checked at
// Open and signed with every checkpoint, but a decision reads single
// records: someone who can write the store and not sign (an etcd user of
// the prefix, a process writing the bbolt file) could put back a control
// record's "open" bytes, have a stale envelope applied, and put the "held"
// bytes back, after which the digest agrees again. So a writable receiver
// keeps a fingerprint of every state record it verified at Open (when the
// digest is recomputed from every record) or wrote since, and every record
// a decision reads is compared with it first: other bytes, a record that
// was not there, or a record that went missing are audit.ErrStateMismatch,
// a fault, and nothing is written.
//
// The fingerprints are kept in knownRecords: one open-addressing table per
// state bucket, of fixed-size slots (a 64-bit tag of the key, from a
// seeded maphash, and 128 bits of a SHA-256 keyed with a per-process
// random salt over the bucket, the key and the value): 24 bytes a slot,
// at most three quarters full. The tag only places a slot; the
// fingerprint, which names the key too, decides. Two keys with one tag
// (about n/2^64 per lookup) can only make a record look edited, never an
// edited one look known. A rewrite replaces its slot's fingerprint in
// place. No record of the fence is ever deleted; an app record (an
// effect's, effect.go) may be, and its slot is then removed by shifting
// the slots of its probe run back (remove).

// DefaultMaxRecords is the number of state records (control, grant, target,
// receipt, hold and app records together) a writable receiver keeps fingerprints of
// when Options.MaxRecords is zero: 1,000,000 scopes with a grant, a target
// and a receipt each, with as many again to spare. At the bound the tables
// take about 400 MiB.
const DefaultMaxRecords = 8 << 20

// knownRecords are the fingerprints of the state records as this receiver
// verified or wrote them. The commit leader uses it under wmu; Open fills
// one bucket's table per goroutine.
type knownRecords struct {
	seed maphash.Seed
	salt [16]byte
	tabs [6]recordTable // in the order of stateBuckets
	// limit bounds the records of all tables together.
	limit int
	// broken is set when a commit's change could not be applied to the
	// tables; they are then rebuilt before the next decision.
	broken bool
}

// recordFP is a record's fingerprint.
type recordFP [2]uint64

// recordSlot is one slot of a table; tag 0 marks it empty.
type recordSlot struct {
	tag uint64
	fp  recordFP
}

// recordTable is one bucket's slots, linear-probed; len(slots) is a power
// of two or zero.
type recordTable struct {
	slots []recordSlot
	n     int
}

// newKnownRecords returns empty tables with a fresh salt and seed.
func newKnownRecords(limit int) (*knownRecords, error) {
	k := &knownRecords{seed: maphash.MakeSeed(), limit: limit}
	if _, err := rand.Read(k.salt[:]); err != nil {
		return nil, fmt.Errorf("kvfence: record fingerprint salt: %w", err)
	}
	return k, nil
}

// records is how many records the tables hold.
func (k *knownRecords) records() int {
	n := 0
	for i := range k.tabs {
		n += k.tabs[i].n
	}
	return n
}

// bytes is the memory the tables' slots take.
func (k *knownRecords) bytes() int {
	n := 0
	for i := range k.tabs {
		n += len(k.tabs[i].slots) * 24
	}
	return n
}

// stateBucketIndex returns bucket's index in stateBuckets, or -1.
func stateBucketIndex(bucket []byte) int {
	switch string(bucket) {
	case string(bucketControl):
		return 0
	case string(bucketGrants):
		return 1
	case string(bucketTargets):
		return 2
	case string(bucketReceipts):
		return 3
	case string(bucketHolds):
		return 4
	case string(bucketApp):
		return 5
	}
	return -1
}

func (k *knownRecords) tag(key []byte) uint64 {
	t := maphash.Bytes(k.seed, key)
	if t == 0 {
		t = 1
	}
	return t
}

// fingerprinter computes fingerprints with one reusable hash; it is not
// safe for concurrent use.
type fingerprinter struct {
	k   *knownRecords
	h   hash.Hash
	sum [sha256.Size]byte
	hdr [1 + binary.MaxVarintLen64]byte
}

func (k *knownRecords) fingerprinter() *fingerprinter {
	return &fingerprinter{k: k, h: sha256.New()}
}

// of returns the fingerprint of the record (bucket b, key, raw). The key's
// length is hashed before it, so that no two (key, value) pairs hash the
// same bytes.
func (f *fingerprinter) of(b int, key, raw []byte) recordFP {
	f.h.Reset()
	f.h.Write(f.k.salt[:])
	f.hdr[0] = byte(b)
	n := binary.PutUvarint(f.hdr[1:], uint64(len(key)))
	f.h.Write(f.hdr[:1+n])
	f.h.Write(key)
	f.h.Write(raw)
	s := f.h.Sum(f.sum[:0])
	return recordFP{binary.LittleEndian.Uint64(s[0:8]), binary.LittleEndian.Uint64(s[8:16])}
}

// slot returns the table's slot (tag, fp), or nil if it holds none.
func (t *recordTable) slot(tag uint64, fp recordFP) *recordSlot {
	if len(t.slots) == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := tag & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		switch {
		case s.tag == 0:
			return nil
		case s.tag == tag && s.fp == fp:
			return s
		}
	}
}

// find reports whether the table holds the slot (tag, fp).
func (t *recordTable) find(tag uint64, fp recordFP) bool { return t.slot(tag, fp) != nil }

// hasTag reports whether any slot has tag: whether a record with a key of
// this tag is known.
func (t *recordTable) hasTag(tag uint64) bool {
	if len(t.slots) == 0 {
		return false
	}
	mask := uint64(len(t.slots) - 1)
	for i := tag & mask; ; i = (i + 1) & mask {
		switch t.slots[i].tag {
		case 0:
			return false
		case tag:
			return true
		}
	}
}

// insert adds the slot (tag, fp), growing the table first when it would
// be more than three quarters full.
func (t *recordTable) insert(tag uint64, fp recordFP) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	t.place(tag, fp)
	t.n++
}

func (t *recordTable) place(tag uint64, fp recordFP) {
	mask := uint64(len(t.slots) - 1)
	i := tag & mask
	for t.slots[i].tag != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = recordSlot{tag: tag, fp: fp}
}

func (t *recordTable) grow() {
	old := t.slots
	size := max(64, 2*len(old))
	t.slots = make([]recordSlot, size)
	for _, s := range old {
		if s.tag != 0 {
			t.place(s.tag, s.fp)
		}
	}
}

// replace gives the slot (tag, old) the fingerprint new, and reports
// whether there was one.
func (t *recordTable) replace(tag uint64, old, new recordFP) bool {
	s := t.slot(tag, old)
	if s != nil {
		s.fp = new
	}
	return s != nil
}

// remove removes the slot (tag, fp) and reports whether there was one.
// The slots after it in its probe run move back into the gap when their
// home is not between the gap and them, so that every slot stays
// reachable from its home without tombstones.
func (t *recordTable) remove(tag uint64, fp recordFP) bool {
	if len(t.slots) == 0 {
		return false
	}
	mask := uint64(len(t.slots) - 1)
	i := tag & mask
	for ; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.tag == 0 {
			return false
		}
		if s.tag == tag && s.fp == fp {
			break
		}
	}
	for j := (i + 1) & mask; t.slots[j].tag != 0; j = (j + 1) & mask {
		home := t.slots[j].tag & mask
		// A slot whose home lies cyclically in (i, j] stays: moved to i
		// it would be before its home, where a probe never looks.
		var stays bool
		if i <= j {
			stays = i < home && home <= j
		} else {
			stays = home > i || home <= j
		}
		if !stays {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = recordSlot{}
	t.n--
	return true
}

// filler adds the records of one bucket to its table while Open hashes
// them into the state digest.
type filler struct {
	k *knownRecords
	b int
	f *fingerprinter
}

func (k *knownRecords) filler(bucket []byte) *filler {
	if k == nil {
		return nil
	}
	return &filler{k: k, b: stateBucketIndex(bucket), f: k.fingerprinter()}
}

// add adds one record; a bucket that alone holds more records than the
// limit is ErrRecordLimit.
func (f *filler) add(key, raw []byte) error {
	if f == nil {
		return nil
	}
	t := &f.k.tabs[f.b]
	if t.n >= f.k.limit {
		return fmt.Errorf("%w: %s holds more than %d records", ErrRecordLimit, stateBuckets[f.b], f.k.limit)
	}
	t.insert(f.k.tag(key), f.f.of(f.b, key, raw))
	return nil
}

// checkLimit refuses tables that hold more records together than the limit.
func (k *knownRecords) checkLimit() error {
	if n := k.records(); n > k.limit {
		return fmt.Errorf("%w: the store holds %d state records, over the limit of %d", ErrRecordLimit, n, k.limit)
	}
	return nil
}

// touched is what one write transaction knows of a record it read or
// wrote: the fingerprint the tables hold for it (had, old), and the
// record as the transaction now holds it (present, cur).
type touched struct {
	b        int
	tag      uint64
	had      bool
	old, cur recordFP
	present  bool
	written  bool
}

// txRecords is a write transaction's view of knownRecords: the records it
// read (checked) or wrote, which reach the tables only if it commits.
// They are found by bucket and key tag: two keys of one tag in one
// transaction share an entry, whose fingerprint (which names the key)
// then matches neither's bytes but one, so such a collision can only
// refuse a record, never pass one.
type txRecords struct {
	k     *knownRecords
	f     *fingerprinter
	index map[touchKey]int32
	list  []touched
	// added counts records this transaction creates, addedIn per bucket.
	added   int
	addedIn [6]int
	// buf holds copies of the records read (copy).
	buf []byte
}

// touchKey finds a record's entry in a transaction.
type touchKey struct {
	tag uint64
	b   int
}

// copy returns a copy of raw that stays valid until the transaction's
// end, carved from a buffer the transaction reuses.
func (x *txRecords) copy(raw []byte) []byte {
	if len(x.buf)+len(raw) > cap(x.buf) {
		x.buf = make([]byte, 0, max(1024, len(raw)))
	}
	start := len(x.buf)
	x.buf = append(x.buf, raw...)
	return x.buf[start:len(x.buf):len(x.buf)]
}

// reset readies x for a transaction on k, keeping its map and buffers.
func (x *txRecords) reset(k *knownRecords) *txRecords {
	if x.f == nil || x.k != k {
		x.f = k.fingerprinter()
	}
	x.k = k
	if x.index == nil {
		x.index = make(map[touchKey]int32)
	}
	clear(x.index)
	x.list = x.list[:0]
	x.added, x.addedIn = 0, [6]int{}
	// Copies handed out in an earlier transaction may still be held by
	// its results: a new buffer is started, never the old one reused.
	x.buf = nil
	return x
}

// mismatch is the error for a record read whose bytes this receiver did
// not verify or write.
func mismatch(b int, key []byte, what string) error {
	return fmt.Errorf("%w: the %s record %q %s: it was changed in the store under the running receiver, "+
		"apart from its history; nothing was decided on it", audit.ErrStateMismatch, stateBuckets[b], key, what)
}

// check compares the record (b, key, raw) read in this transaction, raw
// nil for an absent one, with what the receiver knows of it.
func (x *txRecords) check(b int, key, raw []byte) (*touched, error) {
	k := touchKey{tag: x.k.tag(key), b: b}
	if i, ok := x.index[k]; ok {
		t := &x.list[i]
		switch {
		case raw == nil && t.present:
			return nil, mismatch(b, key, "is gone")
		case raw != nil && (!t.present || x.f.of(b, key, raw) != t.cur):
			return nil, mismatch(b, key, "is not the one this transaction read or wrote")
		}
		return t, nil
	}
	tab := &x.k.tabs[b]
	t := touched{b: b, tag: k.tag}
	if raw == nil {
		if tab.hasTag(t.tag) {
			return nil, mismatch(b, key, "is gone")
		}
	} else {
		fp := x.f.of(b, key, raw)
		if !tab.find(t.tag, fp) {
			return nil, mismatch(b, key, "has bytes this receiver neither verified nor wrote")
		}
		t.had, t.old, t.cur, t.present = true, fp, fp, true
	}
	x.index[k] = int32(len(x.list))
	x.list = append(x.list, t)
	return &x.list[len(x.list)-1], nil
}

// wrote records that this transaction stored raw under key, where it
// found old (nil: absent).
func (x *txRecords) wrote(b int, key, old, raw []byte) error {
	t, err := x.check(b, key, old)
	if err != nil {
		return err
	}
	if !t.present {
		if x.k.records()+x.added >= x.k.limit {
			return fmt.Errorf("%w: the store holds %d state records; Options.MaxRecords is %d", ErrRecordLimit,
				x.k.records()+x.added, x.k.limit)
		}
		x.added++
		x.addedIn[b]++
	}
	t.cur, t.present, t.written = x.f.of(b, key, raw), true, true
	return nil
}

// deleted records that this transaction removed the record under key,
// where it found old (nil: absent, and then nothing changes).
func (x *txRecords) deleted(b int, key, old []byte) error {
	t, err := x.check(b, key, old)
	if err != nil || !t.present {
		return err
	}
	x.added--
	x.addedIn[b]--
	t.present, t.written = false, true
	return nil
}

// count is how many records of bucket b the receiver knows as of this
// transaction: what a scan of the bucket must find, no more and no less.
func (x *txRecords) count(b int) int { return x.k.tabs[b].n + x.addedIn[b] }

// checkScan refuses a scan of bucket b that found n records where the
// receiver knows another number: every record a scan finds is checked
// when it is read, but a known record deleted under the running receiver
// would not be found at all, and a call that acts on every scope or grant
// (HoldAll, a recovery) would leave it out while reporting success.
func (w *wtx) checkScan(b int, n int) error {
	if w.recs == nil || n == w.recs.count(b) {
		return nil
	}
	return fmt.Errorf("%w: the store holds %d %s records, but this receiver knows %d: records were added or deleted "+
		"under the running receiver", audit.ErrStateMismatch, n, stateBuckets[b], w.recs.count(b))
}

// commit moves what a committed transaction wrote into the tables.
func (x *txRecords) commit() {
	for i := range x.list {
		t := &x.list[i]
		if !t.written {
			continue
		}
		tab := &x.k.tabs[t.b]
		switch {
		case t.had && t.present:
			if !tab.replace(t.tag, t.old, t.cur) {
				x.k.broken = true
			}
		case t.had:
			if !tab.remove(t.tag, t.old) {
				x.k.broken = true
			}
		case t.present:
			tab.insert(t.tag, t.cur)
		}
	}
	clear(x.index)
	x.list = x.list[:0]
}
