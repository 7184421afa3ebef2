package kvfence

import (
	"testing"
	"unsafe"
)

// Ensure that the record tables take the memory the design states: 24-byte
// slots, tables of a power of two slots from 64, grown only when a table
// would be more than three quarters full, so between 32 and 64 bytes a
// record (50 at 1,000,000 records a table: 192 MiB for four such tables).
func TestKnownRecords_Bytes(t *testing.T) {
	if size := unsafe.Sizeof(recordSlot{}); size != 24 {
		t.Fatalf("a slot takes %d bytes, want 24", size)
	}
	tests := []struct {
		records, slots int
	}{
		{0, 0},
		{1, 64},
		{48, 64},
		{49, 128},
		{96, 128},
		{97, 256},
		{100_000, 1 << 18},
		{3 << 18, 1 << 20}, // exactly three quarters full
		{3<<18 + 1, 1 << 21},
	}
	for _, tt := range tests {
		k, err := newKnownRecords(DefaultMaxRecords)
		if err != nil {
			t.Fatal(err)
		}
		f := k.filler(bucketGrants)
		for i := range tt.records {
			var key [8]byte
			for j := range key {
				key[j] = byte(i >> (8 * j))
			}
			if err := f.add(key[:], nil); err != nil {
				t.Fatal(err)
			}
		}
		tab := k.tabs[stateBucketIndex(bucketGrants)]
		if len(tab.slots) != tt.slots || tab.n != tt.records || k.bytes() != 24*tt.slots {
			t.Errorf("%d records: %d slots (want %d), n %d, %d bytes", tt.records, len(tab.slots), tt.slots, tab.n, k.bytes())
		}
	}
}
