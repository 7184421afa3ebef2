package checkpoint

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
)

// Extension line prefixes of a receiver's checkpoint note, each followed
// by one space and its value. A receiver's checkpoint carries exactly these
// five lines, in this order, after its root; ParseReceiverState refuses any
// other spelling.
const (
	// ExtHead is followed by the lowercase hex hash-chain hash of the
	// entry at the tree size (the audit head).
	ExtHead = "kvfence-head"
	// ExtState is followed by the lowercase hex state digest as of the
	// head.
	ExtState = "kvfence-state"
	// ExtEpochHighWater is followed by the decimal highest epoch of any
	// scope as of the head.
	ExtEpochHighWater = "kvfence-epoch-high-water"
	// ExtAt is followed by the decimal Unix nanoseconds, on the
	// receiver's clock, of the commit that the checkpoint covers.
	ExtAt = "kvfence-at"
	// ExtAdmission is followed by "none", or by the lowercase hex SHA-256
	// of the newest consumed recovery admission, a space, and its decimal
	// At in Unix nanoseconds.
	ExtAdmission = "kvfence-admission"
)

// ReceiverState is what a receiver's checkpoint note says beside its tree:
// the fields of its audit checkpoint (audit.Checkpoint) other than the
// receiver id and seq, which the origin and the tree size carry.
type ReceiverState struct {
	// Head is the hash-chain hash of the entry at the tree size.
	Head audit.Hash
	// State is the state digest as of the head.
	State audit.Hash
	// EpochHighWater is the highest epoch of any scope as of the head.
	EpochHighWater uint64
	// At is the commit's time, Unix nanoseconds on the receiver's clock.
	At int64
	// Admission names the newest consumed recovery admission, zero if none.
	Admission audit.AdmissionRecord
}

// Extensions returns the extension lines of s, in the one order and
// spelling ParseReceiverState accepts.
func (s ReceiverState) Extensions() []string {
	adm := "none"
	if !s.Admission.IsZero() {
		adm = hex.EncodeToString(s.Admission.SHA256[:]) + " " + strconv.FormatInt(s.Admission.At, 10)
	}
	return []string{
		ExtHead + " " + hex.EncodeToString(s.Head[:]),
		ExtState + " " + hex.EncodeToString(s.State[:]),
		ExtEpochHighWater + " " + strconv.FormatUint(s.EpochHighWater, 10),
		ExtAt + " " + strconv.FormatInt(s.At, 10),
		ExtAdmission + " " + adm,
	}
}

// ParseReceiverState reads the extension lines of a receiver's checkpoint
// and returns ErrMalformed, naming the line, unless they are exactly the
// five lines Extensions writes.
func ParseReceiverState(ext []string) (ReceiverState, error) {
	var s ReceiverState
	if len(ext) != 5 {
		return s, fmt.Errorf("%w: %d extension lines, want the receiver's 5", ErrMalformed, len(ext))
	}
	val := func(i int, prefix string) (string, error) {
		v, ok := strings.CutPrefix(ext[i], prefix+" ")
		if !ok {
			return "", fmt.Errorf("%w: extension line %d is not %q", ErrMalformed, i+1, prefix+" ...")
		}
		return v, nil
	}
	var err error
	var v string
	if v, err = val(0, ExtHead); err == nil {
		s.Head, err = parseHex(ExtHead, v)
	}
	if err == nil {
		if v, err = val(1, ExtState); err == nil {
			s.State, err = parseHex(ExtState, v)
		}
	}
	if err == nil {
		if v, err = val(2, ExtEpochHighWater); err == nil {
			s.EpochHighWater, err = parseDecimal(ExtEpochHighWater, v, math.MaxUint64)
		}
	}
	if err == nil {
		if v, err = val(3, ExtAt); err == nil {
			var at uint64
			at, err = parseDecimal(ExtAt, v, math.MaxInt64)
			s.At = int64(at)
		}
	}
	if err == nil {
		if v, err = val(4, ExtAdmission); err == nil && v != "none" {
			h, at, ok := strings.Cut(v, " ")
			if !ok {
				return s, fmt.Errorf("%w: %s is neither \"none\" nor a hash and a time", ErrMalformed, ExtAdmission)
			}
			if s.Admission.SHA256, err = parseHex(ExtAdmission, h); err == nil {
				var n uint64
				n, err = parseDecimal(ExtAdmission, at, math.MaxInt64)
				s.Admission.At = int64(n)
			}
			if err == nil && s.Admission.IsZero() {
				err = fmt.Errorf("%w: %s names the zero admission; write \"none\"", ErrMalformed, ExtAdmission)
			}
			if err == nil && s.Admission.SHA256 == (audit.Hash{}) {
				err = fmt.Errorf("%w: %s has an all-zero hash", ErrMalformed, ExtAdmission)
			}
		}
	}
	return s, err
}

// parseHex reads a 32-byte hash in lowercase hex.
func parseHex(what, v string) (audit.Hash, error) {
	var h audit.Hash
	if len(v) != 2*len(h) || strings.ToLower(v) != v {
		return h, fmt.Errorf("%w: %s is not %d lowercase hex digits", ErrMalformed, what, 2*len(h))
	}
	if _, err := hex.Decode(h[:], []byte(v)); err != nil {
		return h, fmt.Errorf("%w: %s is not %d lowercase hex digits", ErrMalformed, what, 2*len(h))
	}
	return h, nil
}

// parseDecimal reads ASCII decimal, "0" or without a leading zero, no
// sign, at most limit.
func parseDecimal(what, v string, limit uint64) (uint64, error) {
	bad := v == "" || len(v) > 1 && v[0] == '0' || strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' }) >= 0
	n, err := strconv.ParseUint(v, 10, 64)
	if bad || err != nil || n > limit {
		return 0, fmt.Errorf("%w: %s %q is not a decimal number of at most %d", ErrMalformed, what, v, limit)
	}
	return n, nil
}

// FromSigned returns sc as the checkpoint of its note under origin: tree
// size its seq, root its Root, and the extension lines of ReceiverState.
// The receiver and the ledger sign and witnesses compare exactly this, so
// that one size has one body.
func FromSigned(origin string, sc audit.SignedCheckpoint) Checkpoint {
	st := ReceiverState{Head: sc.Head, State: sc.State, EpochHighWater: sc.EpochHighWater, At: sc.At, Admission: sc.Admission}
	return Checkpoint{Origin: origin, Size: sc.Seq, Root: tlog.Hash(sc.Root), Extensions: st.Extensions()}
}
