package witness

import (
	"bytes"
	"encoding/base64"
	"fmt"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"golang.org/x/mod/sumdb/tlog"
)

// RecoverCheckpointPath is kvfence's own endpoint, beside add-checkpoint,
// at which a receiver recovered by its recovery key asks a witness to
// accept the re-admitted chain over the one the witness holds.
const RecoverCheckpointPath = "/kvfence/v1/recover-checkpoint"

// admissionLinePrefix begins a recover-checkpoint request's first line.
const admissionLinePrefix = "admission "

// MaxRecoverRequestSize bounds a recover-checkpoint request body: the
// admission line, 63 proof lines, the blank line and the largest signed
// note.
const MaxRecoverRequestSize = len(admissionLinePrefix) + (audit.MaxAdmissionSize+2)/3*4 + 2 + MaxProofLines*45 + checkpoint.MaxNoteSize

// RecoverCheckpointRequest is a parsed recover-checkpoint request body.
type RecoverCheckpointRequest struct {
	// Admission is the signed recovery admission (audit.SignedAdmission's
	// encoding) the receiver consumed, unverified.
	Admission []byte
	// Proof is the consistency proof from the tree the admission admits
	// (its admitted seq and root) to the tree SignedNote signs: the
	// recovered chain holds the head the recovery key decided on, and
	// nothing else in its place.
	Proof tlog.TreeProof
	// SignedNote is the receiver's checkpoint of the re-admitted chain, as
	// the receiver signed it, unverified; its kvfence-admission line must
	// name Admission.
	SignedNote []byte
}

// Marshal returns the request body: "admission " and the admission in
// standard padded base64 on the first line, the proof's hashes one per
// line (as in add-checkpoint), a blank line, and the signed note.
func (r RecoverCheckpointRequest) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(admissionLinePrefix)
	b.WriteString(base64.StdEncoding.EncodeToString(r.Admission))
	b.WriteByte('\n')
	appendProofLines(&b, r.Proof)
	b.Write(r.SignedNote)
	return b.Bytes()
}

// ParseRecoverCheckpoint reads a recover-checkpoint request body strictly:
// exactly the form Marshal writes (one spelling of the base64, an
// admission that decodes as a canonical signed admission, at most 63
// proof hashes, a non-empty note after exactly one blank line). The signatures are the witness's to
// check. Every error wraps ErrBadRequest.
func ParseRecoverCheckpoint(body []byte) (RecoverCheckpointRequest, error) {
	var r RecoverCheckpointRequest
	if len(body) > MaxRecoverRequestSize {
		return r, fmt.Errorf("%w: body is %d bytes, over the %d-byte limit", ErrBadRequest, len(body), MaxRecoverRequestSize)
	}
	line, rest, ok := bytes.Cut(body, []byte("\n"))
	if !ok {
		return r, fmt.Errorf("%w: no admission line", ErrBadRequest)
	}
	enc, ok := bytes.CutPrefix(line, []byte(admissionLinePrefix))
	if !ok {
		return r, fmt.Errorf("%w: first line is not \"admission BASE64\"", ErrBadRequest)
	}
	adm, err := base64.StdEncoding.Strict().DecodeString(string(enc))
	if err != nil || len(adm) == 0 || base64.StdEncoding.EncodeToString(adm) != string(enc) {
		return r, fmt.Errorf("%w: the admission is not standard padded base64", ErrBadRequest)
	}
	if _, err := audit.ParseSignedAdmission(adm); err != nil {
		return r, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	proof, rest, err := parseProofLines(rest)
	if err != nil {
		return r, err
	}
	if len(rest) == 0 {
		return r, fmt.Errorf("%w: no checkpoint after the blank line", ErrBadRequest)
	}
	r.Admission, r.Proof, r.SignedNote = adm, proof, rest
	return r, nil
}
