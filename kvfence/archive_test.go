package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
	bolt "go.etcd.io/bbolt"
)

// archiveAt archives the fixture's entries up to before into a new file in
// the test's directory and returns its path.
func (f *fixture) archiveAt(before uint64, name string) (string, ArchiveResult) {
	f.t.Helper()
	path := filepath.Join(filepath.Dir(f.path), name)
	res, err := f.admin.Archive(f.ctx, ArchiveRequest{Before: before, Path: path})
	if err != nil {
		f.t.Fatalf("Archive(%d): %v", before, err)
	}
	return path, res
}

// verifyWith closes the fixture's receiver, verifies its chain with the
// archives at paths, oldest first, and reopens it.
func verifyWith(t *testing.T, f *fixture, paths ...string) audit.Report {
	t.Helper()
	f.r.Close()
	defer f.reopenAfterVerify()
	var srcs []audit.ArchiveSource
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, audit.ArchiveSource{Name: filepath.Base(p), Reader: bytes.NewReader(data)})
	}
	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey), Archives: srcs})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Ensure that archiving moves the base, keeps head, anchor and state
// digest, and that verify-chain verifies from the base alone and, with the
// archives, the whole history, twice archived.
func TestArchive_VerifyChain(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	f.hold("worker-a lease expired")
	b := f.activate("worker-b", "claim-2", f.patchRequest("raise-retention"))
	headBefore, stateBefore := f.r.Head(), f.r.stateSum

	// The base falls after B's activation and before its submit: the
	// replay must know from the base alone that B's grant is active.
	p1, res := f.archiveAt(b.grant.AuditSeq, "one.kva")
	if res.From != (audit.Head{}) || res.To.Seq != b.grant.AuditSeq || res.Entries != b.grant.AuditSeq || res.AuditSeq != headBefore.Seq+1 {
		t.Fatalf("archive result %+v", res)
	}
	if f.r.stateSum != stateBefore {
		t.Fatal("archiving changed the state digest")
	}
	if got := f.submit("worker-b", b.envelope); got.Outcome != Applied {
		t.Fatalf("submit after archive: %+v", got)
	}
	if got := f.submit("worker-a", a.envelope); got.Outcome != Denied {
		t.Fatalf("stale submit after archive: %+v", got)
	}
	rep := verifyWith(t, f)
	if !rep.OK() || rep.Base != res.To || rep.Archived != 0 {
		t.Fatalf("verify from base: %s %s, base %v", rep.Problem, rep.Detail, rep.Base)
	}
	rep = verifyWith(t, f, p1)
	if !rep.OK() || rep.Archived != res.Entries || rep.Archives != 1 {
		t.Fatalf("verify with archive: %s %s, archived %d", rep.Problem, rep.Detail, rep.Archived)
	}

	// A second archive continues from the first base, past the first
	// archive entry.
	p2, res2 := f.archiveAt(res.AuditSeq+1, "two.kva")
	if res2.From != res.To {
		t.Fatalf("second archive from %v, want %v", res2.From, res.To)
	}
	f.hold("two")
	p3, _ := f.archiveAt(f.r.Head().Seq, "three.kva")
	for _, tc := range []struct {
		name    string
		paths   []string
		problem audit.Problem
		detail  string
	}{
		{"no archives", nil, audit.ProblemOK, ""},
		{"all in order", []string{p1, p2, p3}, audit.ProblemOK, ""},
		{"wrong order", []string{p2, p1, p3}, audit.ProblemBaseMismatch, "the first archive must begin at seq 1"},
		{"the first is missing", []string{p2, p3}, audit.ProblemBaseMismatch, "an older archive is missing"},
		{"a gap", []string{p1, p3}, audit.ProblemBaseMismatch, "are missing"},
		{"the last is missing", []string{p1, p2}, audit.ProblemBaseMismatch, "the last archive ends at entry"},
		{"one twice", []string{p1, p1, p2, p3}, audit.ProblemBaseMismatch, "out of order or overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := verifyWith(t, f, tc.paths...)
			if rep.Problem != tc.problem || !strings.Contains(rep.Detail, tc.detail) {
				t.Fatalf("verify = %s (%s), want %s saying %q", rep.Problem, rep.Detail, tc.problem, tc.detail)
			}
			if tc.problem != audit.ProblemOK && !errors.Is(rep.Err(), audit.ErrBaseMismatch) {
				t.Fatalf("error %v does not match ErrBaseMismatch", rep.Err())
			}
		})
	}
	if _, err := f.admin.Archive(f.ctx, ArchiveRequest{Before: res.To.Seq, Path: filepath.Join(t.TempDir(), "again.kva")}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("archiving archived entries: %v", err)
	}
	if _, err := f.admin.Archive(f.ctx, ArchiveRequest{Before: f.r.Head().Seq + 5, Path: filepath.Join(t.TempDir(), "past.kva")}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("archiving past the anchor: %v", err)
	}
	if _, err := f.admin.Archive(f.ctx, ArchiveRequest{Before: f.r.Head().Seq, Path: p1}); err == nil || !errors.Is(err, os.ErrExist) {
		t.Fatalf("archiving over an existing file: %v", err)
	}
}

