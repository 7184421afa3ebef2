package kvfence

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/witness"
)

// rtForgeNone answers a latest request to any of hosts with the plain
// "none" a witness gives for a log it never cosigned: nothing in it is
// signed, so anyone on the path of an http witness URL can say it.
type rtForgeNone struct {
	hosts map[string]bool
	next  http.RoundTripper
}

func (f rtForgeNone) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.hosts[r.URL.Host] && strings.HasSuffix(r.URL.Path, witness.LatestPath) {
		body := witness.ErrNoCheckpoint.Error() + ": " + r.URL.Query().Get("origin") + "\n"
		return &http.Response{StatusCode: http.StatusNotFound, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
	}
	return f.next.RoundTrip(r)
}

// Scenario (a network attacker on the path to http witnesses, no key):
// the operator's admission names witness 1 only (the others did not show
// their latest when it was decided), though witnesses 2 and 3 hold the
// newer tree the restore lost. Recover is to refuse an admission that
// does not name every answering witness at its latest; but a fresh
// process has seen no cosignature, so the unsigned "none" the attacker
// puts in the mouths of witnesses 2 and 3 counts as two answers of "no
// checkpoint", and the admission passes: the recovery (every grant
// revoked, the anchor superseded) is committed against a decision that
// never saw what the witnesses hold. Open is then refused for good while
// witnesses 2 and 3 answer truly, and the recovery cannot be undone.
//
// Ensure that Recover does not count an unsigned "none" as a witness's
// account of what it holds.
func TestRedteamR_RecoverForgedNoneHidesWitnesses(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, true, true})
	now := rw.witnessed()
	hosts := map[string]bool{}
	for _, w := range rw.set.Witnesses[1:] {
		u, err := url.Parse(w.URL)
		if err != nil {
			t.Fatal(err)
		}
		hosts[u.Host] = true
	}
	base := rw.set.Client()
	forged := &http.Client{Transport: rtForgeNone{hosts: hosts, next: base.Transport}, Timeout: base.Timeout}
	ms, err := rw.set.Members(forged)
	if err != nil {
		t.Fatal(err)
	}
	opts := rw.recoverOpts()
	opts.Witnesses = ms
	before, err := Inspect(rw.path, rw.anchor)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Recover(rw.path, rw.admission([]audit.WitnessedCheckpoint{now[0]}), opts)
	after, ierr := Inspect(rw.path, rw.anchor)
	if ierr != nil {
		t.Fatal(ierr)
	}
	if err == nil || after.Head != before.Head {
		t.Fatalf("recover with an admission naming witness 1 only, witnesses 2 and 3 (at sizes %d, %d) made to say \"none\": err %v; head %d -> %d",
			now[1].Size, now[2].Size, err, before.Head.Seq, after.Head.Seq)
	}
}

// Scenario (the attacker can write the database and the anchor, as for
// any restore, and holds the receiver's signing key, which sits beside
// them on the receiver's host; not the recovery key): the pair is put
// back from a backup, and the witnesses, ahead of it, make Open refuse.
// Open and VerifyChain excuse a witness on the strength of the admission
// kept in the meta bucket, checking only that the newest checkpoint
// (signed by the receiver's key) names its hash: the admission's own
// signature is never checked there, and the recovery key that Recover
// checks it with is itself a meta record of the same database. The
// attacker records its own key as the recovery key, signs an admission
// naming every witness at what it holds now, and runs Recover: Open then
// excuses every witness, and VerifyChain with the witnesses says ok, on
// a database that lost the writes the witnesses cosigned. The witnesses
// themselves refuse the admission (it is not signed by the recovery key
// they trust), so the rollback is a decision of the receiver's key, not
// the recovery key's, and only the failed cosign rounds after it show it.
//
// Ensure that a restored pair whose kept admission is not signed by the
// recovery key the witnesses trust is refused at Open and by VerifyChain.
func TestRedteamR_ForgedKeptAdmissionExcusesRollback(t *testing.T) {
	rw := newRestoredWitnessed(t, []bool{true, true, true})
	if _, err := rw.open(); !errors.Is(err, ErrRollbackDetected) {
		t.Fatalf("restored pair opened: %v", err)
	}
	now := rw.witnessed()
	attacker := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{66}, 32))
	attackerPub := attacker.Public().(ed25519.PublicKey)
	db, err := bolt.Open(rw.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaRecoveryKey, attackerPub)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	q, err := Inspect(rw.path, rw.anchor)
	if err != nil {
		t.Fatal(err)
	}
	at := rw.clock.Now()
	adm := signed(t, attacker, audit.Admission{Receiver: q.Receiver, SupersededAnchor: q.Anchor, AdmittedHead: q.Head,
		AdmittedState: q.State, At: at.UnixNano(), Expires: at.Add(time.Hour).UnixNano(), Reason: "forged", Witnessed: now, AdmittedRoot: q.Root})
	opts := rw.recoverOpts()
	opts.RecoveryKey = attackerPub
	if _, err := Recover(rw.path, adm, opts); err != nil {
		t.Fatalf("the attacker's recovery: %v", err)
	}
	r, openErr := rw.open()
	if openErr == nil {
		r.Close()
	}
	ms, err := rw.set.Members(nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, verr := VerifyChain(rw.path, VerifyOptions{Anchor: rw.anchor, PublicKey: testKey.Public().(ed25519.PublicKey), Witnesses: ms, WitnessQuorum: 2})
	if openErr == nil || (verr == nil && rep.OK()) {
		t.Fatalf("restored pair with a kept admission signed by a key no witness trusts: open err %v; verify-chain with the witnesses: %v, %v",
			openErr, rep.Problem, verr)
	}
}
