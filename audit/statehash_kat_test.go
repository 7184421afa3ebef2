package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// katRecord is one record of testdata/statehash/blake3-kat.txt with the
// expansion b3sum computed for it.
type katRecord struct {
	bucket     string
	key, value []byte
	expansion  []byte
}

// katField decodes a field of the known-answer file: "hex:" and the bytes,
// or "seq:N", N bytes of which byte i is i mod 251.
func katField(s string) ([]byte, error) {
	if h, ok := strings.CutPrefix(s, "hex:"); ok {
		return hex.DecodeString(h)
	}
	if n, ok := strings.CutPrefix(s, "seq:"); ok {
		size, err := strconv.Atoi(n)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad length %q", n)
		}
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i % 251)
		}
		return b, nil
	}
	return nil, fmt.Errorf("field %q is neither hex: nor seq:", s)
}

// readKAT reads the known answers: the records and the named sums.
func readKAT(t *testing.T) ([]katRecord, map[string]string) {
	t.Helper()
	f, err := os.Open("testdata/statehash/blake3-kat.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []katRecord
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0 || strings.HasPrefix(fields[0], "#"):
		case fields[0] == "record" && len(fields) == 5:
			var parts [4][]byte
			for i, s := range fields[1:4] {
				if parts[i], err = katField(s); err != nil {
					t.Fatalf("line %d: %v", line, err)
				}
			}
			if parts[3], err = hex.DecodeString(fields[4]); err != nil || len(parts[3]) != StateHashSize {
				t.Fatalf("line %d: expansion of %d bytes: %v", line, len(parts[3]), err)
			}
			recs = append(recs, katRecord{string(parts[0]), parts[1], parts[2], parts[3]})
		case fields[0] == "sum" && len(fields) == 3:
			sums[fields[1]] = fields[2]
		default:
			t.Fatalf("line %d: cannot parse %q", line, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(recs) < 10 || len(sums) < 4 {
		t.Fatalf("the known-answer file has %d records and %d sums", len(recs), len(sums))
	}
	return recs, sums
}

// laneSum is the digest of the records whose expansions are given,
// computed apart from StateHash: lane by lane, as 16-bit integers, then
// SHA-256 under the sum's prefix.
func laneSum(expansions ...[]byte) ([]byte, string) {
	var lanes [StateHashSize / 2]uint16
	for _, e := range expansions {
		for i := range lanes {
			lanes[i] += binary.LittleEndian.Uint16(e[2*i:])
		}
	}
	raw := make([]byte, 0, StateHashSize)
	for _, l := range lanes {
		raw = binary.LittleEndian.AppendUint16(raw, l)
	}
	sum := sha256.Sum256(append([]byte("kvfence/state-sum/v2\n"), raw...))
	return raw, hex.EncodeToString(sum[:])
}

// Ensure that a record's term is BLAKE3's output as the reference
// implementation computes it, and the digest of a set the lane-wise sum of
// those terms. testdata/statehash/blake3-kat.txt was written by
// testdata/statehash/gen.py ("python3 gen.py" in that directory), which
// frames each record as package documentation, "State Digest", says and
// expands it with "b3sum --length 2048 --raw" (b3sum 1.2.0, the Rust
// reference implementation), then sums the lanes and hashes them with
// Python's hashlib. The records include an empty one, empty keys and
// values, framings of exactly one and two BLAKE3 chunks and one byte past
// a chunk, two-byte lengths, values of 5,000, 65,536 and 100,003 bytes, a
// key that does not fit in the first chunk after the framing and a bucket
// name longer than a chunk.
func TestStateHash_KnownAnswers(t *testing.T) {
	recs, sums := readKAT(t)
	var all StateHash
	var exps [][]byte
	for i, r := range recs {
		var e StateElement
		e.SetRecord(r.bucket, r.key, r.value)
		var got []byte
		for _, w := range e.w {
			got = binary.LittleEndian.AppendUint64(got, w)
		}
		if !bytes.Equal(got, r.expansion) {
			t.Errorf("record %d (%q, %d-byte key, %d-byte value): expansion differs from b3sum's", i, r.bucket, len(r.key), len(r.value))
		}
		// Add hashes the record itself; the digest of the one record is
		// its expansion.
		var one StateHash
		one.Add(r.bucket, r.key, r.value)
		if raw, _ := one.AppendBinary(nil); !bytes.Equal(raw, r.expansion) {
			t.Errorf("record %d: Add's lanes differ from b3sum's expansion", i)
		}
		all.Add(r.bucket, r.key, r.value)
		exps = append(exps, r.expansion)
	}
	wantRaw, want := laneSum(exps...)
	if want != sums["all"] {
		t.Fatalf("the lane sums computed here (%s) are not the known answer's (%s)", want, sums["all"])
	}
	if raw, _ := all.AppendBinary(nil); !bytes.Equal(raw, wantRaw) {
		t.Error("the digest's lanes are not the lane-wise sums of the expansions")
	}
	if got := all.Sum(); hex.EncodeToString(got[:]) != sums["all"] {
		t.Errorf("Sum of every record = %x, want %s", got, sums["all"])
	}
	all.Add(recs[1].bucket, recs[1].key, recs[1].value)
	if got := all.Sum(); hex.EncodeToString(got[:]) != sums["all-with-control-twice"] {
		t.Errorf("Sum with the control record twice = %x, want %s", got, sums["all-with-control-twice"])
	}
	var empty StateHash
	if got := empty.Sum(); hex.EncodeToString(got[:]) != sums["empty"] {
		t.Errorf("Sum of the empty set = %x, want %s", got, sums["empty"])
	}
	if _, s := laneSum(); s != sums["empty"] {
		t.Errorf("lane sum of nothing = %s, want %s", s, sums["empty"])
	}
	var two StateHash
	two.Add(recs[1].bucket, recs[1].key, recs[1].value)
	two.Add(recs[2].bucket, recs[2].key, recs[2].value)
	if got := two.Sum(); hex.EncodeToString(got[:]) != sums["two-records"] {
		t.Errorf("Sum of two records = %x, want %s", got, sums["two-records"])
	}
}
