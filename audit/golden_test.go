package audit

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares data with testdata/name, or writes it there with -update.
// A missing want (nil data) means the file must not exist.
func golden(t *testing.T, name string, data []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if data == nil {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	switch {
	case data == nil && errors.Is(err, fs.ErrNotExist):
	case err != nil:
		t.Fatalf("%v (run go test -update to create it)", err)
	case !bytes.Equal(got, data):
		t.Fatalf("%s differs from what this code produces; the format changed? (go test -update rewrites it)\n got %q\nwant %q", path, data, got)
	}
}

// formatRecords writes a chain as one "key value" line of hex per record.
func formatRecords(recs []record) []byte {
	b := bytes.NewBuffer([]byte{}) // an empty chain is an empty file, not none
	for _, r := range recs {
		fmt.Fprintf(b, "%x %x\n", r.k, r.v)
	}
	return b.Bytes()
}

func parseRecords(t *testing.T, data []byte) []record {
	var recs []record
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, " ")
		kb, err1 := hex.DecodeString(k)
		vb, err2 := hex.DecodeString(v)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("line %d: malformed record", i+1)
		}
		recs = append(recs, record{kb, vb})
	}
	return recs
}

func formatReport(r Report) []byte {
	return fmt.Appendf(nil, "problem: %s\nentries: %d\nhead: %v\nanchor: %v\ndetail: %s\n",
		r.Problem, r.Entries, r.Head, r.Anchor, r.Detail)
}

// Ensure that the golden chains under testdata/chains, one valid and one
// damaged per problem code, are still produced byte for byte and still
// verify to their recorded report. The verification reads the files, so
// they also serve as fixtures for other verifiers (the CLI's verify-chain).
func TestGolden_Chains(t *testing.T) {
	sp, err := ssh.NewPublicKey(pubOf(receiverKey))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "chains/receiver.pub", ssh.MarshalAuthorizedKey(sp))
	for _, tc := range chainCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			dir := "chains/" + tc.name
			golden(t, dir+"/entries", formatRecords(tc.recs))
			var text []byte
			if tc.anchor != nil {
				var err error
				if text, err = tc.anchor.MarshalAnchor(); err != nil {
					t.Fatal(err)
				}
			}
			golden(t, dir+"/anchor", text)

			data, err := os.ReadFile(filepath.Join("testdata", dir, "entries"))
			if err != nil {
				t.Fatal(err)
			}
			store := new(MemAnchor)
			switch text, err := os.ReadFile(filepath.Join("testdata", dir, "anchor")); {
			case err == nil:
				sc, err := ParseAnchor(text)
				if err != nil {
					t.Fatal(err)
				}
				store.Store(nil, sc)
			case !errors.Is(err, fs.ErrNotExist):
				t.Fatal(err)
			}
			r, err := Verify(VerifyOptions{Entries: entriesOf(parseRecords(t, data)), Anchor: store,
				PublicKey: pubOf(receiverKey), Receiver: testReceiver})
			if err != nil {
				t.Fatal(err)
			}
			if r.Problem != tc.problem {
				t.Fatalf("problem %s, want %s", r.Problem, tc.problem)
			}
			golden(t, dir+"/report", formatReport(r))
		})
	}
}

// Ensure that the signed formats are still spelled byte for byte as in
// testdata/format, and that those files still parse and verify.
func TestGolden_Formats(t *testing.T) {
	sc, err := Sign(receiverKey, testCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	sa, err := SignAdmission(recoveryKey, testAdmission())
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := testChain(t, 4)
	entry := recs[3].v
	cbor, _ := sc.Marshal()
	anchor, _ := sc.MarshalAnchor()
	adm, _ := sa.Marshal()
	la, err := SignAdmission(recoveryKey, testLostAnchorAdmission())
	if err != nil {
		t.Fatal(err)
	}
	lostAnchor, _ := la.Marshal()
	sr, err := Sign(receiverKey, testCheckpointAdmission())
	if err != nil {
		t.Fatal(err)
	}
	cborRec, _ := sr.Marshal()
	anchorRec, _ := sr.MarshalAnchor()
	golden(t, "format/entry.cbor", entry)
	golden(t, "format/checkpoint.cbor", cbor)
	golden(t, "format/anchor", anchor)
	golden(t, "format/admission.cbor", adm)
	golden(t, "format/admission-lost-anchor.cbor", lostAnchor)
	golden(t, "format/checkpoint-admission.cbor", cborRec)
	golden(t, "format/anchor-admission", anchorRec)

	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata/format", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, err := DecodeEntry(read("entry.cbor")); err != nil {
		t.Error(err)
	}
	for name, parse := range map[string]func([]byte) (SignedCheckpoint, error){
		"checkpoint.cbor": ParseSignedCheckpoint, "anchor": ParseAnchor,
		"checkpoint-admission.cbor": ParseSignedCheckpoint, "anchor-admission": ParseAnchor,
	} {
		got, err := parse(read(name))
		if err != nil || got.Verify(pubOf(receiverKey)) != nil {
			t.Errorf("%s: %v", name, err)
		}
		if rec := strings.Contains(name, "admission"); got.Admission.IsZero() == rec {
			t.Errorf("%s: admission record %+v", name, got.Admission)
		}
	}
	for name, lost := range map[string]bool{"admission.cbor": false, "admission-lost-anchor.cbor": true} {
		got, err := ParseSignedAdmission(read(name))
		if err == nil {
			err = got.Verify(pubOf(recoveryKey))
		}
		if err != nil || got.LostAnchor != lost {
			t.Errorf("%s: lost anchor %v, %v", name, got.LostAnchor, err)
		}
	}
}
