package backup_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that the restore runbook's promise holds across a recovery: after
// the receiver was restored from an older backup and re-admitted, a newer
// backup of the history the recovery abandoned (whose grants it revoked)
// is refused when put back, whether it still holds the entry the new
// anchor names or has archived it away; and that a backup restored with no
// recovery is always caught behind the anchor.
func TestRedteam21_RestoreAbandonedBranch(t *testing.T) {
	for _, archived := range []bool{false, true} {
		t.Run(fmt.Sprintf("archived=%v", archived), func(t *testing.T) {
			ctx := context.Background()
			_, key, _ := ed25519.GenerateKey(rand.Reader)
			rpub, rkey, _ := ed25519.GenerateKey(rand.Reader)
			pub := key.Public().(ed25519.PublicKey)
			dir := t.TempDir()
			path, anchor := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
			if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "r1", Key: key, Anchor: anchor, RecoveryKey: rpub}); err != nil {
				t.Fatal(err)
			}
			r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
			if err != nil {
				t.Fatal(err)
			}
			rc := receiver{r: r, pub: pub}
			rc.scope(t, "s1")
			save := func(name string) string {
				t.Helper()
				all, _, _ := rc.stream(t)
				out := filepath.Join(dir, name)
				if _, err := backup.Save(ctx, bytesReader(all), backup.SaveOptions{Out: out, PublicKey: pub}); err != nil {
					t.Fatal(err)
				}
				return out
			}
			b1 := save("b1.kvbak")
			for i := 2; i <= 6; i++ {
				rc.scope(t, fmt.Sprintf("s%d", i))
			}
			if archived {
				if _, err := r.Admin().Archive(ctx, kvfence.ArchiveRequest{Before: r.Head().Seq, Path: filepath.Join(dir, "a1")}); err != nil {
					t.Fatal(err)
				}
			}
			rc.scope(t, "s7")
			b2 := save("b2.kvbak")
			r.Close()

			// The runbook: b1 back, caught behind the anchor, re-admitted.
			if _, err := backup.Restore(ctx, b1, backup.RestoreOptions{DB: path, PublicKey: pub, Overwrite: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor}); !errors.Is(err, kvfence.ErrRollbackDetected) {
				t.Fatalf("open after restoring b1: %v, want rollback", err)
			}
			q, err := kvfence.Inspect(path, anchor)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			sa, err := audit.SignAdmission(rkey, audit.Admission{Receiver: "r1", SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
				AdmittedState: q.State, At: now.UnixNano(), Expires: now.Add(time.Hour).UnixNano(), Reason: "restore b1"})
			if err != nil {
				t.Fatal(err)
			}
			adm, err := sa.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kvfence.Recover(path, adm, kvfence.RecoverOptions{Key: key, Anchor: anchor, RecoveryKey: rpub}); err != nil {
				t.Fatal(err)
			}
			r, err = kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
			if err != nil {
				t.Fatal(err)
			}
			rc.r = r
			rc.scope(t, "new")
			r.Close()

			// The abandoned history: b2 verifies on its own, and must not open.
			if _, err := backup.Restore(ctx, b2, backup.RestoreOptions{DB: path, PublicKey: pub, Overwrite: true}); err != nil {
				t.Fatal(err)
			}
			r, err = kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
			if err == nil {
				r.Close()
				t.Fatal("the backup of the history a recovery abandoned opened against the new anchor")
			}
			if !kvfence.IsIntegrityError(err) {
				t.Fatalf("open of the abandoned history: %v, want an integrity error", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// Ensure that Save with Overwrite does not put a backup file in place of a
// database a running receiver holds open (an --out that names the live
// database, by mistake or by a script's variable): the receiver would go
// on writing to the unlinked file, and would not open again on a backup
// file, as Restore already refuses.
func TestRedteam21_SaveOverLiveDatabase(t *testing.T) {
	rc := newReceiver(t)
	rc.scope(t, "s1")
	all, _, _ := rc.stream(t)
	live := rc.r.Path()
	before, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	_, err = backup.Save(context.Background(), bytes.NewReader(all), backup.SaveOptions{Out: live, PublicKey: rc.pub, Overwrite: true})
	if !errors.Is(err, backup.ErrInUse) {
		t.Fatalf("Save over an open receiver's database: %v, want ErrInUse", err)
	}
	if after, err := os.ReadFile(live); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the open receiver's database changed: %v", err)
	}
	if err := (backup.SaveOptions{Out: live, PublicKey: rc.pub, Overwrite: true}).Check(); !errors.Is(err, backup.ErrInUse) {
		t.Fatalf("SaveOptions.Check of an open receiver's database: %v, want ErrInUse", err)
	}
	rc.r.Close()
	if _, err := backup.Save(context.Background(), bytes.NewReader(all), backup.SaveOptions{Out: live, PublicKey: rc.pub, Overwrite: true}); err != nil {
		t.Fatalf("Save over a closed file: %v", err)
	}
}

// clusterFile is an anchor file that says it is on etcd cluster id, as
// etcdanchor.Store does.
type clusterFile struct {
	audit.FileAnchor
	id uint64
}

func (c clusterFile) ClusterID(context.Context) (uint64, error) { return c.id, nil }
func (c clusterFile) ExpectCluster(uint64)                      {}

// Ensure that a receiver kept in a bbolt file whose anchor is on another
// etcd cluster (--anchor etcd://) is backed up and restored: the backup's
// checkpoint is the anchor Check verifies the database against, wherever
// the live anchor is kept.
func TestRedteam21_BackupWithAnchorOnCluster(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	pub := key.Public().(ed25519.PublicKey)
	dir := t.TempDir()
	path := filepath.Join(dir, "receiver.db")
	anchor := clusterFile{FileAnchor: audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}, id: 5}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "r1", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rc := receiver{r: r, pub: pub}
	rc.scope(t, "s1")
	all, _, _ := rc.stream(t)
	out := filepath.Join(dir, "b.kvbak")
	if _, err := backup.Save(context.Background(), bytes.NewReader(all), backup.SaveOptions{Out: out, PublicKey: pub}); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if _, err := backup.Restore(context.Background(), out, backup.RestoreOptions{DB: filepath.Join(dir, "restored.db"), PublicKey: pub}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if rep, err := r.VerifyOnline(context.Background()); err != nil || !rep.OK() {
		t.Fatalf("VerifyOnline: %v %v %s", err, rep.Problem, rep.Detail)
	}
}
