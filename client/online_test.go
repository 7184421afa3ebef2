package client_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

// backupStream returns r's backup stream and its checkpoint's and
// database's bytes.
func backupStream(t *testing.T, r *kvfence.Receiver) (all, cp, db []byte) {
	t.Helper()
	var b bytes.Buffer
	if err := r.Snapshot(context.Background(), func(s kvfence.Snapshot) error {
		_, err := backup.Write(&b, s)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	all = b.Bytes()
	n := int(binary.BigEndian.Uint32(all[len(backup.Magic):]))
	cp = all[len(backup.Magic)+4 : len(backup.Magic)+4+n]
	db = all[len(backup.Magic)+4+n+8 : len(all)-sha256.Size]
	return all, cp, db
}

func frameOf(cp, db []byte) []byte {
	b := binary.BigEndian.AppendUint32([]byte(backup.Magic), uint32(len(cp)))
	b = append(b, cp...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(db)))
	b = append(b, db...)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("%s holds %d files, want none: %v", dir, len(ents), ents[0].Name())
	}
}

// Ensure that an administrator gets the receiver's own verification and a
// backup that verifies, and that a worker gets neither (403, no file).
func TestClient_VerifyChainAndBackup(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	op, w := s.client(operator), s.client(workerA)
	if _, err := op.CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	rep, err := op.VerifyChain(ctx)
	if err != nil || !rep.OK || rep.Head != s.r.Head() || rep.Anchor != s.r.Head() || rep.Entries != s.r.Head().Seq {
		t.Fatalf("VerifyChain: %+v %v, head %v", rep, err, s.r.Head())
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "b.kvbak")
	res, err := op.Backup(ctx, backup.SaveOptions{Out: out, PublicKey: s.r.PublicKey()})
	if err != nil || res.Checkpoint.Seq != s.r.Head().Seq {
		t.Fatalf("Backup: %+v %v", res, err)
	}
	if _, err := w.VerifyChain(ctx); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("VerifyChain as a worker: %v, want ErrForbidden", err)
	}
	wdir := t.TempDir()
	if _, err := w.Backup(ctx, backup.SaveOptions{Out: filepath.Join(wdir, "b"), PublicKey: s.r.PublicKey()}); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("Backup as a worker: %v, want ErrForbidden", err)
	}
	emptyDir(t, wdir)
}

// Ensure that a backup stream a server gets wrong, or lies in, is refused
// with its own error and leaves no file.
func TestClient_BackupHostileServer(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	if _, err := s.r.Admin().CreateScope(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	all1, cp1, _ := backupStream(t, s.r)
	if _, err := s.r.Admin().CreateScope(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	_, _, db2 := backupStream(t, s.r)
	other, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	stream := func(body []byte, length int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", backup.ContentType)
			if length >= 0 {
				w.Header().Set("Content-Length", strconv.Itoa(length))
			}
			w.Write(body)
		}
	}
	tests := []struct {
		name string
		h    http.HandlerFunc
		pub  ed25519.PublicKey
		want error
	}{
		{"cut short, no length", stream(all1[:len(all1)/2], -1), s.r.PublicKey(), backup.ErrTruncated},
		{"cut short of its Content-Length", stream(all1[:len(all1)/2], len(all1)), s.r.PublicKey(), backup.ErrTruncated},
		{"checkpoint not the database's", stream(frameOf(cp1, db2), -1), s.r.PublicKey(), backup.ErrMismatch},
		{"signed by another key", stream(all1, -1), other, audit.ErrBadSignature},
		{"another media type", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(all1)
		}, s.r.PublicKey(), client.ErrProtocol},
		{"refused", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"error":{"code":"forbidden","message":"no"}}`))
		}, s.r.PublicKey(), client.ErrForbidden},
		{"etcd", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotImplemented)
			w.Write([]byte(`{"error":{"code":"snapshot_unsupported","message":"etcd"}}`))
		}, s.r.PublicKey(), kvfence.ErrSnapshotUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := unixServer(t, tt.h, false)
			dir := t.TempDir()
			_, err := c.Backup(ctx, backup.SaveOptions{Out: filepath.Join(dir, "b.kvbak"), PublicKey: tt.pub})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Backup: %v, want %v", err, tt.want)
			}
			emptyDir(t, dir)
		})
	}
}

// Ensure that a verification answer that is not a report is refused
// (ErrProtocol), and that a report of a problem is passed on as one.
func TestClient_VerifyChainHostileServer(t *testing.T) {
	ctx := context.Background()
	const hash = "0101010101010101010101010101010101010101010101010101010101010101"
	report := func(ok bool, problem, head string, headSeq int) string {
		return `{"ok":` + strconv.FormatBool(ok) + `,"problem":"` + problem + `","entries":3,"head":"` + head +
			`","head_seq":` + strconv.Itoa(headSeq) + `,"anchor_seq":0,"anchor_head":"","detail":"d","anchor_damage":null,` +
			`"base_seq":0,"base_hash":"","archived_entries":0,"anchor_same_device":null,"anchor_same_owner":null}`
	}
	tests := []struct {
		name    string
		body    string
		want    error
		problem audit.Problem
	}{
		{"ok with a problem", report(true, "rollback_detected", hash, 3), client.ErrProtocol, ""},
		{"a problem said ok", report(false, "ok", hash, 3), client.ErrProtocol, ""},
		{"a hash that is not hex", report(false, "fork_detected", "zz", 3), client.ErrProtocol, ""},
		{"a short hash", report(false, "fork_detected", "0101", 3), client.ErrProtocol, ""},
		{"a seq without a hash", report(false, "fork_detected", "", 3), client.ErrProtocol, ""},
		{"a hash in capitals", report(false, "fork_detected", "AB"+hash[2:], 3), client.ErrProtocol, ""},
		{"a problem", report(false, "fork_detected", hash, 3), nil, audit.ProblemForkDetected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(tt.body))
			}), false)
			rep, err := c.VerifyChain(ctx)
			if !errors.Is(err, tt.want) || (tt.want == nil && (rep.OK || rep.Problem != tt.problem || rep.Head.Seq != 3)) {
				t.Fatalf("VerifyChain: %+v %v, want %v %s", rep, err, tt.want, tt.problem)
			}
		})
	}
}
