package kvfence

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	bolt "go.etcd.io/bbolt"
)

// Scenario (the attacker can write the database and the anchor, as for
// any restore, and holds the receiver's signing key; not the recovery
// key): the operator signed an admission naming the witnesses at what
// they hold, and recovered; before the first write after it, the
// witnesses are still where the admission names them. The attacker
// writes a database of its own (same receiver id and key, the real
// recovery key recorded, a history that has nothing of the admitted one,
// not even the admitted seq) and has the receiver's code apply the real
// admission to it, kept bytes and all, and writes its anchor. Open shows
// the admission to the witnesses, which refuse (no proof from the
// admitted tree); but VerifyChain with the operator's --recovery-pub
// checks only that the kept admission verifies and names each witness
// at what it answered, never that the database's tree holds the tree the
// admission admits (admitted_root at the admitted seq), nor that the
// database reaches past the admitted seq: it says ok.
//
// Ensure that VerifyChain forgives a witness after a recovery only for a
// database whose tree extends the one the admission admits.
func TestRedteamS_VerifyChainExcusesTreeNotAdmitted(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, true, true})
	named := rw.witnessed()
	adm := rw.admission(named)
	if _, err := Recover(rw.path, adm, rw.recoverOpts()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	sa, err := audit.ParseSignedAdmission(adm)
	if err != nil {
		t.Fatal(err)
	}
	// The attacker's database.
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake.db")
	fakeAnchor := audit.FileAnchor{Path: filepath.Join(dir, "fake.anchor")}
	if err := Init(fake, &InitOptions{ReceiverID: "rcv", Key: testKey, Anchor: fakeAnchor,
		RecoveryKey: recoveryKey.Public().(ed25519.PublicKey), Now: rw.clock.Now}); err != nil {
		t.Fatal(err)
	}
	fr, err := Open(fake, &Options{Key: testKey, Now: rw.clock.Now, anchorUnchecked: true})
	if err != nil {
		t.Fatal(err)
	}
	old, err := fakeAnchor.Load()
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := anchorClusterRecord(fakeAnchor)
	if err != nil {
		t.Fatal(err)
	}
	rc := recovery{kind: KindRecovered, floor: old.EpochHighWater, detail: "not the admitted head", reason: sa.Reason,
		consumed: audit.AdmissionRecord{SHA256: sha256.Sum256(adm), At: sa.At}, admission: adm, cluster: cluster}
	_, sc, err := fr.applyRecovery(&rc, testKey)
	if err != nil {
		t.Fatalf("the attacker's recovery: %v", err)
	}
	fr.Close()
	if err := fakeAnchor.Supersede(old, sc); err != nil {
		t.Fatal(err)
	}
	if sc.Seq > sa.AdmittedHead.Seq {
		t.Fatalf("the attacker's database (size %d) is to be smaller than the admitted seq %d", sc.Seq, sa.AdmittedHead.Seq)
	}
	ms, err := rw.set.Members(nil)
	if err != nil {
		t.Fatal(err)
	}
	o := rw.options()
	o.Anchor = fakeAnchor
	if r, err := Open(fake, o); err == nil {
		r.Close()
		t.Fatalf("the attacker's database opened with the witnesses")
	}
	rep, err := VerifyChain(fake, VerifyOptions{Anchor: fakeAnchor, PublicKey: testKey.Public().(ed25519.PublicKey),
		Witnesses: ms, WitnessQuorum: 2, WitnessTimeout: 5 * time.Second, RecoveryKey: recoveryKey.Public().(ed25519.PublicKey)})
	if err == nil && rep.OK() {
		t.Fatalf("verify-chain --recovery-pub says ok on a database of size %d that does not hold the admitted tree (seq %d, root %x)",
			sc.Seq, sa.AdmittedHead.Seq, sa.AdmittedRoot[:4])
	}
}

// Scenario (the attacker can write the database and the anchor and holds
// the receiver's signing key; the operator, at verify-chain, gives the
// receiver's public key file as --recovery-pub, the two key files lying
// side by side): the restored pair, which the witnesses are ahead of,
// gets a recovery of the attacker's own, signed with the receiver's key
// (recorded as the recovery key in meta, which Recover then takes).
// Init, Recover's options, witness trust --recovery-pub and the witnesses
// all refuse the receiver's own key as the recovery key, since the point
// of an admission is a second authority; VerifyChain takes it, and
// forgives every witness by the receiver key's decision: ok on a database
// that lost the writes the witnesses cosigned.
//
// Ensure that VerifyChain refuses a recovery key that is the receiver's
// own key, as everything else does.
func TestRedteamS_VerifyChainRecoveryKeyIsReceiverKey(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, true, true})
	now := rw.witnessed()
	receiverPub := testKey.Public().(ed25519.PublicKey)
	db, err := bolt.Open(rw.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaRecoveryKey, receiverPub) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	q, err := Inspect(rw.path, rw.anchor)
	if err != nil {
		t.Fatal(err)
	}
	at := rw.clock.Now()
	adm := signed(t, testKey, audit.Admission{Receiver: q.Receiver, SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: at.UnixNano(), Expires: at.Add(time.Hour).UnixNano(), Reason: "forged", Witnessed: now, AdmittedRoot: q.Root})
	opts := rw.recoverOpts()
	opts.RecoveryKey = receiverPub
	if _, err := Recover(rw.path, adm, opts); !errors.Is(err, ErrRecoveryKeyIsReceiverKey) {
		t.Fatalf("Recover with the receiver's own key as the recovery key: %v, want ErrRecoveryKeyIsReceiverKey", err)
	}
	// The attacker's own code applies it all the same.
	fr, err := Open(rw.path, &Options{Key: testKey, Now: rw.clock.Now, anchorUnchecked: true})
	if err != nil {
		t.Fatal(err)
	}
	old, err := rw.anchor.Load()
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := anchorClusterRecord(rw.anchor)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := audit.ParseSignedAdmission(adm)
	if err != nil {
		t.Fatal(err)
	}
	rc := recovery{kind: KindRecovered, floor: old.EpochHighWater, detail: "forged", reason: sa.Reason,
		consumed: audit.AdmissionRecord{SHA256: sha256.Sum256(adm), At: sa.At}, admission: adm, cluster: cluster}
	_, sc, err := fr.applyRecovery(&rc, testKey)
	fr.Close()
	if err != nil {
		t.Fatalf("the attacker's recovery: %v", err)
	}
	if err := rw.anchor.Supersede(old, sc); err != nil {
		t.Fatal(err)
	}
	ms, err := rw.set.Members(nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyChain(rw.path, VerifyOptions{Anchor: rw.anchor, PublicKey: receiverPub, Witnesses: ms, WitnessQuorum: 2,
		WitnessTimeout: 5 * time.Second, RecoveryKey: receiverPub})
	if !errors.Is(err, ErrRecoveryKeyIsReceiverKey) {
		t.Fatalf("verify-chain with the receiver's own key as --recovery-pub: %v, %v; want ErrRecoveryKeyIsReceiverKey", rep.Problem, err)
	}
	if err == nil && rep.OK() {
		t.Fatalf("verify-chain with the receiver's own key as --recovery-pub says ok on a pair the witnesses are ahead of (at size %d)", now[0].Size)
	}
}
