//go:build redteam21open

package kvfence

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/clusterid"
	bolt "go.etcd.io/bbolt"
)

// Open: a copy of the database (a backup, which backup.Check accepts
// whatever its meta bucket says) whose recorded anchor cluster was
// rewritten to another cluster, served at the anchor's address with an
// old genuine anchor that matches the copy, opens without the rollback
// being detected: the record that refuses another cluster answering at
// the anchor's address sits outside the state digest and the chain.
func TestRedteam21_RestoredCopyRenamesAnchorCluster(t *testing.T) {
	dir := t.TempDir()
	path, file := filepath.Join(dir, "r.db"), audit.FileAnchor{Path: filepath.Join(dir, "r.anchor")}
	var expected uint64
	at := func(f audit.FileAnchor, id uint64) clusterFileAnchor {
		return clusterFileAnchor{FileAnchor: f, id: id, expected: &expected}
	}
	if err := Init(path, &InitOptions{ReceiverID: "r", Key: testKey, Anchor: at(file, 5)}); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path, &Options{Key: testKey, Anchor: at(file, 5)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.Admin().CreateScope(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	var copyDB bytes.Buffer
	if err := r.Snapshot(ctx, func(s Snapshot) error { _, err := s.WriteTo(&copyDB); return err }); err != nil {
		t.Fatal(err)
	}
	oldAnchor, err := os.ReadFile(file.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin().Hold(ctx, HoldRequest{Scopes: []string{"s1"}, Reason: "fence"}); err != nil {
		t.Fatal(err)
	}
	r.Close()

	// The copy put back, its recorded anchor cluster renamed to 6, and
	// cluster 6 answering at the anchor's address with the old anchor.
	if err := os.WriteFile(path, copyDB.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaAnchorCluster, []byte(clusterid.Format(6)))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	other := audit.FileAnchor{Path: filepath.Join(dir, "other.anchor")}
	if err := os.WriteFile(other.Path, oldAnchor, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err = Open(path, &Options{Key: testKey, Anchor: at(other, 6)})
	if err == nil {
		st, _ := r.Status("s1")
		r.Close()
		t.Fatalf("a rolled-back copy opened on another cluster's old anchor; scope s1 is %s at epoch %d again", st.Mode, st.Epoch)
	}
}
