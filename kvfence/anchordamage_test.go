package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// Places in a slot to change one byte: in the signature, the anchor text
// still parses but no longer verifies; in the padding, the checkpoint
// still verifies and tells its seq and head.
var (
	inSignature = func(slot []byte) int { return bytes.Index(slot, []byte("\nsig ")) + 10 }
	inPadding   = func([]byte) int { return 4000 }
)

// damageNewestSlot changes one byte of the anchor file's current slot, as
// anyone who can write the file can, and returns that slot's index.
func damageNewestSlot(t *testing.T, fa audit.FileAnchor, where func(slot []byte) int) int {
	t.Helper()
	rep, err := fa.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Damage != nil {
		t.Fatalf("the anchor file is damaged already: %v", rep.Damage)
	}
	data, err := os.ReadFile(fa.Path)
	if err != nil {
		t.Fatal(err)
	}
	slot := data[rep.Slot*audit.AnchorSlotSize : (rep.Slot+1)*audit.AnchorSlotSize]
	slot[where(slot)] ^= 0x01
	if err := os.WriteFile(fa.Path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return rep.Slot
}

// warnings collects what a receiver reports through Options.Warn.
type warnings struct{ msgs []string }

func (w *warnings) warn(msg string) { w.msgs = append(w.msgs, msg) }

// only fails the test unless exactly one warning was given and it
// contains every part.
func (w *warnings) only(t *testing.T, parts ...string) {
	t.Helper()
	if len(w.msgs) != 1 {
		t.Fatalf("%d warnings %q, want 1", len(w.msgs), w.msgs)
	}
	for _, p := range parts {
		if !strings.Contains(w.msgs[0], p) {
			t.Fatalf("warning %q does not say %q", w.msgs[0], p)
		}
	}
}

// Ensure that one byte changed in the newest anchor slot, beside a database
// that holds the write it anchored, is reported by every kind of open and
// by VerifyChain, and that a writable open then rewrites the slot.
func TestOpen_DamagedNewestSlotWarns(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	head := f.r.Head()
	f.r.Close()
	slot := damageNewestSlot(t, f.anchor, inSignature)
	want := "anchor slot " + string(rune('0'+slot)) + " is damaged"

	rep, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil || !rep.OK() || rep.AnchorDamage == nil || rep.AnchorDamage.Slot != slot || !rep.AnchorDamage.Next() {
		t.Fatalf("VerifyChain = %+v, %v; want ok with slot %d reported as the newest write", rep, err, slot)
	}

	var ro warnings
	r, err := Open(f.path, &Options{ReadOnly: true, Anchor: f.anchor, Warn: ro.warn})
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	ro.only(t, want, "crash")
	if d := r.AnchorDamage(); d == nil || d.Slot != slot {
		t.Fatalf("read-only AnchorDamage() = %+v", d)
	}
	r.Close()
	if rep, _ := f.anchor.Inspect(); rep.Damage == nil {
		t.Fatal("a read-only open repaired the anchor file")
	}

	var rw warnings
	o := f.opts()
	o.Warn = rw.warn
	if f.r, err = Open(f.path, o); err != nil {
		t.Fatalf("writable open: %v", err)
	}
	f.admin = f.r.Admin()
	rw.only(t, want)
	if d := f.r.AnchorDamage(); d == nil || d.Slot != slot {
		t.Fatalf("AnchorDamage() = %+v", d)
	}
	// The open moved the anchor up to the head, over the damaged slot.
	if rep, err := f.anchor.Inspect(); err != nil || rep.Damage != nil || rep.Current.Seq != head.Seq || rep.Slot != slot {
		t.Fatalf("after the open: %+v, %v; want the head in slot %d", rep, err, slot)
	}
	var none warnings
	f.r.Close()
	o.Warn = none.warn
	if f.r, err = Open(f.path, o); err != nil || f.r.AnchorDamage() != nil || len(none.msgs) != 0 {
		t.Fatalf("open of a whole file: %v, %v, %q", err, f.r.AnchorDamage(), none.msgs)
	}
}

// Ensure that a database put back as it was at the previous write, with
// the newest anchor slot damaged so that the anchor falls back to that
// write too, is refused as a rollback at open and by VerifyChain, whether
// or not the damaged slot still verifies; that without the rule the old
// grant works again; and that a recovery admission re-admits it.
func TestOpen_RestoredToPreviousWriteWithDamagedSlot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		where func([]byte) int
	}{{"signature", inSignature}, {"padding", inPadding}} {
		t.Run(tc.name, func(t *testing.T) {
			f, path, anchor, clock := recoverableFixture(t)
			a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention")) // write N
			f.r.Close()
			backup := filepath.Join(t.TempDir(), "write-n.db")
			copyFile(t, path, backup)
			f.reopen()
			f.hold("worker-a lease expired") // write N+1
			f.r.Close()
			damageNewestSlot(t, anchor, tc.where)
			copyFile(t, backup, path)

			var w warnings
			o := f.opts()
			o.Warn = w.warn
			_, err := Open(path, o)
			if !errors.Is(err, ErrRollbackDetected) || !IsIntegrityError(err) || !strings.Contains(err.Error(), "is damaged") {
				t.Fatalf("Open = %v; want ErrRollbackDetected naming the damaged slot", err)
			}
			var se *audit.SuspectedRollbackError
			var re *audit.RollbackError
			if tc.name == "signature" && !errors.As(err, &se) || tc.name == "padding" && !errors.As(err, &re) {
				t.Fatalf("Open = %#v; want a suspected rollback when the slot does not verify, a proven one when it does", err)
			}
			if _, err := Open(path, &Options{ReadOnly: true, Anchor: anchor, Warn: w.warn}); !errors.Is(err, ErrRollbackDetected) {
				t.Fatalf("read-only Open = %v; want ErrRollbackDetected", err)
			}
			rep, err := VerifyChain(path, VerifyOptions{Anchor: anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
			if err != nil || rep.Problem != audit.ProblemRollbackDetected || rep.AnchorDamage == nil ||
				!strings.Contains(rep.Detail, "is damaged") {
				t.Fatalf("VerifyChain = %+v, %v; want rollback_detected", rep, err)
			}

			// Without the anchor check the restored copy takes A's old grant:
			// the refusal above is what stops it.
			v, err := open(path, &Options{Key: testKey, Now: clock.Now}, defect.Variant{SkipAnchor: true})
			if err != nil {
				t.Fatal(err)
			}
			res, err := v.Submit(f.ctx, "worker-a", a.envelope)
			v.Close()
			if err != nil || res.Outcome != Applied {
				t.Fatalf("restored copy without the anchor check: %+v, %v", res, err)
			}
			copyFile(t, backup, path)

			// The way back is a recovery admission for this anchor and head.
			q, err := Inspect(path, anchor)
			if err != nil || q.AnchorDamage == nil || q.Anchor != q.Head {
				t.Fatalf("Inspect = %+v, %v", q, err)
			}
			sa, err := audit.SignAdmission(recoveryKey, audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor,
				AdmittedHead: q.Head, AdmittedState: q.State, At: clock.Now().UnixNano(), Expires: clock.Now().Add(time.Hour).UnixNano(), Reason: "restored with a damaged anchor slot"})
			if err != nil {
				t.Fatal(err)
			}
			raw, err := sa.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Recover(path, raw, RecoverOptions{Key: testKey, Anchor: anchor,
				RecoveryKey: recoveryKey.Public().(ed25519.PublicKey), Now: clock.Now}); err != nil {
				t.Fatalf("Recover: %v", err)
			}
			if f.r, err = Open(path, f.opts()); err != nil {
				t.Fatalf("Open after recovery: %v", err)
			}
			f.admin = f.r.Admin()
			wantDenied(t, f.submit("worker-a", a.envelope), ReasonReceiverHeld)
			checkChain(t, f.r)
			f.r.Close()
		})
	}
}

