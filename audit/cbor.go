package audit

import "math"

// CBOR major types (RFC 8949 §3.1) used by this package's formats.
const (
	majorUint  = 0 << 5
	majorNint  = 1 << 5
	majorBytes = 2 << 5
	majorText  = 3 << 5
	majorMap   = 5 << 5
)

// appendHead appends a CBOR item head in its shortest form, which is what
// core deterministic encoding (RFC 8949 §4.2.1) requires.
func appendHead(b []byte, major byte, n uint64) []byte {
	switch {
	case n < 24:
		return append(b, major|byte(n))
	case n <= math.MaxUint8:
		return append(b, major|24, byte(n))
	case n <= math.MaxUint16:
		return append(b, major|25, byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		return append(b, major|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, major|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
		byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// headSize is the length of appendHead's output for n.
func headSize(n uint64) int {
	switch {
	case n < 24:
		return 1
	case n <= math.MaxUint8:
		return 2
	case n <= math.MaxUint16:
		return 3
	case n <= math.MaxUint32:
		return 5
	}
	return 9
}

func appendInt(b []byte, v int64) []byte {
	if v < 0 {
		return appendHead(b, majorNint, uint64(^v))
	}
	return appendHead(b, majorUint, uint64(v))
}

func appendBytes(b []byte, p []byte) []byte {
	return append(appendHead(b, majorBytes, uint64(len(p))), p...)
}

func appendText(b []byte, s string) []byte {
	return append(appendHead(b, majorText, uint64(len(s))), s...)
}
