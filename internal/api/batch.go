package api

import (
	"errors"
	"fmt"
	"strconv"
)

// Bounds of a batch of envelopes (POST /v1/submit/batch).
const (
	// MaxBatchItems is the most envelopes one batch may carry, by default
	// on the server and always in the Go client's batches: a batch's
	// answer waits for its slowest decision, so a larger one only
	// lengthens that wait.
	MaxBatchItems = 256
	// DefaultMaxBatchSize bounds a batch's body when the server's option
	// is zero, and the Go client's batches: room for many ordinary
	// envelopes, far less than MaxBatchItems envelopes of the largest size.
	DefaultMaxBatchSize = 1 << 20
)

// Errors of DecodeBatch.
var (
	// ErrBatch means a batch body is not one canonical CBOR array of byte
	// strings with at least one element.
	ErrBatch = errors.New("api: not a batch of envelopes")
	// ErrBatchTooMany means a batch carries more envelopes than allowed.
	ErrBatchTooMany = errors.New("api: too many envelopes in a batch")
)

// CBOR major types the batch is made of (RFC 8949 §3.1).
const (
	cborBytes = 2
	cborArray = 4
)

// AppendBatch appends the batch body of envs: a CBOR array of byte
// strings, each head in its shortest form, which is the only form
// DecodeBatch accepts.
func AppendBatch(b []byte, envs [][]byte) []byte {
	b = appendCBORHead(b, cborArray, uint64(len(envs)))
	for _, e := range envs {
		b = appendCBORHead(b, cborBytes, uint64(len(e)))
		b = append(b, e...)
	}
	return b
}

// BatchSize is the length of AppendBatch's encoding of envs.
func BatchSize(envs [][]byte) int {
	n := cborHeadSize(uint64(len(envs)))
	for _, e := range envs {
		n += cborHeadSize(uint64(len(e))) + len(e)
	}
	return n
}

// BatchItemSize is what one envelope of n bytes adds to a batch's body.
func BatchItemSize(n int) int { return cborHeadSize(uint64(n)) + n }

func appendCBORHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= 0xff:
		return append(b, m|24, byte(n))
	case n <= 0xffff:
		return append(b, m|25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		return append(b, m|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, m|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func cborHeadSize(n uint64) int {
	switch {
	case n < 24:
		return 1
	case n <= 0xff:
		return 2
	case n <= 0xffff:
		return 3
	case n <= 0xffffffff:
		return 5
	}
	return 9
}

// DecodeBatch returns the envelopes of a batch body: exactly what
// AppendBatch writes, with one to maxItems elements (ErrBatchTooMany past
// it, checked before anything is allocated for them). Anything else,
// an indefinite length, a head longer than it needs, another major type,
// bytes after the array, is ErrBatch, so that every batch has one
// encoding and what the server decides is what a log of the body shows.
// The envelopes are sub-slices of b.
func DecodeBatch(b []byte, maxItems int) ([][]byte, error) {
	n, rest, err := cborHead(b, cborArray, "the batch")
	if err != nil {
		return nil, err
	}
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: the batch is empty", ErrBatch)
	case n > uint64(maxItems):
		return nil, fmt.Errorf("%w: %d envelopes, over the limit of %d", ErrBatchTooMany, n, maxItems)
	case n > uint64(len(rest)):
		// Each element takes at least its one-byte head.
		return nil, fmt.Errorf("%w: %d envelopes announced in %d bytes", ErrBatch, n, len(rest))
	}
	envs := make([][]byte, n)
	for i := range envs {
		what := "envelope " + strconv.Itoa(i)
		var size uint64
		if size, rest, err = cborHead(rest, cborBytes, what); err != nil {
			return nil, err
		}
		if size > uint64(len(rest)) {
			return nil, fmt.Errorf("%w: %s is %d bytes, %d remain", ErrBatch, what, size, len(rest))
		}
		envs[i], rest = rest[:size:size], rest[size:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last envelope", ErrBatch, len(rest))
	}
	return envs, nil
}

// cborHead reads a data item's head of major type major, in its shortest
// form, and returns its argument and the bytes after it.
func cborHead(b []byte, major byte, what string) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, nil, fmt.Errorf("%w: %s is missing", ErrBatch, what)
	}
	if got := b[0] >> 5; got != major {
		return 0, nil, fmt.Errorf("%w: %s is CBOR major type %d, not %d", ErrBatch, what, got, major)
	}
	info := b[0] & 0x1f
	var size int
	switch {
	case info < 24:
		return uint64(info), b[1:], nil
	case info == 24:
		size = 1
	case info == 25:
		size = 2
	case info == 26:
		size = 4
	case info == 27:
		size = 8
	default:
		return 0, nil, fmt.Errorf("%w: %s has an indefinite or reserved length (additional information %d)", ErrBatch, what, info)
	}
	if len(b) < 1+size {
		return 0, nil, fmt.Errorf("%w: %s's head is cut short", ErrBatch, what)
	}
	var n uint64
	for _, c := range b[1 : 1+size] {
		n = n<<8 | uint64(c)
	}
	if cborHeadSize(n) != 1+size {
		return 0, nil, fmt.Errorf("%w: %s's length %d is not in its shortest form", ErrBatch, what, n)
	}
	return n, b[1+size:], nil
}

// Batch is the answer of POST /v1/submit/batch: one result per envelope,
// in the order of the request.
type Batch struct {
	// Results are the envelopes' answers.
	Results []BatchResult `json:"results"`
}

// BatchResult is one envelope's answer in a batch: what /v1/submit
// answers for it alone, its status beside its body.
type BatchResult struct {
	// Status is the HTTP status /v1/submit answers with: 200 applied or
	// already applied, 403 denied, and an error's status otherwise.
	Status int `json:"status"`
	// Result is the decision, for 200 and 403.
	Result *Submit `json:"result,omitempty"`
	// Error is the error, for any other status.
	Error *ErrorBody `json:"error,omitempty"`
}

// AppendBatchOpen, AppendBatchDecision, AppendBatchError and
// AppendBatchClose write a Batch answer element by element, byte for
// byte what encoding/json's Encoder with SetEscapeHTML(false) writes for
// the whole: the server answers batches on the submit path, where the
// reflective encoder's cost was measured before (AppendJSON).
func AppendBatchOpen(b []byte) []byte { return append(b, `{"results":[`...) }

// AppendBatchDecision appends the element of a decision; i is its index.
func AppendBatchDecision(b []byte, i, status int, s *Submit) []byte {
	b = appendBatchElem(b, i, status)
	b = append(b, `,"result":`...)
	b = s.AppendJSON(b)
	// AppendJSON ends the object with a newline, which only the whole
	// answer has.
	return append(b[:len(b)-1], '}')
}

// AppendBatchError appends the element of an error; i is its index.
func AppendBatchError(b []byte, i, status int, e ErrorBody) []byte {
	b = appendBatchElem(b, i, status)
	b = append(b, `,"error":{"code":`...)
	b = appendJSONString(b, e.Code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.Message)
	return append(b, "}}"...)
}

// AppendBatchClose ends the answer.
func AppendBatchClose(b []byte) []byte { return append(b, "]}\n"...) }

func appendBatchElem(b []byte, i, status int) []byte {
	if i > 0 {
		b = append(b, ',')
	}
	b = append(b, `{"status":`...)
	return strconv.AppendInt(b, int64(status), 10)
}
