package audit_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/kvfence/kvfence/audit"
)

// store stands in for a bbolt bucket: key SeqKey(seq), value the entry.
type store struct{ keys, values [][]byte }

func (s *store) put(k, v []byte) { s.keys, s.values = append(s.keys, k), append(s.values, v) }

func (s *store) entries(yield func(k, v []byte) bool) {
	for i := range s.keys {
		if !yield(s.keys[i], s.values[i]) {
			return
		}
	}
}

func (s *store) hashAt(seq uint64) (audit.Hash, error) { return audit.HashEntry(s.values[seq-1]), nil }

// The receiver appends an entry per decision inside its write transaction,
// signs a checkpoint of the new head and, after the commit, moves the
// anchor forward with compare-and-swap.
func ExampleChain_Append() {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	var db store
	anchor := new(audit.MemAnchor)
	chain := audit.NewChain(audit.Head{})
	var last *audit.SignedCheckpoint
	for _, kind := range []string{"init", "scope_created", "hold"} {
		raw, _, err := chain.Append(&audit.Entry{Kind: kind, Scope: "configmap/prod/backup-policy"})
		if err != nil {
			log.Fatal(err)
		}
		db.put(audit.SeqKey(chain.Head().Seq), raw)
		head := chain.Head()
		sc, err := audit.Sign(key, audit.Checkpoint{Root: audit.Hash{0x7e}, Receiver: "receiver-1", Seq: head.Seq, Head: head.Hash, EpochHighWater: 2})
		if err != nil {
			log.Fatal(err)
		}
		if err := anchor.Store(last, sc); err != nil {
			log.Fatal(err)
		}
		last = &sc
	}
	stored, _ := anchor.Load()
	fmt.Println("anchored seq", stored.Seq, "of", len(db.keys), "entries")
	// Output: anchored seq 3 of 3 entries
}

// On open, the receiver checks its anchor cheaply against the database's
// head; a database restored from an older copy is refused.
func ExampleCheckAnchor() {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	pub := key.Public().(ed25519.PublicKey)
	var db store
	chain := audit.NewChain(audit.Head{})
	var heads []audit.Head
	for range 5 {
		raw, _, _ := chain.Append(&audit.Entry{Kind: "submit"})
		db.put(audit.SeqKey(chain.Head().Seq), raw)
		heads = append(heads, chain.Head())
	}
	anchor, _ := audit.Sign(key, audit.Checkpoint{Root: audit.Hash{0x7e}, Receiver: "receiver-1", Seq: 4, Head: heads[3].Hash})

	fmt.Println("current:", audit.CheckAnchor(anchor, pub, "receiver-1", heads[4], db.hashAt))
	err := audit.CheckAnchor(anchor, pub, "receiver-1", heads[2], db.hashAt)
	var rb *audit.RollbackError
	fmt.Println("restored copy:", errors.As(err, &rb), rb.Head.Seq, "<", rb.Anchor.Seq)
	// Output:
	// current: <nil>
	// restored copy: true 3 < 4
}

// Verify streams the whole chain, as "kvfence verify-chain" does, and
// reports the first problem with a stable code.
func ExampleVerify() {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	var db store
	chain := audit.NewChain(audit.Head{})
	for range 3 {
		raw, _, _ := chain.Append(&audit.Entry{Kind: "submit", Outcome: "denied"})
		db.put(audit.SeqKey(chain.Head().Seq), raw)
	}
	sc, _ := audit.Sign(key, audit.Checkpoint{Root: audit.Hash{0x7e}, Receiver: "receiver-1", Seq: 3, Head: chain.Head().Hash})
	anchor := new(audit.MemAnchor)
	anchor.Store(nil, sc)
	opts := audit.VerifyOptions{Entries: db.entries, Anchor: anchor,
		PublicKey: key.Public().(ed25519.PublicKey), Receiver: "receiver-1"}

	r, err := audit.Verify(opts)
	fmt.Println(r.Problem, r.Entries, err)

	// Rewrite entry 2 as "applied": entry 3 no longer links to it.
	e, _ := audit.DecodeEntry(db.values[1])
	e.Outcome = "applied"
	db.values[1], _ = audit.EncodeEntry(&e)
	r, _ = audit.Verify(opts)
	fmt.Println(r.Problem, errors.Is(r.Err(), audit.ErrBrokenLink))
	// Output:
	// ok 3 <nil>
	// broken_link true
}

// A FileAnchor never creates an anchor on Load, and refuses to move back.
func ExampleFileAnchor() {
	dir, _ := os.MkdirTemp("", "anchor")
	defer os.RemoveAll(dir)
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	fa := audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}

	_, err := fa.Load()
	fmt.Println(errors.Is(err, audit.ErrAnchorMissing))

	at := func(seq uint64) audit.SignedCheckpoint {
		sc, _ := audit.Sign(key, audit.Checkpoint{Root: audit.Hash{0x7e}, Receiver: "receiver-1", Seq: seq, Head: audit.Hash{byte(seq)},
			State: audit.Hash{0x57}, At: 1767225600e9})
		return sc
	}
	ten, five := at(10), at(5)
	fmt.Println(fa.Store(nil, ten))
	fmt.Println(errors.Is(fa.Store(&ten, five), audit.ErrAnchorRegression))
	// The file is two 4096-byte slots; the first holds the anchor, the
	// second is still empty.
	data, _ := os.ReadFile(fa.Path)
	fmt.Println(len(data), bytes.Count(data[audit.AnchorSlotSize:], []byte{0}))
	fmt.Print(string(data[:bytes.Index(data, []byte("\nkey"))+1]))
	// Output:
	// true
	// <nil>
	// true
	// 8192 4096
	// kvfence-anchor-slot v1 gen=00000000000000000001 len=0451 sha256=ae79abe2a5190e432d02ed13eecd845e775209f8cce20a623f538f7cd5a006e5
	// kvfence checkpoint v3
	// receiver receiver-1
	// seq 10
	// head 0a00000000000000000000000000000000000000000000000000000000000000
	// root 7e00000000000000000000000000000000000000000000000000000000000000
	// state 5700000000000000000000000000000000000000000000000000000000000000
	// epoch_high_water 0
	// at 2026-01-01T00:00:00Z
}