// Ensure that the fence replay goes on from the base: a receiver without
// checks 2-4 applies worker A's grant after a hold that is archived; the
// chain from the base alone still shows the violation, and with the
// archive too.
func TestArchive_FenceViolationAfterBase(t *testing.T) {
	f := newFixture(t, defect.Variant{SkipAuthority: true})
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	hold := f.hold("worker-a lease expired")
	p, _ := f.archiveAt(hold.AuditSeq, "one.kva")
	stale := f.submit("worker-a", a.envelope)
	if stale.Outcome != Applied {
		t.Fatalf("defective receiver: %+v; the check cannot go red", stale)
	}
	for _, paths := range [][]string{nil, {p}} {
		rep := verifyWith(t, f, paths...)
		var fv *audit.FenceViolationError
		if rep.Problem != audit.ProblemFenceViolation || !errors.As(rep.Err(), &fv) || fv.Seq != stale.AuditSeq || fv.Hold != hold.AuditSeq {
			t.Fatalf("archives %v: verify = %s (%v), want fence_violation at %d after hold %d", paths, rep.Problem, rep.Err(), stale.AuditSeq, hold.AuditSeq)
		}
	}
}

// Ensure that archiving never breaks the anchor check: the archived
// database opens writable and read-only, a copy from before the archive is
// a rollback, and a database with the archived entries put back, or its
// base record edited, is refused.
func TestArchive_AnchorCheck(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	f.hold("one")
	f.r.Close()
	preArchive := f.path + ".pre"
	copyFile(t, f.path, preArchive)
	f.reopen()
	before := f.r.Head().Seq
	_, res := f.archiveAt(before, "all.kva")
	f.reopen() // writable Open checks the anchor against the base
	f.r.Close()
	defer f.reopen()
	ro, err := Open(f.path, &Options{ReadOnly: true, Anchor: f.anchor})
	if err != nil {
		t.Fatalf("read-only open after archive: %v", err)
	}
	ro.Close()
	post := f.path + ".post"
	copyFile(t, f.path, post)

	_, err = Open(preArchive, &Options{ReadOnly: true, Anchor: f.anchor})
	if !errors.Is(err, ErrRollbackDetected) {
		t.Fatalf("pre-archive copy: %v, want rollback", err)
	}

	// Each tampered copy starts from the archived database.
	pre := mustOpenBolt(t, preArchive)
	var archived [][2][]byte
	pre.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAudit).ForEach(func(k, v []byte) error {
			archived = append(archived, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
			return nil
		})
	})
	pre.Close()
	for _, tc := range []struct {
		name    string
		tamper  func(tx *bolt.Tx) error
		problem audit.Problem
		open    bool // Open's cheap check refuses it too
	}{
		{"entries put back, base record kept", func(tx *bolt.Tx) error { return putAll(tx, archived) }, audit.ProblemBaseMismatch, true},
		{"entries put back, base record removed", func(tx *bolt.Tx) error {
			if err := putAll(tx, archived); err != nil {
				return err
			}
			return tx.Bucket(bucketCheckpoints).Delete(checkpointBase)
		}, audit.ProblemBaseMismatch, false},
		{"base seq edited", func(tx *bolt.Tx) error {
			return editBase(tx, func(b *audit.Base) { b.Seq-- })
		}, audit.ProblemSeqGap, true},
		{"base hash edited", func(tx *bolt.Tx) error {
			return editBase(tx, func(b *audit.Base) { b.Hash[0] ^= 1 })
		}, audit.ProblemBrokenLink, true},
		{"base fence state edited", func(tx *bolt.Tx) error {
			return editBase(tx, func(b *audit.Base) { b.Scopes[0].Epoch++ })
		}, audit.ProblemBaseMismatch, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			copyFile(t, post, f.path)
			db := mustOpenBolt(t, f.path)
			if err := db.Update(tc.tamper); err != nil {
				t.Fatal(err)
			}
			db.Close()
			rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Problem != tc.problem {
				t.Fatalf("verify-chain = %s (%s), want %s", rep.Problem, rep.Detail, tc.problem)
			}
			r, err := Open(f.path, &Options{ReadOnly: true, Anchor: f.anchor})
			if err == nil {
				r.Close()
			}
			if tc.open && (!errors.Is(err, audit.ErrBaseMismatch) || !IsIntegrityError(err)) {
				t.Fatalf("Open = %v, want a base mismatch", err)
			}
		})
	}
	copyFile(t, post, f.path)
	_ = res
}

