package api

import (
	"bytes"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that every field of an entry survives the JSON form a served
// receiver sends, archive entries' base fields included: the client
// re-encodes the entry and checks it against the hash the receiver sent.
func TestEventRoundTrip(t *testing.T) {
	c := audit.NewChain(audit.Head{})
	e := &audit.Entry{At: 1, Kind: audit.KindArchived, Actor: "unix:uid:0", Note: "entries 1 to 5 archived",
		BaseSeq: 5, BaseHash: bytes.Repeat([]byte{1}, 32), BaseFence: bytes.Repeat([]byte{2}, 32)}
	if _, h, err := c.Append(e); err != nil {
		t.Fatal(err)
	} else if ev, err := Event(e.JSON(h)); err != nil || ev.Hash != h || ev.BaseSeq != 5 || !bytes.Equal(ev.BaseFence, e.BaseFence) {
		t.Fatalf("Event = %+v, %v", ev, err)
	}
}
