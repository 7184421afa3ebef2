package backup_test

import (
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// gunzipTo writes the gzip file src, decompressed, to dst.
func gunzipTo(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// Ensure that a database of format "4", whose state digest is a sum of
// SHAKE128 terms, is never taken for one of format "5": refused as format
// 4 by Open and verify-chain, and, with its format record edited to say
// "5", refused as a state mismatch by Open, verify-chain and the backup
// check, because the BLAKE3 digest recomputed from its records is not the
// one its checkpoints and its anchor sign.
//
// testdata/format4 was made by kvfence of format "4" (the commit before
// the BLAKE3 terms): keygen, init --id receiver-1, scope create, target
// create, activate and hold of configmap/prod/backup-policy; it holds the
// database and its anchor, gzipped, and the receiver's public key.
func TestFormat4_NeverTakenForFormat5(t *testing.T) {
	dir := t.TempDir()
	db, anchorPath := filepath.Join(dir, "receiver.db"), filepath.Join(dir, "receiver.anchor")
	gunzipTo(t, "testdata/format4/receiver.db.gz", db)
	gunzipTo(t, "testdata/format4/receiver.anchor.gz", anchorPath)
	pub, err := keyfile.LoadPublic("testdata/format4/receiver.key.pub")
	if err != nil {
		t.Fatal(err)
	}
	anchor := audit.FileAnchor{Path: anchorPath}
	sc, err := anchor.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Verify(pub); err != nil {
		t.Fatalf("the fixture's anchor does not verify under its key: %v", err)
	}

	// As made: format 4, refused for what it is.
	if r, err := kvfence.Open(db, &kvfence.Options{ReadOnly: true, Anchor: anchor}); err == nil {
		r.Close()
		t.Fatal("Open accepted a format 4 database")
	} else if !errors.Is(err, kvfence.ErrBadFormat) || !strings.Contains(err.Error(), "format version 4") {
		t.Fatalf("Open(format 4) = %v, want ErrBadFormat naming format 4", err)
	}
	if _, err := kvfence.VerifyChain(db, kvfence.VerifyOptions{Anchor: anchor, PublicKey: pub}); !errors.Is(err, kvfence.ErrBadFormat) {
		t.Fatalf("VerifyChain(format 4) = %v, want ErrBadFormat", err)
	}

	// Relabelled "5": its records, chain and signatures are whole, but
	// its checkpoints sign the SHAKE128 digest.
	bdb, err := bolt.Open(db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("format"), []byte("5"))
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if r, err := kvfence.Open(db, &kvfence.Options{ReadOnly: true, Anchor: anchor}); err == nil {
		r.Close()
		t.Fatal("Open accepted a format 4 database relabelled 5")
	} else if !errors.Is(err, audit.ErrStateMismatch) {
		t.Fatalf("Open(relabelled) = %v, want ErrStateMismatch", err)
	}
	rep, err := kvfence.VerifyChain(db, kvfence.VerifyOptions{Anchor: anchor, PublicKey: pub})
	if err != nil {
		t.Fatalf("VerifyChain(relabelled) = %v, want a report", err)
	}
	if rep.OK() || rep.Problem != audit.ProblemStateMismatch {
		t.Fatalf("VerifyChain(relabelled) reports %q (%v), want %q", rep.Problem, rep.Err(), audit.ProblemStateMismatch)
	}
	if _, err := backup.Check(db, sc, pub); !errors.Is(err, backup.ErrMismatch) {
		t.Fatalf("backup.Check(relabelled) = %v, want ErrMismatch", err)
	}
}
