package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"lukechampine.com/blake3"
)

// gridRecord is one line of testdata/statehash/blake3-grid.txt: the
// lengths of a generated record and the SHA-256 of the expansion b3sum
// computed for it.
type gridRecord struct {
	blen, klen, vlen int
	sum              string
}

// gridBytes generates a grid record's bucket, key and value as grid.py
// does.
func gridBytes(g gridRecord) (string, []byte, []byte) {
	b := make([]byte, g.blen)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	k := make([]byte, g.klen)
	for i := range k {
		k[i] = byte(i % 251)
	}
	v := make([]byte, g.vlen)
	for i := range v {
		v[i] = byte(31*i + 7)
	}
	return string(b), k, v
}

func readGrid(t *testing.T) []gridRecord {
	t.Helper()
	f, err := os.Open("testdata/statehash/blake3-grid.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var grid []gridRecord
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 4 || len(fields[3]) != 64 {
			t.Fatalf("line %d: cannot parse %q", line, sc.Text())
		}
		var n [3]int
		for i := range n {
			if n[i], err = strconv.Atoi(fields[i]); err != nil || n[i] < 0 {
				t.Fatalf("line %d: bad length %q", line, fields[i])
			}
		}
		grid = append(grid, gridRecord{n[0], n[1], n[2], fields[3]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(grid) < 600 {
		t.Fatalf("the grid has %d records", len(grid))
	}
	return grid
}

// elementBytes returns e's 2048 bytes.
func elementBytes(e *StateElement) []byte {
	out := make([]byte, 0, StateHashSize)
	for _, w := range e.w {
		out = binary.LittleEndian.AppendUint64(out, w)
	}
	return out
}

// oneShot is a record's term computed apart from the chunked code: the
// whole framing in one write and the 2048 bytes in one read, which the
// hasher serves through its multi-chunk and parallel paths.
func oneShot(bucket string, key, value []byte) []byte {
	var in []byte
	in = append(in, statePrefix...)
	in = binary.AppendUvarint(in, uint64(len(bucket)))
	in = append(in, bucket...)
	in = binary.AppendUvarint(in, uint64(len(key)))
	in = append(in, key...)
	in = append(in, value...)
	h := blake3.New(32, nil)
	h.Write(in)
	out := make([]byte, StateHashSize)
	h.XOF().Read(out)
	return out
}

// Ensure that a record's term is b3sum's at every length where the code
// feeds the hasher differently: the framing before the value ending just
// short of, at and past one, two and three chunks (one write, a write of
// the framing and one of the key, or a bucket name longer than a chunk),
// values ending the input at chunk boundaries, and one- and two-byte
// lengths; that it is the one-shot computation's; and that it does not
// depend on the records hashed before it with the same pooled hasher and
// framing buffer (the grid forwards, then backwards).
func TestStateHash_GridKnownAnswers(t *testing.T) {
	grid := readGrid(t)
	backward := slices.Clone(grid)
	slices.Reverse(backward)
	for pass, order := range [][]gridRecord{grid, backward} {
		for _, g := range order {
			bucket, key, value := gridBytes(g)
			var e StateElement
			e.SetRecord(bucket, key, value)
			got := elementBytes(&e)
			if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != g.sum {
				t.Errorf("pass %d, (%d-byte bucket, %d-byte key, %d-byte value): the term is not b3sum's expansion", pass, g.blen, g.klen, g.vlen)
				continue
			}
			if pass == 0 && !bytes.Equal(got, oneShot(bucket, key, value)) {
				t.Errorf("(%d-byte bucket, %d-byte key, %d-byte value): b3sum's expansion is not the one-shot one", g.blen, g.klen, g.vlen)
			}
			var s StateHash
			s.Add(bucket, key, value)
			if raw, _ := s.AppendBinary(nil); !bytes.Equal(raw, got) {
				t.Errorf("pass %d, (%d-byte bucket, %d-byte key, %d-byte value): Add's lanes are not the term", pass, g.blen, g.klen, g.vlen)
			}
		}
	}
}

// FuzzStateElement checks that a record's term computed a chunk at a time
// is the one-shot computation's, and that Add adds exactly that term.
func FuzzStateElement(f *testing.F) {
	f.Add("control", []byte("configmap/prod/backup-policy"), []byte{0xa1})
	f.Add("", []byte{}, []byte{})
	f.Add(strings.Repeat("b", 1000), bytes.Repeat([]byte{1}, 5), bytes.Repeat([]byte{2}, 1030))
	f.Add("grants", bytes.Repeat([]byte{3}, 1001), bytes.Repeat([]byte{4}, 2048))
	f.Fuzz(func(t *testing.T, bucket string, key, value []byte) {
		var e StateElement
		e.SetRecord(bucket, key, value)
		got := elementBytes(&e)
		if want := oneShot(bucket, key, value); !bytes.Equal(got, want) {
			t.Fatalf("(%d-byte bucket, %d-byte key, %d-byte value): the chunked term differs from the one-shot one", len(bucket), len(key), len(value))
		}
		var s StateHash
		s.Add(bucket, key, value)
		if raw, _ := s.AppendBinary(nil); !bytes.Equal(raw, got) {
			t.Fatal("Add's lanes differ from SetRecord's term")
		}
	})
}
