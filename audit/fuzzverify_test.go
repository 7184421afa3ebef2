package audit

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// frameChain encodes stored records as the fuzz input of FuzzVerify: for
// each, the key and the value, each after its length as 2 bytes.
func frameChain(recs []record) []byte {
	var b []byte
	for _, r := range recs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.k)))
		b = append(b, r.k...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.v)))
		b = append(b, r.v...)
	}
	return b
}

// unframeChain is the inverse of frameChain; a short tail is dropped.
func unframeChain(b []byte) []record {
	var recs []record
	next := func() ([]byte, bool) {
		if len(b) < 2 {
			return nil, false
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			return nil, false
		}
		p := b[2 : 2+n]
		b = b[2+n:]
		return p, true
	}
	for {
		k, ok := next()
		if !ok {
			return recs
		}
		v, ok := next()
		if !ok {
			return recs
		}
		recs = append(recs, record{k, v})
	}
}

// FuzzVerify feeds arbitrary stored chains to the verifier against a fixed
// anchor. It must not panic, and a chain it reports ok must check out
// independently: keys are SeqKey(1), SeqKey(2), ..., every entry decodes
// with its key's seq and links to the one before, and the anchored seq has
// the anchored hash.
func FuzzVerify(f *testing.F) {
	recs, _ := testChain(f, 12)
	sc := checkpointOf(f, receiverKey, testReceiver, recs, 8)
	anchor := &MemAnchor{}
	if err := anchor.Store(nil, sc); err != nil {
		f.Fatal(err)
	}
	f.Add(frameChain(recs))
	f.Add(frameChain(recs[:8]))
	f.Add(frameChain(recs[:7]))
	f.Add(frameChain(append(append([]record(nil), recs[:3]...), recs[4:]...)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		chain := unframeChain(data)
		rep, err := Verify(VerifyOptions{Entries: entriesOf(chain), Anchor: anchor, PublicKey: pubOf(receiverKey), Receiver: testReceiver})
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if !rep.OK() {
			if rep.Err() == nil || rep.Detail == "" {
				t.Fatalf("problem %s without an error or detail", rep.Problem)
			}
			return
		}
		var prev Hash
		for i, r := range chain {
			seq := uint64(i + 1)
			e, err := DecodeEntry(r.v)
			if err != nil || !bytes.Equal(r.k, SeqKey(seq)) || e.Seq != seq || !bytes.Equal(e.Prev, prev[:]) {
				t.Fatalf("verified chain has a bad entry %d: %v", seq, err)
			}
			prev = HashEntry(r.v)
			if seq == sc.Seq && prev != sc.Head {
				t.Fatalf("verified chain has another hash at the anchored seq %d", seq)
			}
		}
		if uint64(len(chain)) < sc.Seq || rep.Entries != uint64(len(chain)) || rep.Head.Hash != prev {
			t.Fatalf("verified %d entries, head %v; the chain has %d, anchor at %d", rep.Entries, rep.Head, len(chain), sc.Seq)
		}
	})
}
