package kvfence

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that a database whose base record and chain were forged past a
// current anchor, by someone who can write the database alone, is not
// reported as an old anchor put back (ErrAnchorArchived, whose hint is to
// restore the anchor): the database's own newest checkpoint does not cover
// its chain, so the database is what changed.
func TestRedteam_ForgedBaseIsNotBlamedOnTheAnchor(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.activate("worker-a", "claim-1", f.patchRequest("act-1"))
	head := f.r.Head()
	f.r.Close()
	whole := filepath.Join(t.TempDir(), "whole.db")
	copyFile(t, f.path, whole)
	forged := audit.Head{Seq: head.Seq + 1, Hash: sha256.Sum256([]byte("no such entry"))}
	baseRaw, err := audit.MarshalBase(&audit.Base{Seq: forged.Seq, Hash: forged.Hash})
	if err != nil {
		t.Fatal(err)
	}
	d := audit.BaseDigest(baseRaw)
	c := audit.NewChain(forged)
	raw, _, err := c.Append(&audit.Entry{At: 1, Kind: KindArchived, BaseSeq: forged.Seq, BaseHash: forged.Hash[:], BaseFence: d[:]})
	if err != nil {
		t.Fatal(err)
	}
	db := mustOpenBolt(t, f.path)
	if err := db.Update(seam(func(tx engine.Tx) error {
		if err := removeEntries(tx, head.Seq); err != nil {
			return err
		}
		if err := tx.Put(bucketAudit, audit.SeqKey(forged.Seq+1), raw); err != nil {
			return err
		}
		return tx.Put(bucketCheckpoints, checkpointBase, baseRaw)
	})); err != nil {
		t.Fatal(err)
	}
	db.Close()
	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problem == audit.ProblemAnchorStale || errors.Is(rep.Err(), audit.ErrAnchorArchived) {
		t.Errorf("verify-chain blames the anchor: %s (%s)", rep.Problem, rep.Detail)
	}
	_, err = Open(f.path, f.opts())
	if err == nil || errors.Is(err, audit.ErrAnchorArchived) {
		t.Errorf("Open blames the anchor: %v", err)
	}
	copyFile(t, whole, f.path)
	f.reopen()
}
