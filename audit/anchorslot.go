package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// The anchor file is AnchorSlots slots of AnchorSlotSize bytes each; the
// format is specified in the package documentation.
const (
	AnchorSlots    = 2
	AnchorSlotSize = 4096
	AnchorFileSize = AnchorSlots * AnchorSlotSize
)

// slotMagic begins every non-empty slot, naming format and version.
const slotMagic = "kvfence-anchor-slot v1 gen="

// Offsets in a slot header, which has one fixed length:
//
//	kvfence-anchor-slot v1 gen=<20 digits> len=<4 digits> sha256=<64 hex>\n
const (
	slotGenEnd    = len(slotMagic) + 20
	slotLenEnd    = slotGenEnd + len(" len=") + 4
	slotSumStart  = slotLenEnd + len(" sha256=")
	slotHeaderLen = slotSumStart + 2*sha256.Size + 1
	// maxSlotPayload is what fits in a slot after its header.
	maxSlotPayload = AnchorSlotSize - slotHeaderLen
)

// The longest anchor text must fit in a slot, and its length in four digits.
var _ [maxSlotPayload - MaxCheckpointSize]struct{}
var _ [9999 - MaxCheckpointSize]struct{}

// anchorSlot is one decoded slot: a signed checkpoint and the generation
// that orders it against the other slot.
type anchorSlot struct {
	gen uint64
	sc  SignedCheckpoint
}

// appendSlot appends the AnchorSlotSize bytes of a slot holding sc at
// generation gen.
func appendSlot(b []byte, gen uint64, sc *SignedCheckpoint) ([]byte, error) {
	text, err := sc.MarshalAnchor()
	if err != nil {
		return nil, err
	}
	if gen == 0 {
		return nil, errors.New("audit: anchor slot generation 0")
	}
	start := len(b)
	b = appendSlotHeader(b, gen, text)
	b = append(b, text...)
	return append(b, make([]byte, AnchorSlotSize-(len(b)-start))...), nil
}

// appendSlotHeader appends the header of a slot holding text at generation
// gen, checksum included.
func appendSlotHeader(b []byte, gen uint64, text []byte) []byte {
	start := len(b)
	b = append(b, slotMagic...)
	b = appendPadded(b, gen, 20)
	b = append(b, " len="...)
	b = appendPadded(b, uint64(len(text)), 4)
	h := sha256.New()
	h.Write(b[start:])
	h.Write(text)
	b = append(b, " sha256="...)
	b = hex.AppendEncode(b, h.Sum(nil))
	return append(b, '\n')
}

// appendPadded appends v in decimal, zero-padded to width digits.
func appendPadded(b []byte, v uint64, width int) []byte {
	var d [20]byte
	s := strconv.AppendUint(d[:0], v, 10)
	for range width - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

// errSlotEmpty marks a slot of zero bytes: not damage, only nothing yet.
var errSlotEmpty = errors.New("empty")

// parseSlot decodes one slot strictly: the header exactly as appendSlot
// writes it, a checksum that matches, an anchor in canonical form and zero
// padding. An all-zero slot is errSlotEmpty.
func parseSlot(s []byte) (anchorSlot, error) {
	if len(s) != AnchorSlotSize {
		return anchorSlot{}, fmt.Errorf("%d bytes, want %d", len(s), AnchorSlotSize)
	}
	if isZero(s) {
		return anchorSlot{}, errSlotEmpty
	}
	if !bytes.HasPrefix(s, []byte(slotMagic)) {
		return anchorSlot{}, fmt.Errorf("does not begin with %q", slotMagic)
	}
	gen, err1 := strconv.ParseUint(string(s[len(slotMagic):slotGenEnd]), 10, 64)
	n, err2 := strconv.ParseUint(string(s[slotLenEnd-4:slotLenEnd]), 10, 64)
	if err1 != nil || err2 != nil || gen == 0 || n > MaxCheckpointSize {
		return anchorSlot{}, errors.New("malformed header")
	}
	text := s[slotHeaderLen : slotHeaderLen+int(n)]
	// Re-formatting the header from the parsed numbers and the payload
	// checks its syntax, its digits and the checksum in one comparison.
	want := appendSlotHeader(make([]byte, 0, slotHeaderLen), gen, text)
	if !bytes.Equal(s[:slotSumStart], want[:slotSumStart]) || s[slotHeaderLen-1] != '\n' {
		return anchorSlot{}, errors.New("malformed header")
	}
	if !bytes.Equal(s[:slotHeaderLen], want) {
		return anchorSlot{}, fmt.Errorf("generation %d: checksum mismatch", gen)
	}
	if !isZero(s[slotHeaderLen+int(n):]) {
		return anchorSlot{}, fmt.Errorf("generation %d: padding is not zero", gen)
	}
	sc, err := ParseAnchor(text)
	if err != nil {
		return anchorSlot{}, fmt.Errorf("generation %d: %w", gen, err)
	}
	return anchorSlot{gen, sc}, nil
}

// parseAnchorFile decodes a whole anchor file and returns the index and
// content of its current slot: the valid slot with the higher generation.
// A damaged slot beside a valid one is what a crash during a write leaves
// in the slot being written, so it is skipped; a file without a valid slot,
// or with two of the same generation, is ErrBadAnchor.
func parseAnchorFile(data []byte) (int, anchorSlot, error) {
	if len(data) != AnchorFileSize {
		return 0, anchorSlot{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadAnchor, len(data), AnchorFileSize)
	}
	cur, found := 0, false
	var slots [AnchorSlots]anchorSlot
	var errs [AnchorSlots]error
	for i := range slots {
		slots[i], errs[i] = parseSlot(data[i*AnchorSlotSize : (i+1)*AnchorSlotSize])
		if errs[i] != nil {
			continue
		}
		switch {
		case !found || slots[i].gen > slots[cur].gen:
			cur, found = i, true
		case slots[i].gen == slots[cur].gen:
			return 0, anchorSlot{}, fmt.Errorf("%w: slots %d and %d both hold generation %d", ErrBadAnchor, cur, i, slots[i].gen)
		}
	}
	if !found {
		return 0, anchorSlot{}, fmt.Errorf("%w: no valid slot: slot 0: %v; slot 1: %v", ErrBadAnchor, errs[0], errs[1])
	}
	return cur, slots[cur], nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
