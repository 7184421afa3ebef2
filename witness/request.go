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
	appendProofLines(&b, r.Proof)
	b.Write(r.SignedNote)
	return b.Bytes()
}

// appendProofLines writes one base64 hash per line and the blank line
// that ends them.
func appendProofLines(b *bytes.Buffer, proof tlog.TreeProof) {
	for _, h := range proof {
		b.WriteString(h.String())
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
}

// parseProofLines reads proof hashes, one per line, up to the blank line,
// and returns them with what follows that line. Every error wraps
// ErrBadRequest.
func parseProofLines(body []byte) (tlog.TreeProof, []byte, error) {
	var proof tlog.TreeProof
	for {
		line, rest, ok := bytes.Cut(body, []byte("\n"))
		if !ok {
			return nil, nil, fmt.Errorf("%w: no blank line before the checkpoint", ErrBadRequest)
		}
		body = rest
		if len(line) == 0 {
			return proof, body, nil
		}
		if len(proof) == MaxProofLines {
			return nil, nil, fmt.Errorf("%w: more than %d proof lines", ErrBadRequest, MaxProofLines)
		}
		h, err := checkpoint.ParseHash(string(line))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: proof line %d: %v", ErrBadRequest, len(proof)+1, err)
		}
		proof = append(proof, h)
	}
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
	if r.Proof, rest, err = parseProofLines(rest); err != nil {
		return r, err
	}
	if len(rest) == 0 {
		return r, fmt.Errorf("%w: no checkpoint after the blank line", ErrBadRequest)
	}
	r.SignedNote = rest
	return r, nil
}
