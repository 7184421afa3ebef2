package audit

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// majorArray is the CBOR major type of an array (RFC 8949 §3.1).
const majorArray = 4 << 5

// witnessedKeys is how many map keys the witnessed list adds: itself and
// the admitted root when it is not empty.
func witnessedKeys(a *Admission) uint64 {
	if len(a.Witnessed) == 0 {
		return 0
	}
	return 2 // witnessed, admitted_root
}

// MaxWitnessed bounds how many witnessed checkpoints one admission names.
const MaxWitnessed = 16

// maxWitnessNameLen bounds a witness's name in an admission, as the
// checkpoint package bounds a note key name.
const maxWitnessNameLen = 1024

// maxWitnessedSize is the largest tree size a witness may hold (2^62, as
// the checkpoint package has it).
const maxWitnessedSize = 1 << 62

// keyWitnessed is the admission's optional "witnessed" key with its CBOR
// text-string head; nine bytes long, it sorts after "receiver" and before
// "epoch_floor" and "admitted_seq".
const keyWitnessed = "\x69witnessed"

// WitnessedCheckpoint is a witness's latest cosigned checkpoint of the
// receiver as the recovery operator saw it when signing an admission.
type WitnessedCheckpoint struct {
	// Witness is the witness's own name: the key name of its
	// cosignatures, which is how the witness recognises itself.
	Witness string
	// Size is the tree size of the witness's latest checkpoint.
	Size uint64
	// Root is that tree's RFC 6962 root.
	Root Hash
}

// witnessedWire is one WitnessedCheckpoint on the wire.
type witnessedWire struct {
	Name string `cbor:"name"`
	Root []byte `cbor:"root"`
	Size uint64 `cbor:"size"`
}

// checkWitnessName refuses a name that is not one printable word, the
// rule of a note key name.
func checkWitnessName(name string) error {
	if name == "" || len(name) > maxWitnessNameLen || !utf8.ValidString(name) ||
		strings.IndexFunc(name, unicode.IsSpace) >= 0 || strings.Contains(name, "+") ||
		strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("witness name %q is empty, too long, or has a space, a \"+\" or a character that is not printable", name)
	}
	return nil
}

// checkWitnessed refuses a witnessed list that is too long, names a
// witness badly, is not sorted by name, or names one witness twice: one
// admission states one checkpoint per witness, and the sorted order makes
// its encoding the only one.
func checkWitnessed(ws []WitnessedCheckpoint) error {
	if len(ws) > MaxWitnessed {
		return fmt.Errorf("%w: %d witnessed checkpoints, over the limit of %d", ErrBadAdmission, len(ws), MaxWitnessed)
	}
	for i, w := range ws {
		if err := checkWitnessName(w.Witness); err != nil {
			return fmt.Errorf("%w: witnessed checkpoint %d: %w", ErrBadAdmission, i+1, err)
		}
		if w.Size > maxWitnessedSize {
			return fmt.Errorf("%w: witness %s: size %d is over 2^62", ErrBadAdmission, w.Witness, w.Size)
		}
		if i > 0 {
			switch c := strings.Compare(ws[i-1].Witness, w.Witness); {
			case c == 0:
				return fmt.Errorf("%w: witness %s is named twice", ErrBadAdmission, w.Witness)
			case c > 0:
				return fmt.Errorf("%w: witnessed checkpoints are not sorted by name: %s before %s", ErrBadAdmission, ws[i-1].Witness, w.Witness)
			}
		}
	}
	return nil
}

// appendWitnessed writes the "witnessed" key and its array; nothing when
// the list is empty, so that an admission without witnesses keeps the
// encoding (and the signature) it always had.
func appendWitnessed(b []byte, ws []WitnessedCheckpoint) []byte {
	if len(ws) == 0 {
		return b
	}
	b = appendHead(append(b, keyWitnessed...), majorArray, uint64(len(ws)))
	for _, w := range ws {
		b = appendHead(b, majorMap, 3)
		b = appendText(append(b, "\x64name"...), w.Witness)
		b = appendBytes(append(b, "\x64root"...), w.Root[:])
		b = appendHead(append(b, "\x64size"...), majorUint, w.Size)
	}
	return b
}

// parseWitnessed converts the wire list; canonical form and order are
// checked by the caller (checkAdmission, then re-encoding).
func parseWitnessed(ws []witnessedWire) ([]WitnessedCheckpoint, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	out := make([]WitnessedCheckpoint, len(ws))
	for i, w := range ws {
		if len(w.Root) != HashSize {
			return nil, fmt.Errorf("%w: witnessed checkpoint %d: root is %d bytes, want %d", ErrBadAdmission, i+1, len(w.Root), HashSize)
		}
		out[i] = WitnessedCheckpoint{Witness: w.Name, Size: w.Size, Root: Hash(w.Root)}
	}
	return out, nil
}

// Named returns the checkpoint the admission names for the witness, and
// false if it names none.
func (a Admission) Named(witness string) (WitnessedCheckpoint, bool) {
	for _, w := range a.Witnessed {
		if w.Witness == witness {
			return w, true
		}
	}
	return WitnessedCheckpoint{}, false
}

// CheckWitnesses refuses the admission unless every witness in latest,
// each witness's latest checkpoint of the receiver as it answered just
// now, is named in the admission at exactly that size and root; a witness
// that answered that it holds nothing (Size 0, the empty tree's root) must
// not be named. The error wraps ErrAdmissionMismatch and names the first
// witness that differs. The recovery key thereby decided against what the
// witnesses hold now, not something older that they have since moved past.
// Witnesses named in the admission but absent from latest (they did not
// answer) are not judged here: each judges its own entry when asked to
// accept the recovery.
func (a Admission) CheckWitnesses(latest []WitnessedCheckpoint, emptyRoot Hash) error {
	for _, got := range latest {
		named, ok := a.Named(got.Witness)
		none := got.Size == 0 && got.Root == emptyRoot
		switch {
		case !ok && none:
			continue
		case !ok:
			return fmt.Errorf("%w: witness %s holds size %d, root %x, which the admission does not name",
				ErrAdmissionMismatch, got.Witness, got.Size, got.Root[:])
		case none:
			return fmt.Errorf("%w: the admission names witness %s at size %d, but it holds no checkpoint",
				ErrAdmissionMismatch, got.Witness, named.Size)
		case named.Size != got.Size || named.Root != got.Root:
			return fmt.Errorf("%w: the admission names witness %s at size %d, root %x, but it holds size %d, root %x",
				ErrAdmissionMismatch, got.Witness, named.Size, named.Root[:], got.Size, got.Root[:])
		}
	}
	return nil
}
