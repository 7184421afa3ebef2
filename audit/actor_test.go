package audit

import (
	"encoding/hex"
	"strings"
	"testing"
)

// Ensure that actor is spelled in its canonical place, between prev and
// epoch, and that an entry without it encodes exactly as before the field
// existed, so that every stored chain keeps its hashes.
func TestEncodeEntry_Actor(t *testing.T) {
	raw, err := EncodeEntry(&Entry{Seq: 1, Prev: make([]byte, 32), Kind: "hold", Actor: "unix:uid:0", Epoch: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := "a6" + "626174" + "00" + "63736571" + "01" + "646b696e64" + "64686f6c64" +
		"6470726576" + "5820" + strings.Repeat("00", 32) +
		"656163746f72" + "6a" + hex.EncodeToString([]byte("unix:uid:0")) +
		"6565706f6368" + "02"
	if got := hex.EncodeToString(raw); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	e, err := DecodeEntry(raw)
	if err != nil {
		t.Fatal(err)
	}
	if e.Actor != "unix:uid:0" {
		t.Fatalf("actor %q after a round trip", e.Actor)
	}
	if j := e.JSON(HashEntry(raw)); j.Actor != "unix:uid:0" {
		t.Fatalf("JSON actor %q", j.Actor)
	}
	plain, err := EncodeEntry(&Entry{Seq: 1, Prev: make([]byte, 32), Kind: "init"})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) != 59 {
		t.Fatalf("an entry without actor is %d bytes, want the documented 59", len(plain))
	}
	if _, err := EncodeEntry(&Entry{Seq: 1, Prev: make([]byte, 32), Kind: "hold", Actor: "\xff"}); err == nil {
		t.Fatal("an actor that is not UTF-8 was encoded")
	}
}
