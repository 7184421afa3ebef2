package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/client"
)

const goodAssignment = `{"scope":"s","epoch":1,"grant":"g","executor":"spiffe://example.org/agent/w","claim":"c","request_b64":"AQI="}`

// Ensure that DecodeAssignment reads a complete assignment and refuses, with
// ErrAssignment, a missing member, an unknown or duplicate member, a member
// in another case and data that is not JSON.
func TestDecodeAssignment(t *testing.T) {
	a, err := client.DecodeAssignment([]byte(goodAssignment))
	if err != nil || a.Scope != "s" || a.Epoch != 1 || a.Grant != "g" || a.Claim != "c" || string(a.Request) != "\x01\x02" {
		t.Fatalf("DecodeAssignment = %+v, %v", a, err)
	}
	bad := map[string]string{
		"no scope":       strings.Replace(goodAssignment, `"scope":"s",`, ``, 1),
		"zero epoch":     strings.Replace(goodAssignment, `"epoch":1`, `"epoch":0`, 1),
		"no grant":       strings.Replace(goodAssignment, `"grant":"g",`, ``, 1),
		"no executor":    strings.Replace(goodAssignment, `"executor":"spiffe://example.org/agent/w",`, ``, 1),
		"no claim":       strings.Replace(goodAssignment, `"claim":"c",`, ``, 1),
		"no request":     strings.Replace(goodAssignment, `,"request_b64":"AQI="`, ``, 1),
		"unknown member": strings.Replace(goodAssignment, `{`, `{"admin":true,`, 1),
		"duplicate":      strings.Replace(goodAssignment, `{`, `{"scope":"other",`, 1),
		"other case":     strings.Replace(goodAssignment, `"grant"`, `"Grant"`, 1),
		"not JSON":       "scope=s",
		"trailing data":  goodAssignment + `{}`,
	}
	for name, b := range bad {
		if _, err := client.DecodeAssignment([]byte(b)); !errors.Is(err, client.ErrAssignment) {
			t.Errorf("%s: DecodeAssignment(%s) = %v, want ErrAssignment", name, b, err)
		}
	}
}

// Ensure that LoadAssignment names a missing file and refuses one over
// MaxAssignmentSize.
func TestLoadAssignment_Files(t *testing.T) {
	dir := t.TempDir()
	if _, err := client.LoadAssignment(filepath.Join(dir, "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, make([]byte, client.MaxAssignmentSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.LoadAssignment(big); !errors.Is(err, client.ErrAssignment) || !strings.Contains(err.Error(), "over") {
		t.Errorf("oversized file: %v", err)
	}
}

// FuzzDecodeAssignment checks that DecodeAssignment never panics and that
// what it accepts is complete and survives a round trip.
func FuzzDecodeAssignment(f *testing.F) {
	f.Add([]byte(goodAssignment))
	f.Add([]byte(`{"scope":"s"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := client.DecodeAssignment(b)
		if err != nil {
			return
		}
		if a.Scope == "" || a.Epoch == 0 || a.Grant == "" || a.Executor == "" || a.Claim == "" || len(a.Request) == 0 {
			t.Fatalf("accepted an incomplete assignment: %+v", a)
		}
		again, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.DecodeAssignment(again); err != nil {
			t.Fatalf("re-encoded assignment refused: %v", err)
		}
	})
}

// A worker loads its TLS credentials and the assignment its operator wrote
// with "kvfence activate --assignment-out", then submits:
//
//	cfg, err := client.LoadTLS("worker-a.crt", "worker-a.key", "ca.crt")
//	c, err := client.New("https://receiver:8443", cfg)
//	res, err := c.SubmitAssignment(ctx, a)
//
// Here only the loading runs, on a file written as activate writes it.
func ExampleLoadAssignment() {
	dir, err := os.MkdirTemp("", "assignment-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "worker-a.json")
	if err := os.WriteFile(path, []byte(goodAssignment), 0o600); err != nil {
		log.Fatal(err)
	}
	a, err := client.LoadAssignment(path)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Scope, a.Epoch, a.Grant, a.Claim)
	// Output: s 1 g c
}

// LoadTLS refuses to build a configuration that would not verify the
// receiver.
func ExampleLoadTLS() {
	_, err := client.LoadTLS("worker-a.crt", "worker-a.key", "")
	fmt.Println(errors.Is(err, client.ErrNoCA))
	// Output: true
}