// Ensure that an anchor write torn by a crash after its commit, which
// leaves the newer slot damaged and the database past the older one, is
// no false alarm: the receiver opens, warns, and rewrites the slot.
func TestOpen_TornAnchorWriteAfterCommit(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.r.Close()
	before, err := os.ReadFile(f.anchor.Path)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := f.anchor.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	f.reopen()
	f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	head := f.r.Head()
	f.r.Close()
	after, err := os.ReadFile(f.anchor.Path)
	if err != nil {
		t.Fatal(err)
	}
	// Of the slot the write went to, only the header and part of the
	// anchor reached the disk; the rest of the slot is the old anchor.
	target := 1 - pre.Slot
	torn := bytes.Clone(before)
	off := target * audit.AnchorSlotSize
	copy(torn[off:], after[off:off+200])
	if bytes.Equal(torn, after) || bytes.Equal(torn, before) {
		t.Fatal("the torn file is not torn")
	}
	if err := os.WriteFile(f.anchor.Path, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := f.anchor.Inspect()
	if err != nil || rep.Current != pre.Current || rep.Damage == nil || !rep.Damage.Next() {
		t.Fatalf("torn file: %+v, %v; want the previous anchor and the torn slot as the next write", rep, err)
	}

	vr, err := VerifyChain(f.path, VerifyOptions{Anchor: f.anchor, PublicKey: testKey.Public().(ed25519.PublicKey)})
	if err != nil || !vr.OK() || vr.AnchorDamage == nil {
		t.Fatalf("VerifyChain = %+v, %v; want ok with the damage reported", vr, err)
	}
	var w warnings
	o := f.opts()
	o.Warn = w.warn
	if f.r, err = Open(f.path, o); err != nil {
		t.Fatalf("Open after a torn anchor write: %v", err)
	}
	f.admin = f.r.Admin()
	w.only(t, "is damaged", "crash")
	if rep, err := f.anchor.Inspect(); err != nil || rep.Damage != nil || rep.Current.Seq != head.Seq || rep.Slot != target {
		t.Fatalf("after the open: %+v, %v; want the head in slot %d", rep, err, target)
	}
}

// Ensure that a damaged older slot, beside an anchor at the database's
// head, is reported and nothing more.
func TestOpen_DamagedOlderSlotWarns(t *testing.T) {
	f := newFixture(t, defect.Variant{})
	f.r.Close()
	rep, err := f.anchor.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f.anchor.Path)
	if err != nil {
		t.Fatal(err)
	}
	older := 1 - rep.Slot
	data[older*audit.AnchorSlotSize+200] ^= 0x01
	if err := os.WriteFile(f.anchor.Path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var w warnings
	o := f.opts()
	o.Warn = w.warn
	if f.r, err = Open(f.path, o); err != nil {
		t.Fatalf("Open: %v", err)
	}
	f.admin = f.r.Admin()
	w.only(t, "is damaged", "newest one written")
	if d := f.r.AnchorDamage(); d == nil || d.Slot != older || d.Next() {
		t.Fatalf("AnchorDamage() = %+v; want slot %d", d, older)
	}
}
