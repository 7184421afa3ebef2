package backup_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/kvfence"
)

// A service that embeds a receiver writes a backup of it while it runs,
// and an operator later puts the backup's database back for recovery.
// Over the served API, client.Client.Backup does the first half.
func ExampleSave() {
	dir, err := os.MkdirTemp("", "backup-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)) // a real key comes from keyfile
	path, anchor := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "example", Key: key, Anchor: anchor}); err != nil {
		log.Fatal(err)
	}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	// The stream: a snapshot taken in one read transaction, framed with
	// its checkpoint. The operator checks it with their own copy of the
	// public key, not one the stream could carry.
	var stream bytes.Buffer
	if err := r.Snapshot(context.Background(), func(s kvfence.Snapshot) error {
		_, err := backup.Write(&stream, s)
		return err
	}); err != nil {
		log.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	res, err := backup.Save(context.Background(), &stream, backup.SaveOptions{Out: filepath.Join(dir, "b.kvbak"), PublicKey: pub})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("backup of", res.Checkpoint.Receiver, "at seq", res.Checkpoint.Seq, "verified:", res.Report.OK())

	res, err = backup.Restore(context.Background(), filepath.Join(dir, "b.kvbak"),
		backup.RestoreOptions{DB: filepath.Join(dir, "restored.db"), PublicKey: pub})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("restored seq", res.Checkpoint.Seq)
	// Output:
	// backup of example at seq 1 verified: true
	// restored seq 1
}