func mustOpenBolt(t *testing.T, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func putAll(tx *bolt.Tx, kvs [][2][]byte) error {
	for _, kv := range kvs {
		if err := tx.Bucket(bucketAudit).Put(kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}

func editBase(tx *bolt.Tx, edit func(*audit.Base)) error {
	b := tx.Bucket(bucketCheckpoints)
	base, err := audit.ParseBase(b.Get(checkpointBase))
	if err != nil {
		return err
	}
	edit(&base)
	raw, err := audit.MarshalBase(&base)
	if err != nil {
		return err
	}
	return b.Put(checkpointBase, raw)
}

// Ensure that an archive taken while workers submit loses no entry: every
// acknowledged write's entry is in the archive or the database, and the
// whole history verifies.
func TestArchive_ConcurrentSubmits(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	w := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Go(func() {
			for j := 0; j < 20; j++ {
				if res, err := f.r.Submit(f.ctx, "worker-a", w.envelope); err != nil {
					t.Error(err)
					return
				} else if res.Outcome == Denied {
					t.Errorf("submit: %+v", res)
					return
				}
			}
		})
	}
	p, res := f.archiveAt(w.grant.AuditSeq, "one.kva")
	wg.Wait()
	head := f.r.Head()
	rep := verifyWith(t, f, p)
	if !rep.OK() || rep.Archived+rep.Entries != head.Seq || rep.Base != res.To {
		t.Fatalf("verify = %s (%s): %d archived + %d stored, head %d", rep.Problem, rep.Detail, rep.Archived, rep.Entries, head.Seq)
	}
}

// Ensure that the damaged-slot rule holds across an archive. The archive's
// commit is anchored like every write, so the older slot holds the anchor
// from before it, whose seq is the new base at the least: with the newest
// slot damaged, Open falls back to an anchor at the base, whose hash the
// base record keeps, and accepts the database that is past it (the crash
// window); a copy from before the archive with the newest slot damaged is
// a rollback; and an old anchor file put back, naming an archived entry, is
// a stale anchor.
func TestArchive_DamagedSlot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		where func([]byte) int
	}{{"signature", inSignature}, {"padding", inPadding}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, defect.Variant{})
			f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
			f.r.Close()
			oldAnchor := filepath.Join(t.TempDir(), "old.anchor")
			copyFile(t, f.anchor.Path, oldAnchor)
			f.reopen()
			f.hold("one")
			f.r.Close()
			pre := filepath.Join(t.TempDir(), "pre.db")
			copyFile(t, f.path, pre)
			f.reopen()
			head := f.r.Head()
			f.archiveAt(head.Seq, "all.kva") // the base is the anchored head
			f.r.Close()
			post := filepath.Join(t.TempDir(), "post.db")
			copyFile(t, f.path, post)
			goodAnchor := filepath.Join(t.TempDir(), "good.anchor")
			copyFile(t, f.anchor.Path, goodAnchor)

			// The newest slot damaged: the anchor falls back to the base.
			damageNewestSlot(t, f.anchor, tc.where)
			a, err := f.anchor.Load()
			if err != nil || a.Seq != head.Seq {
				t.Fatalf("anchor after damage: seq %d, %v; want the base %d", a.Seq, err, head.Seq)
			}
			var w warnings
			o := f.opts()
			o.Warn = w.warn
			r, err := Open(f.path, &Options{ReadOnly: true, Anchor: f.anchor, Warn: w.warn})
			if err != nil {
				t.Fatalf("read-only Open with the anchor at the base: %v", err)
			}
			r.Close()
			rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
			if err != nil || !rep.OK() || rep.AnchorDamage == nil {
				t.Fatalf("VerifyChain = %s (%s), %v; want ok with the damage reported", rep.Problem, rep.Detail, err)
			}
			if r, err = Open(f.path, o); err != nil {
				t.Fatalf("Open with the anchor at the base: %v", err)
			}
			r.Close()

			// The copy from before the archive, with the newest slot
			// damaged again, ends exactly at the anchor it falls back to.
			copyFile(t, goodAnchor, f.anchor.Path)
			damageNewestSlot(t, f.anchor, tc.where)
			copyFile(t, pre, f.path)
			if _, err := Open(f.path, &Options{ReadOnly: true, Anchor: f.anchor}); !errors.Is(err, ErrRollbackDetected) {
				t.Fatalf("pre-archive copy with a damaged slot: %v, want rollback", err)
			}

			// An anchor from before the base, put back.
			copyFile(t, post, f.path)
			copyFile(t, oldAnchor, f.anchor.Path)
			if _, err := Open(f.path, &Options{ReadOnly: true, Anchor: f.anchor}); !errors.Is(err, audit.ErrAnchorStale) || !IsIntegrityError(err) {
				t.Fatalf("old anchor put back: %v, want a stale anchor", err)
			}
			rep, err = VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
			if err != nil || rep.Problem != audit.ProblemAnchorStale {
				t.Fatalf("VerifyChain with an old anchor = %s (%s), %v", rep.Problem, rep.Detail, err)
			}
			copyFile(t, goodAnchor, f.anchor.Path)
			f.reopen()
		})
	}
}

