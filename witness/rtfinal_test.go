package witness_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/witness"
)

// forgeNone answers every latest request with the plain-text "none" a
// witness gives for a log it never cosigned: nothing in it is signed, so
// anyone on the path (the URL may be http) or a witness that lost its
// store can say it.
type forgeNone struct{ next http.RoundTripper }

func (f forgeNone) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, witness.LatestPath) {
		body := witness.ErrNoCheckpoint.Error() + ": " + r.URL.Query().Get("origin") + "\n"
		return &http.Response{StatusCode: http.StatusNotFound, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
	}
	return f.next.RoundTrip(r)
}

// A log restored to size 10 after K=2 of 3 witnesses cosigned size 20
// through this very quorum: the cosigners' unsigned "none" counts as two
// answers of size 0 and Check reports no divergence, though the quorum
// itself holds their cosignatures of size 20.
func TestQuorumCheck_UnsignedNoneHidesRollback(t *testing.T) {
	f := newQFixture(t, 3)
	ms := f.members()
	for i := range ms {
		c, err := witness.NewClient(f.ws[i].srv.URL, witness.ClientOptions{HTTPClient: &http.Client{Transport: forgeNone{http.DefaultTransport}}})
		if err != nil {
			t.Fatal(err)
		}
		ms[i].Client = c
	}
	q, err := witness.NewQuorum(witness.QuorumOptions{Members: ms, Quorum: 2, Log: f.logv})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := q.Cosign(ctx, f.signed(t, f.main, 20), prove(t, f.main, 20))
	if err != nil || len(res.Cosigned) != 2 {
		t.Fatalf("Cosign at 20 = %+v, %v", res, err)
	}
	f.ws[2].down()
	cres, err := q.Check(ctx, f.origin, f.local(t, f.main, 10), consistency(f.main))
	if err == nil {
		t.Fatalf("Check of a log rolled back from 20 to 10 = ok (%d answers of %d needed); want a rollback or too few answers", cres.Answers, cres.Needed)
	}
}
