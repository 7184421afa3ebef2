package main

import (
	"os"
	"strings"
	"testing"
)

// Ensure that request build refuses a patch the receiver would refuse, as a
// usage error, and writes no request file; a conforming patch is built.
func TestRequestBuild_PatchValidation(t *testing.T) {
	tests := []struct {
		name, patch string
		code        int
		stderr      string
	}{
		{"conforming", `[{"op":"test","path":"/a/0","value":1},{"op":"add","path":"/a/-","value":2}]`, ExitOK, ""},
		{"test without value", `[{"op":"test","path":"/a"}]`, ExitUsage, `no "value" member`},
		{"duplicate op", `[{"op":"test","path":"/a","value":1,"op":"replace"}]`, ExitUsage, `"op" twice`},
		{"duplicate name inside value", `[{"op":"add","path":"/a","value":{"k":1,"k":2}}]`, ExitUsage, `"k" twice`},
		{"unknown member", `[{"op":"remove","path":"/a","value":1}]`, ExitUsage, `member "value"`},
		{"bad pointer", `[{"op":"remove","path":"a"}]`, ExitUsage, "starts with /"},
		{"not an array", `{"op":"remove","path":"/a"}`, ExitUsage, "not a JSON array"},
		{"trailing data", `[] []`, ExitUsage, "after the JSON text"},
		{"null", `null`, ExitUsage, "not a JSON array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t)
			r := c.must(tt.code, "request", "build", "--action", "a", "--target", "t",
				"--patch-file", c.write("patch.json", tt.patch), "--out", c.path("req.cbor"))
			_, err := os.Stat(c.path("req.cbor"))
			if built := err == nil; built != (tt.code == ExitOK) {
				t.Fatalf("request file written: %v, exit %d", built, r.code)
			}
			if !strings.Contains(r.stderr, tt.stderr) {
				t.Fatalf("stderr %q does not say %q", r.stderr, tt.stderr)
			}
		})
	}
}
