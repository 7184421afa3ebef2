package kvfence

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

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