// A byte changed in the newest slot makes Load fall back to the older
// anchor; Inspect says so, and Check refuses a database that ends exactly
// at the older anchor, since the newer one was written only after the
// database had committed past it.
func ExampleFileAnchor_Inspect() {
	dir, _ := os.MkdirTemp("", "anchor")
	defer os.RemoveAll(dir)
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	fa := audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	at := func(seq uint64) audit.SignedCheckpoint {
		sc, _ := audit.Sign(key, audit.Checkpoint{Root: audit.Hash{0x7e}, Receiver: "receiver-1", Seq: seq, Head: audit.Hash{byte(seq)}, At: 1767225600e9})
		return sc
	}
	four, five := at(4), at(5)
	fa.Store(nil, four)   // slot 0, generation 1
	fa.Store(&four, five) // slot 1, generation 2

	data, _ := os.ReadFile(fa.Path)
	data[audit.AnchorSlotSize+200] ^= 1 // in slot 1's anchor text
	os.WriteFile(fa.Path, data, 0o600)

	rep, _ := fa.Inspect()
	d := rep.Damage
	fmt.Println(rep.Current.Seq, d.Slot, d.Problem, d.ClaimedGeneration, d.CurrentGeneration, d.Next())
	hashAt := func(seq uint64) (audit.Hash, error) { return audit.Hash{byte(seq)}, nil }
	pub := key.Public().(ed25519.PublicKey)
	restored := audit.Head{Seq: 4, Hash: audit.Hash{4}}
	fmt.Println(errors.Is(d.Check(rep.Current.Checkpoint, pub, "receiver-1", restored, hashAt), audit.ErrRollbackDetected))
	crashed := audit.Head{Seq: 5, Hash: audit.Hash{5}}
	fmt.Println(d.Check(rep.Current.Checkpoint, pub, "receiver-1", crashed, hashAt))
	// Output:
	// 4 1 checksum mismatch 2 1 true
	// true
	// <nil>
}

// Recovery from a questioned history needs an admission signed by the
// separate recovery key, naming exactly this receiver, anchor, head and
// state.
func ExampleSignAdmission() {
	recovery := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
	anchor := audit.Head{Seq: 8, Hash: audit.Hash{8}}
	head := audit.Head{Seq: 7, Hash: audit.Hash{7}}
	state := audit.Hash{0x57} // the sum of the database's StateHash
	sa, err := audit.SignAdmission(recovery, audit.Admission{Receiver: "receiver-1", SupersededAnchor: anchor,
		AdmittedHead: head, AdmittedState: state, At: 1767225600e9, Expires: 1767225600e9 + int64(time.Hour),
		Reason: "restored from backup after disk loss"})
	if err != nil {
		log.Fatal(err)
	}
	raw, _ := sa.Marshal()

	got, _ := audit.ParseSignedAdmission(raw)
	fmt.Println(got.Verify(recovery.Public().(ed25519.PublicKey)))
	fmt.Println(got.Check("receiver-1", anchor, head, state))
	fmt.Println(errors.Is(got.Check("receiver-1", anchor, audit.Head{Seq: 9}, state), audit.ErrAdmissionMismatch))
	// It is valid for an hour after it was signed, on the clock of the
	// machine that applies it.
	fmt.Println(got.CheckTime(time.Unix(1767225600+1800, 0)))
	fmt.Println(errors.Is(got.CheckTime(time.Unix(1767225600+3600, 0)), audit.ErrAdmissionExpired))
	// Output:
	// <nil>
	// <nil>
	// true
	// <nil>
	// true
}

// A receiver whose anchor is lost is re-anchored by the other kind of
// admission: it names the receiver and head, says that there is no anchor
// to supersede, and carries the operator's epoch floor.
func ExampleSignAdmission_lostAnchor() {
	recovery := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))
	head := audit.Head{Seq: 7, Hash: audit.Hash{7}}
	state := audit.Hash{0x57}
	sa, err := audit.SignAdmission(recovery, audit.Admission{Receiver: "receiver-1", LostAnchor: true,
		AdmittedHead: head, AdmittedState: state, EpochFloor: 40, At: 1767225600e9, Expires: 1767225600e9 + int64(time.Hour),
		Reason: "anchor volume lost"})
	if err != nil {
		log.Fatal(err)
	}
	raw, _ := sa.Marshal()

	got, _ := audit.ParseSignedAdmission(raw)
	fmt.Println(got.LostAnchor, got.EpochFloor, got.Verify(recovery.Public().(ed25519.PublicKey)))
	fmt.Println(got.CheckLostAnchor("receiver-1", head, state))
	fmt.Println(errors.Is(got.Check("receiver-1", audit.Head{Seq: 8}, head, state), audit.ErrAdmissionMismatch))
	// Output:
	// true 40 <nil>
	// <nil>
	// true
}