// Ensure that a base record edited in the database is never carried into
// a new archive: Archive walks the stored chain, whose archive entry
// records the base record's digest, and refuses.
func TestArchive_RefusesUnconfirmedBase(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	g := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	_, res := f.archiveAt(g.grant.AuditSeq, "one.kva")
	f.hold("one")
	f.r.Close()
	whole := filepath.Join(t.TempDir(), "whole.db")
	copyFile(t, f.path, whole)
	f.reopen()
	// The record is edited under the running receiver, which opened
	// before: Archive's own walk refuses it.
	if err := f.r.rawUpdate(func(tx engine.Tx) error {
		b, err := audit.ParseBase(must(tx.Get(bucketCheckpoints, checkpointBase)))
		if err != nil {
			return err
		}
		b.Scopes[0].Grant = ""
		raw, err := audit.MarshalBase(&b)
		if err != nil {
			return err
		}
		return tx.Put(bucketCheckpoints, checkpointBase, raw)
	}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "two.kva")
	_, err := f.admin.Archive(f.ctx, ArchiveRequest{Before: res.AuditSeq, Path: out})
	f.r.Close()
	if !errors.Is(err, audit.ErrBaseMismatch) {
		t.Fatalf("Archive over an edited base record: %v", err)
	}
	// The next Open replays the chain from its base and refuses it too.
	if r, err := Open(f.path, f.opts()); !errors.Is(err, audit.ErrBaseMismatch) {
		if err == nil {
			r.Close()
		}
		t.Fatalf("Open over an edited base record: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("an archive was written: %v", err)
	}
	copyFile(t, whole, f.path)
	f.reopen()
}

// Ensure that of two archives prepared from the same base, only the first
// to commit does: the second finds the base moved and removes nothing.
func TestArchive_Conflict(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.hold("one")
	before := f.r.Head().Seq
	dir := t.TempDir()
	p1, err := f.admin.prepareArchive(f.ctx, ArchiveRequest{Before: before, Path: filepath.Join(dir, "1.kva")})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := f.admin.prepareArchive(f.ctx, ArchiveRequest{Before: before, Path: filepath.Join(dir, "2.kva")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.commitArchive(p1); err != nil {
		t.Fatal(err)
	}
	head := f.r.Head()
	if _, err := f.admin.commitArchive(p2); !errors.Is(err, ErrArchiveConflict) {
		t.Fatalf("second commit: %v, want ErrArchiveConflict", err)
	}
	if f.r.Head() != head {
		t.Fatal("the refused archive wrote an entry")
	}
}

// must returns v, or panics on err: for reads inside a test's transaction.
func must(v []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return v
}
