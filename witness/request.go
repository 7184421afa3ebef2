package witness

import (
	"bytes"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/checkpoint"
)

// MaxProofLines is the most consistency-proof lines a request may carry,
// as c2sp.org/tlog-witness says.
const MaxProofLines = 63

// MaxRequestSize bounds an add-checkpoint request body: an old size line,
// 63 proof lines and the largest signed note.
const MaxRequestSize = 64 + MaxProofLines*45 + checkpoint.MaxNoteSize

// AddCheckpointRequest is a parsed add-checkpoint request body.
type AddCheckpointRequest struct {
	// OldSize is the size of the checkpoint the client believes the witness
	// cosigned last.
	OldSize uint64
	// Proof is the RFC 6962 consistency proof from OldSize to the new
	// checkpoint's size.
	Proof tlog.TreeProof
	// SignedNote is the new checkpoint as the log signed it, unverified.
	SignedNote []byte
}

// Marshal returns the request body: "old N", one base64 hash per line, a
// blank line and the signed note.
func (r AddCheckpointRequest) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "old %d\n", r.OldSize)
	for _, h := range r.Proof {
		b.WriteString(h.String())
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(r.SignedNote)
	return b.Bytes()
}

// ParseAddCheckpoint reads an add-checkpoint request body. It checks the
// framing only (old size, proof hashes, a non-empty note after the blank
// line); the note is checked against the trusted key by the witness. Every
// error wraps ErrBadRequest.
func ParseAddCheckpoint(body []byte) (AddCheckpointRequest, error) {
	var r AddCheckpointRequest
	if len(body) > MaxRequestSize {
		return r, fmt.Errorf("%w: body is %d bytes, over the %d-byte limit", ErrBadRequest, len(body), MaxRequestSize)
	}
	line, rest, ok := bytes.Cut(body, []byte("\n"))
	if !ok {
		return r, fmt.Errorf("%w: no old size line", ErrBadRequest)
	}
	size, ok := strings.CutPrefix(string(line), "old ")
	if !ok {
		return r, fmt.Errorf("%w: first line is not \"old N\"", ErrBadRequest)
	}
	old, err := checkpoint.ParseSize(size)
	if err != nil {
		return r, fmt.Errorf("%w: old size: %v", ErrBadRequest, err)
	}
	r.OldSize = old
	for {
		line, rest, ok = bytes.Cut(rest, []byte("\n"))
		if !ok {
			return r, fmt.Errorf("%w: no blank line before the checkpoint", ErrBadRequest)
		}
		if len(line) == 0 {
			break
		}
		if len(r.Proof) == MaxProofLines {
			return r, fmt.Errorf("%w: more than %d proof lines", ErrBadRequest, MaxProofLines)
		}
		h, err := checkpoint.ParseHash(string(line))
		if err != nil {
			return r, fmt.Errorf("%w: proof line %d: %v", ErrBadRequest, len(r.Proof)+1, err)
		}
		r.Proof = append(r.Proof, h)
	}
	if len(rest) == 0 {
		return r, fmt.Errorf("%w: no checkpoint after the blank line", ErrBadRequest)
	}
	r.SignedNote = rest
	return r, nil
}
