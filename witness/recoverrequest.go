package witness

import (
	"bytes"
	"encoding/base64"
	"fmt"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
)

// RecoverCheckpointPath is kvfence's own endpoint, beside add-checkpoint,
// at which a receiver recovered by its recovery key asks a witness to
// accept the re-admitted chain over the one the witness holds.
const RecoverCheckpointPath = "/kvfence/v1/recover-checkpoint"

// admissionLinePrefix begins a recover-checkpoint request's first line.
const admissionLinePrefix = "admission "

// MaxRecoverRequestSize bounds a recover-checkpoint request body: the
// admission line, the blank line and the largest signed note.
const MaxRecoverRequestSize = len(admissionLinePrefix) + (audit.MaxAdmissionSize+2)/3*4 + 2 + checkpoint.MaxNoteSize

// RecoverCheckpointRequest is a parsed recover-checkpoint request body.
type RecoverCheckpointRequest struct {
	// Admission is the signed recovery admission (audit.SignedAdmission's
	// encoding) the receiver consumed, unverified.
	Admission []byte
	// SignedNote is the receiver's checkpoint of the re-admitted chain, as
	// the receiver signed it, unverified; its kvfence-admission line must
	// name Admission.
	SignedNote []byte
}

// Marshal returns the request body: "admission " and the admission in
// standard padded base64 on the first line, a blank line, and the signed
// note.
func (r RecoverCheckpointRequest) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(admissionLinePrefix)
	b.WriteString(base64.StdEncoding.EncodeToString(r.Admission))
	b.WriteString("\n\n")
	b.Write(r.SignedNote)
	return b.Bytes()
}

// ParseRecoverCheckpoint reads a recover-checkpoint request body strictly:
// exactly the form Marshal writes (one spelling of the base64, an
// admission that decodes as a canonical signed admission, a non-empty
// note after exactly one blank line). The signatures are the witness's to
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
	rest, ok = bytes.CutPrefix(rest, []byte("\n"))
	if !ok {
		return r, fmt.Errorf("%w: no blank line after the admission", ErrBadRequest)
	}
	if len(rest) == 0 {
		return r, fmt.Errorf("%w: no checkpoint after the blank line", ErrBadRequest)
	}
	r.Admission, r.SignedNote = adm, rest
	return r, nil
}
