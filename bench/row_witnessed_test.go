package bench

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Ensure that boltFileTxid reads the transaction id bbolt itself reports,
// from the newer meta page, passes over a torn meta page, and refuses a
// file with no valid one.
func TestBoltFileTxid(t *testing.T) {
	tests := []struct {
		name    string
		updates int
		// damage overwrites bytes of the file at these offsets.
		damage []int64
		// older says the damage leaves the previous transaction's page.
		older   bool
		wantErr bool
	}{
		// bbolt starts at transaction 1, in page 1; transaction n is in
		// page n%2.
		{name: "fresh", updates: 0},
		{name: "after commits, page 0 newest", updates: 3},
		{name: "after commits, page 1 newest", updates: 4},
		{name: "newest page 0 torn", updates: 3, damage: []int64{page0Meta}, older: true},
		{name: "newest page 1 torn", updates: 4, damage: []int64{page1Meta()}, older: true},
		{name: "older page 1 torn", updates: 3, damage: []int64{page1Meta()}},
		{name: "both meta pages torn", updates: 3, damage: []int64{page0Meta, page1Meta()}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "b.db")
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tt.updates {
				if err := db.Update(func(tx *bolt.Tx) error {
					b, err := tx.CreateBucketIfNotExists([]byte("b"))
					if err != nil {
						return err
					}
					return b.Put([]byte{byte(i)}, record(int64(i)))
				}); err != nil {
					t.Fatal(err)
				}
			}
			var want int
			if err := db.View(func(tx *bolt.Tx) error { want = tx.ID(); return nil }); err != nil {
				t.Fatal(err)
			}
			// Read while bbolt holds its lock, as syncs does.
			defer db.Close()
			if len(tt.damage) > 0 {
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, off := range tt.damage {
					if _, err := f.WriteAt([]byte{0xff, 0xee}, off); err != nil {
						t.Fatal(err)
					}
				}
				f.Close()
			}
			if tt.older {
				want--
			}
			got, err := boltFileTxid(path)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("txid %d from a file with no valid meta page", got)
				}
				return
			}
			if err != nil || got != uint64(want) {
				t.Fatalf("txid %d, %v; bbolt says %d", got, err, want)
			}
		})
	}
}

// page0Meta is an offset inside meta page 0's checksummed fields.
const page0Meta = boltPageHeaderSize + 40

// page1Meta is the same offset in meta page 1.
func page1Meta() int64 { return int64(os.Getpagesize()) + page0Meta }

// Ensure that the witnessed row's receiver has a quorum of 2 of 3 witnesses
// that cosign each acknowledged write, that its fsync count includes the
// witnesses' commits, and that closing it stops them: no goroutine or file
// left behind.
func TestSubmitWitnessed(t *testing.T) {
	goroutines0 := runtime.NumGoroutine()
	fds0 := openFiles()
	ctx := context.Background()
	c, err := openSubmitWitnessed(ctx, t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	sc := c.(*submitCell)
	ws, k := sc.f.r.Witnesses()
	if len(ws) != benchWitnesses || k != benchWitnessQuorum {
		t.Fatalf("witnesses %+v, quorum %d", ws, k)
	}
	m, err := measureFor(ctx, c, 4, 50*time.Millisecond)
	if err != nil || m.ops == 0 {
		c.close()
		t.Fatalf("%d operations, %v", m.ops, err)
	}
	ws, _ = sc.f.r.Witnesses()
	head := sc.f.r.Head().Seq
	cosigned := 0
	for _, w := range ws {
		if w.Known && w.Size == head {
			cosigned++
		}
	}
	if cosigned < benchWitnessQuorum {
		t.Errorf("%d witnesses known to have cosigned the head %d, want %d: %+v", cosigned, head, benchWitnessQuorum, ws)
	}
	// Each commit costs the receiver 3 calls and at least two witnesses
	// 2 each: at least 7 per commit, and the anchor counts the commits.
	total, err := sc.f.syncs()
	if commits := sc.f.anchor.stores.Load(); err != nil || commits == 0 || total < 7*float64(commits) {
		t.Errorf("%.0f fsyncs counted for %d commits, %v", total, commits, err)
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	// Idle client connections end once the servers closed theirs.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines0 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after close, %d before:\n%s", n, goroutines0, buf[:runtime.Stack(buf, true)])
	}
	if fds := openFiles(); fds > fds0 {
		t.Errorf("%d open files after close, %d before", fds, fds0)
	}
}

// openFiles counts the process's open file descriptors, or returns -1
// where /proc/self/fd does not list them.
func openFiles() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}
