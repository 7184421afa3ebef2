package backup_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/kvfence"
	bolt "go.etcd.io/bbolt"
)

// receiver is an open receiver in a temporary directory, with its public
// key.
type receiver struct {
	r   *kvfence.Receiver
	pub ed25519.PublicKey
}

func newReceiver(t testing.TB) receiver {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, anchor := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "r1", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return receiver{r: r, pub: pub}
}

// scope creates a scope: one more entry, one more state record.
func (rc receiver) scope(t testing.TB, name string) {
	t.Helper()
	if _, err := rc.r.Admin().CreateScope(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.r.Admin().CreateTarget(context.Background(), name, name+"/t", []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// stream returns the receiver's backup stream, and its parts: the
// checkpoint's bytes and the database's.
func (rc receiver) stream(t testing.TB) (all, cp, db []byte) {
	t.Helper()
	var b bytes.Buffer
	err := rc.r.Snapshot(context.Background(), func(s kvfence.Snapshot) error {
		want, err := backup.Length(s)
		if err != nil {
			return err
		}
		n, err := backup.Write(&b, s)
		if err == nil && n != want {
			t.Errorf("Write wrote %d bytes, Length said %d", n, want)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	all = b.Bytes()
	cpLen := binary.BigEndian.Uint32(all[len(backup.Magic):])
	cp = all[len(backup.Magic)+4 : len(backup.Magic)+4+int(cpLen)]
	db = all[len(backup.Magic)+4+int(cpLen)+8 : len(all)-sha256.Size]
	return all, cp, db
}

// frame builds a backup stream from its parts, with a correct sum.
func frame(cp, db []byte) []byte {
	b := append([]byte(backup.Magic), binary.BigEndian.AppendUint32(nil, uint32(len(cp)))...)
	b = append(b, cp...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(db)))
	b = append(b, db...)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// only fails the test unless dir holds exactly the named files: nothing
// temporary is left behind.
func only(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if len(got) != len(names) {
		t.Fatalf("directory holds %q, want %q", got, names)
	}
	for i := range got {
		if got[i] != names[i] {
			t.Fatalf("directory holds %q, want %q", got, names)
		}
	}
}

// Ensure that a backup saved from a receiver's stream is written under
// its name only, restores to a database that verifies against its
// checkpoint, and that neither Save nor Restore replaces a file unless
// told to.
func TestSaveRestore_RoundTrip(t *testing.T) {
	rc := newReceiver(t)
	rc.scope(t, "s1")
	all, _, _ := rc.stream(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "b.kvbak")
	res, err := backup.Save(context.Background(), bytes.NewReader(all), backup.SaveOptions{Out: out, PublicKey: rc.pub})
	if err != nil {
		t.Fatal(err)
	}
	if res.Size != int64(len(all)) || !res.Report.OK() || res.Checkpoint.Seq != rc.r.Head().Seq {
		t.Fatalf("result: size %d of %d, report %s, checkpoint seq %d, head %d", res.Size, len(all), res.Report.Problem,
			res.Checkpoint.Seq, rc.r.Head().Seq)
	}
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, all) {
		t.Fatalf("the file is not the stream: %v", err)
	}
	only(t, dir, "b.kvbak")

	_, err = backup.Save(context.Background(), bytes.NewReader(all), backup.SaveOptions{Out: out, PublicKey: rc.pub})
	if !errors.Is(err, backup.ErrExists) {
		t.Fatalf("second Save: %v, want ErrExists", err)
	}
	only(t, dir, "b.kvbak")
	if _, err := backup.Save(context.Background(), bytes.NewReader(all), backup.SaveOptions{Out: out, PublicKey: rc.pub, Overwrite: true}); err != nil {
		t.Fatalf("Save with Overwrite: %v", err)
	}

	db := filepath.Join(dir, "restored.db")
	res, err = backup.Restore(context.Background(), out, backup.RestoreOptions{DB: db, PublicKey: rc.pub})
	if err != nil {
		t.Fatal(err)
	}
	only(t, dir, "b.kvbak", "restored.db")
	if _, err := backup.Check(db, res.Checkpoint, rc.pub); err != nil {
		t.Fatalf("the restored database: %v", err)
	}
	if _, err := backup.Restore(context.Background(), out, backup.RestoreOptions{DB: db, PublicKey: rc.pub}); !errors.Is(err, backup.ErrExists) {
		t.Fatalf("second Restore: %v, want ErrExists", err)
	}
	only(t, dir, "b.kvbak", "restored.db")
}

// Ensure that every way a stream can be wrong is refused with its own
// error, and leaves no file: the output's name is never taken, and no
// temporary file stays.
func TestSave_Hostile(t *testing.T) {
	rc := newReceiver(t)
	rc.scope(t, "s1")
	all1, cp1, db1 := rc.stream(t)
	rc.scope(t, "s2")
	_, cp2, db2 := rc.stream(t)
	other, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 1; return b }
	hdr := len(backup.Magic) + 4 + len(cp1) + 8
	tests := []struct {
		name   string
		stream []byte
		pub    ed25519.PublicKey
		want   error
		msg    string // in the error, where the error alone is not precise enough
	}{
		{"empty", nil, rc.pub, backup.ErrTruncated, ""},
		{"cut in the magic", all1[:5], rc.pub, backup.ErrTruncated, ""},
		{"another magic", flip(all1, 3), rc.pub, backup.ErrBadFormat, ""},
		{"another version", flip(all1, len(backup.Magic)-1), rc.pub, backup.ErrBadFormat, ""},
		{"checkpoint length 0", frame(nil, db1), rc.pub, backup.ErrBadFormat, ""},
		{"checkpoint length over the bound", frame(make([]byte, backup.MaxCheckpointSize+1), db1), rc.pub, backup.ErrBadFormat, ""},
		{"checkpoint length declared over the bound", binary.BigEndian.AppendUint32([]byte(backup.Magic), backup.MaxCheckpointSize+1),
			rc.pub, backup.ErrBadFormat, ""},
		{"checkpoint not a checkpoint", frame([]byte("not cbor"), db1), rc.pub, backup.ErrBadFormat, ""},
		{"database length 0", frame(cp1, nil), rc.pub, backup.ErrBadFormat, ""},
		{"cut in the checkpoint", all1[:len(backup.Magic)+10], rc.pub, backup.ErrTruncated, ""},
		{"cut in the database", all1[:hdr+100], rc.pub, backup.ErrTruncated, "the database ends after 100 of its"},
		{"cut in the sum", all1[:len(all1)-1], rc.pub, backup.ErrTruncated, ""},
		{"a byte of the database changed", flip(all1, hdr+4096+17), rc.pub, backup.ErrSumMismatch, ""},
		{"a byte of the sum changed", flip(all1, len(all1)-1), rc.pub, backup.ErrSumMismatch, ""},
		{"data after the sum", append(bytes.Clone(all1), 0), rc.pub, backup.ErrTrailingData, ""},
		// Refused on the checkpoint alone, before the database is read.
		{"signed by another key", all1, other, audit.ErrBadSignature, "backup: the checkpoint: audit: bad signature"},
		{"checkpoint altered, sum recomputed", frame(flip(cp1, len(cp1)-1), db1), rc.pub, audit.ErrBadSignature, ""},
		// The receiver's own checkpoint of an older state, with a newer
		// database: the chain runs past the checkpoint.
		{"older checkpoint, newer database", frame(cp1, db2), rc.pub, backup.ErrMismatch, ""},
		// And the other way: the database is behind its checkpoint.
		{"newer checkpoint, older database", frame(cp2, db1), rc.pub, backup.ErrMismatch, ""},
		{"not a bbolt database", frame(cp1, bytes.Repeat([]byte{7}, 8192)), rc.pub, backup.ErrMismatch, ""},
		// The chain is the checkpoint's, the state records are not.
		{"state record added", frame(cp1, addRecord(t, db1)), rc.pub, backup.ErrMismatch, "state_mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "b.kvbak")
			_, err := backup.Save(context.Background(), bytes.NewReader(tt.stream), backup.SaveOptions{Out: out, PublicKey: tt.pub})
			if !errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), tt.msg) {
				t.Fatalf("Save: %v, want %v (%q)", err, tt.want, tt.msg)
			}
			only(t, dir)
			// Restore refuses the same file, and writes no database.
			in := filepath.Join(t.TempDir(), "in.kvbak")
			if err := os.WriteFile(in, tt.stream, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = backup.Restore(context.Background(), in, backup.RestoreOptions{DB: filepath.Join(dir, "r.db"), PublicKey: tt.pub})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Restore: %v, want %v", err, tt.want)
			}
			only(t, dir)
		})
	}
}

// Ensure that Save needs the public key and an output name, before it
// reads anything.
func TestSave_Options(t *testing.T) {
	rc := newReceiver(t)
	dir := t.TempDir()
	for _, opts := range []backup.SaveOptions{{Out: filepath.Join(dir, "b"), PublicKey: nil}, {Out: "", PublicKey: rc.pub}} {
		_, err := backup.Save(context.Background(), bytes.NewReader(nil), opts)
		if !errors.Is(err, kvfence.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", opts, err)
		}
	}
	only(t, dir)
}

// FuzzUnpack holds Unpack to its bounds: no panic on any bytes, and
// nothing read past the frame's declared lengths is taken for a backup.
func FuzzUnpack(f *testing.F) {
	rc := newReceiver(f)
	all, cp, db := rc.stream(f)
	f.Add(all)
	f.Add(all[:len(all)/2])
	f.Add(frame(cp, db[:4096]))
	f.Add([]byte(backup.Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		sc, err := backup.Unpack(bytes.NewReader(b), &out)
		if err != nil {
			return
		}
		// A frame that unpacks is exactly the bytes it frames.
		raw, err := sc.Marshal()
		if err != nil {
			t.Fatalf("an unpacked checkpoint does not marshal: %v", err)
		}
		if !bytes.Equal(frame(raw, out.Bytes()), b) {
			t.Fatalf("Unpack accepted %d bytes that are not the frame of what it returned", len(b))
		}
	})
}

// addRecord returns a copy of the bbolt database db with one more target
// record, a copy of an existing one under another name: it decodes, and
// the chain is unchanged, but the state no longer hashes to what the
// checkpoint commits to.
func addRecord(t *testing.T, db []byte) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edit.db")
	if err := os.WriteFile(path, db, 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("targets"))
		if b == nil {
			return errors.New("no targets bucket")
		}
		k, v := b.Cursor().First()
		if k == nil {
			return errors.New("no target")
		}
		return b.Put(append(bytes.Clone(k), 'x'), bytes.Clone(v))
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Ensure that Save refuses an existing output before it reads the stream:
// nothing is downloaded only to be refused at the rename.
func TestSave_ExistingOutNotRead(t *testing.T) {
	rc := newReceiver(t)
	out := filepath.Join(t.TempDir(), "b.kvbak")
	if err := os.WriteFile(out, []byte("earlier"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := &countingReader{}
	_, err := backup.Save(context.Background(), src, backup.SaveOptions{Out: out, PublicKey: rc.pub})
	if !errors.Is(err, backup.ErrExists) || src.n != 0 {
		t.Fatalf("Save: %v after %d reads, want ErrExists before any", err, src.n)
	}
	if got, _ := os.ReadFile(out); string(got) != "earlier" {
		t.Fatalf("the existing file now holds %q", got)
	}
}

// countingReader counts its reads and gives nothing.
type countingReader struct{ n int }

func (c *countingReader) Read([]byte) (int, error) { c.n++; return 0, io.EOF }

// Ensure that Restore reads only a regular file: a directory is refused
// before anything is written.
func TestRestore_NotARegularFile(t *testing.T) {
	rc := newReceiver(t)
	dir := t.TempDir()
	_, err := backup.Restore(context.Background(), t.TempDir(), backup.RestoreOptions{DB: filepath.Join(dir, "r.db"), PublicKey: rc.pub})
	if !errors.Is(err, backup.ErrBadFormat) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Restore of a directory: %v, want ErrBadFormat", err)
	}
	only(t, dir)
}

// Ensure that a stream longer than MaxSize is refused once it goes past
// the bound, without reading it to its end, and leaves no file; and that a
// stream of exactly MaxSize is saved.
func TestSave_MaxSize(t *testing.T) {
	rc := newReceiver(t)
	all, _, _ := rc.stream(t)
	dir := t.TempDir()
	src := &countingBytes{b: all}
	_, err := backup.Save(context.Background(), src, backup.SaveOptions{Out: filepath.Join(dir, "b"), PublicKey: rc.pub,
		MaxSize: int64(len(all)) / 2})
	if !errors.Is(err, backup.ErrTooLarge) || src.read > len(all)/2+1 {
		t.Fatalf("Save over the bound: %v after reading %d of %d bytes, want ErrTooLarge at the bound", err, src.read, len(all))
	}
	only(t, dir)
	if _, err := backup.Save(context.Background(), bytes.NewReader(all), backup.SaveOptions{Out: filepath.Join(dir, "b"),
		PublicKey: rc.pub, MaxSize: int64(len(all))}); err != nil {
		t.Fatalf("Save at the bound: %v", err)
	}
}

// countingBytes reads b in small pieces and counts what was read.
type countingBytes struct {
	b    []byte
	read int
}

func (c *countingBytes) Read(p []byte) (int, error) {
	if c.read == len(c.b) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 512)], c.b[c.read:])
	c.read += n
	return n, nil
}

// Ensure that Restore, even with Overwrite, refuses to replace a database
// that an open receiver holds, and leaves it as it was.
func TestRestore_RefusesDatabaseInUse(t *testing.T) {
	rc := newReceiver(t)
	all, _, _ := rc.stream(t)
	in := filepath.Join(t.TempDir(), "b.kvbak")
	if err := os.WriteFile(in, all, 0o600); err != nil {
		t.Fatal(err)
	}
	live := rc.r.Path()
	before, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	_, err = backup.Restore(context.Background(), in, backup.RestoreOptions{DB: live, PublicKey: rc.pub, Overwrite: true})
	if !errors.Is(err, backup.ErrInUse) {
		t.Fatalf("Restore over an open receiver: %v, want ErrInUse", err)
	}
	if after, err := os.ReadFile(live); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the open receiver's database changed: %v", err)
	}
	rc.r.Close()
	if _, err := backup.Restore(context.Background(), in, backup.RestoreOptions{DB: live, PublicKey: rc.pub, Overwrite: true}); err != nil {
		t.Fatalf("Restore over a closed receiver's database: %v", err)
	}
}
