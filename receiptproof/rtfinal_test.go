package receiptproof

import (
	"bytes"
	"crypto/ed25519"
	"testing"
)

// A proof file whose receipt names a field twice (or in another case) is
// read by Go's decoder as the last spelling, and by a case-sensitive or
// first-wins reader (jq, a browser, a person) as another receipt: Verify's
// "ok" then vouches for a grant that is not the one shown. Parse must
// refuse such a file.
func TestParse_RefusesReceiptKeysTwice(t *testing.T) {
	p := testProof(t, 7, 3, testKey)
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	real := []byte(`"grant": "` + p.Receipt.Grant + `"`)
	if !bytes.Contains(b, real) {
		t.Fatalf("no grant field in %s", b)
	}
	for name, repl := range map[string]string{
		"duplicate":  `"grant": "g-stale", "grant": "` + p.Receipt.Grant + `"`,
		"other case": `"grant": "g-stale", "Grant": "` + p.Receipt.Grant + `"`,
	} {
		edited := bytes.Replace(b, real, []byte(repl), 1)
		q, err := Parse(edited)
		if err != nil {
			continue
		}
		if _, err := Verify(q, testKey.Public().(ed25519.PublicKey)); err == nil {
			t.Errorf("%s: a proof whose receipt shows grant g-stale first verifies as grant %q", name, q.Receipt.Grant)
		}
	}
}
