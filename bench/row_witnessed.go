package bench

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"

	"github.com/kvfence/kvfence/internal/witnesstest"
	"github.com/kvfence/kvfence/witness"
)

// Witnesses of the kvfence_submit_witnessed row: three, of which two
// cosign every acknowledged write, so that one may be down.
const (
	benchWitnesses     = 3
	benchWitnessQuorum = 2
	// witnessSyncsPerTxn is a witness commit's fdatasyncs: bbolt's data
	// pages, then its meta page.
	witnessSyncsPerTxn = 2
)

// The layout of a bbolt meta page (go.etcd.io/bbolt internal/common): a
// 16-byte page header, then magic, version, page size and flags (4 bytes
// each), the root bucket (16), the freelist and high-water page ids, the
// transaction id (8 each), and an FNV-64a checksum of the fields before
// it, all in the host's byte order.
const (
	boltPageHeaderSize  = 16
	boltMetaSize        = 64
	boltMagic           = 0xED0CDAED
	boltVersion         = 2
	boltMetaChecksumEnd = boltPageHeaderSize + 56
)

// openSubmitWitnessed is kvfence_submit with witnesses: the receiver's
// write is acknowledged only once the anchor is written and
// benchWitnessQuorum of benchWitnesses witnesses cosigned its checkpoint,
// one cosign round per group commit.
func openSubmitWitnessed(_ context.Context, dir string, _ int) (cell, error) {
	f, err := newReceiverWith(dir, receiverOptions{witnesses: benchWitnesses, quorum: benchWitnessQuorum})
	if err != nil {
		return nil, err
	}
	return &submitCell{f: f}, nil
}

// witnessSet is a receiver's witnesses, run in this process, with what
// their fsyncs are counted from.
type witnessSet struct {
	set     *witnesstest.Set
	members []witness.Member
	// txid0 and size0 are each witness database's bbolt transaction id and
	// file size when the set started.
	txid0 []uint64
	size0 []int64
}

// startWitnesses starts n witnesses with their databases in dir, each
// trusting the receiver id with key pub, and returns them as quorum
// members over http.DefaultClient.
func startWitnesses(dir string, n int, id string, pub ed25519.PublicKey) (_ *witnessSet, err error) {
	set, err := witnesstest.Start(dir, n)
	if err != nil {
		return nil, err
	}
	ws := &witnessSet{set: set}
	defer func() {
		if err != nil {
			err = errors.Join(err, ws.close())
		}
	}()
	if err := set.TrustReceiver(id, pub); err != nil {
		return nil, err
	}
	if ws.members, err = set.Members(nil); err != nil {
		return nil, err
	}
	for _, w := range set.Witnesses {
		txid, err := boltFileTxid(w.Path)
		if err != nil {
			return nil, err
		}
		size, err := fileSize(w.Path)
		if err != nil {
			return nil, err
		}
		ws.txid0, ws.size0 = append(ws.txid0, txid), append(ws.size0, size)
	}
	return ws, nil
}

// syncs computes the witnesses' fsync-like calls since they started: each
// stored checkpoint is one bbolt commit of its own, two fdatasyncs, plus
// the growths of its file. Commits are counted from the transaction id in
// each database's meta pages, read from the file, since the witness holds
// bbolt's lock: a witness that committed a cosignature its answer came too
// late for (the round had its quorum) is counted too.
func (ws *witnessSet) syncs() (float64, error) {
	var n float64
	for i, w := range ws.set.Witnesses {
		txid, err := boltFileTxid(w.Path)
		if err != nil {
			return 0, err
		}
		size, err := fileSize(w.Path)
		if err != nil {
			return 0, err
		}
		n += float64(witnessSyncsPerTxn*(txid-ws.txid0[i])) + float64(boltGrowths(ws.size0[i], size))
	}
	return n, nil
}

// close stops every witness and closes its database.
func (ws *witnessSet) close() error {
	return ws.set.Close()
}

// boltFileTxid returns the transaction id of the newest valid meta page of
// the bbolt database at path, read from the file without opening it, so
// that it works beside the process that holds the database. A meta page
// being rewritten fails its checksum and is passed over, as bbolt does.
func boltFileTxid(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var best uint64
	found := false
	// Meta page 0 is at 0, page 1 at the page size that page 0 records
	// (or, if page 0 is torn, the system's, which bbolt uses by default).
	offsets := []int64{0, int64(os.Getpagesize())}
	if txid, pageSize, ok, err := readBoltMeta(f, 0); err != nil {
		return 0, err
	} else if ok {
		best, found, offsets = txid, true, []int64{int64(pageSize)}
	} else {
		offsets = offsets[1:]
	}
	for _, off := range offsets {
		txid, _, ok, err := readBoltMeta(f, off)
		if err != nil {
			return 0, err
		}
		if ok && (!found || txid > best) {
			best, found = txid, true
		}
	}
	if !found {
		return 0, fmt.Errorf("bench: %s: no valid bbolt meta page", path)
	}
	return best, nil
}

// readBoltMeta reads the meta page at off and reports its transaction id
// and page size, and whether it is valid (magic, version, checksum).
func readBoltMeta(r io.ReaderAt, off int64) (txid uint64, pageSize uint32, ok bool, err error) {
	buf := make([]byte, boltPageHeaderSize+boltMetaSize)
	if _, err := r.ReadAt(buf, off); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, 0, false, nil
		}
		return 0, 0, false, err
	}
	m := buf[boltPageHeaderSize:]
	order := binary.NativeEndian
	if order.Uint32(m[0:]) != boltMagic || order.Uint32(m[4:]) != boltVersion {
		return 0, 0, false, nil
	}
	h := fnv.New64a()
	h.Write(buf[boltPageHeaderSize:boltMetaChecksumEnd])
	if h.Sum64() != order.Uint64(buf[boltMetaChecksumEnd:]) {
		return 0, 0, false, nil
	}
	return order.Uint64(m[48:]), order.Uint32(m[8:]), true, nil
}
