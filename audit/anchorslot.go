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
// generation gen. It allocates nothing if b has room for them.
func appendSlot(b []byte, gen uint64, sc *SignedCheckpoint) ([]byte, error) {
	if err := checkCheckpoint(&sc.Checkpoint); err != nil {
		return nil, err
	}
	if gen == 0 {
		return nil, errors.New("audit: anchor slot generation 0")
	}
	// The anchor text goes after room for the header, which the text's
	// length and checksum complete.
	start := len(b)
	b = append(b, zeroSlot[:slotHeaderLen]...)
	b = appendAnchor(b, sc)
	var header [slotHeaderLen]byte
	copy(b[start:], appendSlotHeader(header[:0], gen, b[start+slotHeaderLen:]))
	return append(b, zeroSlot[:AnchorSlotSize-(len(b)-start)]...), nil
}

// zeroSlot supplies a slot's zero bytes: room for its header, and its
// padding.
var zeroSlot [AnchorSlotSize]byte

// appendSlotHeader appends the header of a slot holding text at generation
// gen, checksum included.
func appendSlotHeader(b []byte, gen uint64, text []byte) []byte {
	start := len(b)
	b = append(b, slotMagic...)
	b = appendPadded(b, gen, 20)
	b = append(b, " len="...)
	b = appendPadded(b, uint64(len(text)), 4)
	sum := slotSum(b[start:], text)
	b = append(b, " sha256="...)
	b = hex.AppendEncode(b, sum[:])
	return append(b, '\n')
}

// slotSum returns the SHA-256 of a slot header's beginning followed by
// its text, hashed from one array on the stack rather than a heap-allocated
// digest.
func slotSum(prefix, text []byte) [sha256.Size]byte {
	var buf [slotLenEnd + MaxCheckpointSize]byte
	if len(prefix)+len(text) > len(buf) {
		h := sha256.New()
		h.Write(prefix)
		h.Write(text)
		return [sha256.Size]byte(h.Sum(nil))
	}
	n := copy(buf[:], prefix)
	n += copy(buf[n:], text)
	return sha256.Sum256(buf[:n])
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

// slotError says why parseSlot refused a slot: the problem, the
// generation the header names (0 if it does not name one) and a
// description.
type slotError struct {
	problem SlotProblem
	gen     uint64
	msg     string
}

func (e *slotError) Error() string {
	if e.gen == 0 {
		return e.msg
	}
	return fmt.Sprintf("generation %d: %s", e.gen, e.msg)
}

// parseSlot decodes one slot strictly: the header exactly as appendSlot
// writes it, a checksum that matches, an anchor in canonical form and zero
// padding. An all-zero slot is errSlotEmpty; any other refusal is a
// *slotError.
func parseSlot(s []byte) (anchorSlot, error) {
	if len(s) != AnchorSlotSize {
		return anchorSlot{}, &slotError{problem: SlotMalformedHeader, msg: fmt.Sprintf("%d bytes, want %d", len(s), AnchorSlotSize)}
	}
	if isZero(s) {
		return anchorSlot{}, errSlotEmpty
	}
	if !bytes.HasPrefix(s, []byte(slotMagic)) {
		return anchorSlot{}, &slotError{problem: SlotMalformedHeader, msg: fmt.Sprintf("does not begin with %q", slotMagic)}
	}
	gen, err1 := strconv.ParseUint(string(s[len(slotMagic):slotGenEnd]), 10, 64)
	n, err2 := strconv.ParseUint(string(s[slotLenEnd-4:slotLenEnd]), 10, 64)
	if err1 != nil || err2 != nil || gen == 0 || n > MaxCheckpointSize {
		return anchorSlot{}, &slotError{problem: SlotMalformedHeader, msg: "the header's generation or length is not a number in range"}
	}
	text := s[slotHeaderLen : slotHeaderLen+int(n)]
	// Re-formatting the header from the parsed numbers and the payload
	// checks its syntax, its digits and the checksum in one comparison.
	want := appendSlotHeader(make([]byte, 0, slotHeaderLen), gen, text)
	if !bytes.Equal(s[:slotSumStart], want[:slotSumStart]) || s[slotHeaderLen-1] != '\n' {
		return anchorSlot{}, &slotError{problem: SlotMalformedHeader,
			msg: fmt.Sprintf("the header is not spelled as written for generation %d and length %d", gen, n)}
	}
	if !bytes.Equal(s[:slotHeaderLen], want) {
		return anchorSlot{}, &slotError{problem: SlotChecksumMismatch, gen: gen,
			msg: "checksum mismatch: the header's SHA-256 does not match its generation, length and anchor"}
	}
	if !isZero(s[slotHeaderLen+int(n):]) {
		return anchorSlot{}, &slotError{problem: SlotNonZeroPadding, gen: gen, msg: "padding is not zero"}
	}
	sc, err := ParseAnchor(text)
	if err != nil {
		return anchorSlot{}, &slotError{problem: SlotBadAnchorText, gen: gen, msg: err.Error()}
	}
	return anchorSlot{gen, sc}, nil
}

// parseAnchorFile decodes a whole anchor file and returns the index and
// content of its current slot, the valid slot with the higher generation,
// and an account of the other slot if it is damaged. A damaged slot beside
// a valid one is what a crash during a write leaves in the slot being
// written, so it does not stop the file from being read; a file without a
// valid slot, or with two of the same generation, is ErrBadAnchor.
func parseAnchorFile(data []byte) (int, anchorSlot, *SlotDamage, error) {
	return parseAnchorFileMemo(data, nil)
}

// parseAnchorFileMemo is parseAnchorFile with the slots parsed through
// memo, if it is not nil.
func parseAnchorFileMemo(data []byte, memo *slotMemo) (int, anchorSlot, *SlotDamage, error) {
	if len(data) != AnchorFileSize {
		return 0, anchorSlot{}, nil, fmt.Errorf("%w: the file is damaged: %d bytes, want %d", ErrBadAnchor, len(data), AnchorFileSize)
	}
	cur, found := 0, false
	var slots [AnchorSlots]anchorSlot
	var errs [AnchorSlots]error
	for i := range slots {
		if s := data[i*AnchorSlotSize : (i+1)*AnchorSlotSize]; memo != nil {
			slots[i], errs[i] = memo.parse(i, s)
		} else {
			slots[i], errs[i] = parseSlot(s)
		}
		if errs[i] != nil {
			continue
		}
		switch {
		case !found || slots[i].gen > slots[cur].gen:
			cur, found = i, true
		case slots[i].gen == slots[cur].gen:
			return 0, anchorSlot{}, nil, fmt.Errorf("%w: the file is damaged: slots %d and %d both hold generation %d, "+
				"which no write leaves", ErrBadAnchor, cur, i, slots[i].gen)
		}
	}
	if !found {
		return 0, anchorSlot{}, nil, fmt.Errorf("%w: the file is damaged: no valid slot: slot 0: %v; slot 1: %v", ErrBadAnchor, errs[0], errs[1])
	}
	other := 1 - cur
	d := examineSlot(other, data[other*AnchorSlotSize:(other+1)*AnchorSlotSize], errs[other], slots[cur].gen)
	return cur, slots[cur], d, nil
}

// examineSlot describes slot i, which parseSlot refused with err, beside a
// current slot at generation cur; it returns nil if the slot is not
// damaged.
func examineSlot(i int, s []byte, err error, cur uint64) *SlotDamage {
	if err == nil {
		return nil
	}
	d := &SlotDamage{Slot: i, CurrentGeneration: cur, Detail: err.Error()}
	var se *slotError
	switch {
	case errors.Is(err, errSlotEmpty):
		// Only a new file has an empty slot, beside generation 1: every
		// later write fills the slot that is not current, so from
		// generation 2 on both slots have been written and zero bytes
		// where one was are damage, not an unused slot.
		if cur < 2 {
			return nil
		}
		d.Problem = SlotErased
		d.Detail = fmt.Sprintf("the slot is all zero bytes, but generation %d means both slots were written", cur)
		return d
	case errors.As(err, &se):
		d.Problem, d.ClaimedGeneration = se.problem, se.gen
	default:
		d.Problem = SlotMalformedHeader
	}
	text, gen := slotText(s, cur)
	switch {
	case gen != 0:
		d.ClaimedGeneration = gen // the checksum proves it
	case d.ClaimedGeneration == 0:
		// A header broken elsewhere may still name its generation.
		d.ClaimedGeneration = headerGen(s)
	}
	if text != nil {
		if sc, err := ParseAnchor(text); err == nil {
			d.Anchor = &sc
		}
	}
	return d
}

// slotText finds the anchor text of a damaged slot and, when the slot's
// checksum proves it, the generation it was written at. The checksum
// covers the generation, the length and the text, so a header damaged in
// its fixed words or digits is still identified when the checksum matches
// it rewritten for the generation it claims or for a neighbour of the
// current one (the only generations the other slot can legitimately hold);
// otherwise gen is 0 and the caller keeps what the header claims. The
// length is taken from the header or, if that is damaged, from where the
// zero padding begins.
func slotText(s []byte, cur uint64) (text []byte, gen uint64) {
	if len(s) != AnchorSlotSize {
		return nil, 0
	}
	var lens []int
	if n, err := strconv.ParseUint(string(s[slotLenEnd-4:slotLenEnd]), 10, 64); err == nil && n <= MaxCheckpointSize {
		lens = append(lens, int(n))
	}
	if n := lastNonZero(s[slotHeaderLen:]) + 1; n <= MaxCheckpointSize && (len(lens) == 0 || lens[0] != n) {
		lens = append(lens, n)
	}
	if len(lens) == 0 {
		return nil, 0
	}
	gens := []uint64{cur + 1, cur - 1}
	if g := headerGen(s); g != cur+1 && g != cur-1 {
		gens = append(gens, g)
	}
	header := make([]byte, 0, slotHeaderLen)
	for _, n := range lens {
		for _, g := range gens {
			if g == 0 {
				continue
			}
			header = appendSlotHeader(header[:0], g, s[slotHeaderLen:slotHeaderLen+n])
			if bytes.Equal(header[slotSumStart:slotHeaderLen-1], s[slotSumStart:slotHeaderLen-1]) {
				return s[slotHeaderLen : slotHeaderLen+n], g
			}
		}
	}
	return s[slotHeaderLen : slotHeaderLen+lens[0]], 0
}

// headerGen returns the generation that a slot's header digits name, or 0
// if they do not name one.
func headerGen(s []byte) uint64 {
	g, err := strconv.ParseUint(string(s[len(slotMagic):slotGenEnd]), 10, 64)
	if err != nil {
		return 0
	}
	return g
}

// lastNonZero returns the index of b's last non-zero byte, or -1.
func lastNonZero(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
