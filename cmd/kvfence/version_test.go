package main

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
)

// Ensure that version reports what the build recorded, and says honestly
// when it recorded nothing: "(devel)" and an unknown revision.
func TestVersionOf(t *testing.T) {
	full := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/kvfence/kvfence", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "01c3eb0b"}, {Key: "vcs.time", Value: "2026-12-03T07:07:41Z"},
			{Key: "vcs.modified", Value: "true"}}}
	devel := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/kvfence/kvfence", Version: "(devel)"}}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		text []string
	}{
		{"tagged build from a repository", full, true, []string{"version       v1.2.3",
			"vcs revision  01c3eb0b (with uncommitted changes)", "vcs time      2026-12-03T07:07:41Z", "go            go1.26.0"}},
		{"source tree without VCS information", devel, true, []string{"version       (devel)", "vcs revision  unknown ("}},
		{"no build information", nil, false, []string{"module        github.com/kvfence/kvfence", "version       unknown",
			"vcs revision  unknown ("}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := versionOf(tt.bi, tt.ok)
			var b strings.Builder
			if err := printVersion(&b, v); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.text {
				if !strings.Contains(b.String(), want) {
					t.Errorf("lacks %q:\n%s", want, b.String())
				}
			}
			if (v.VCSRevision == nil) == (tt.bi == full) {
				t.Errorf("vcs_revision %v", v.VCSRevision)
			}
		})
	}
}

// Ensure that "version" and "--version" run, as text and JSON, and that
// this test binary, which records no VCS information, says so.
func TestVersionCommand(t *testing.T) {
	c := newCLI(t)
	for _, name := range []string{"version", "--version"} {
		r := c.must(0, name, "--json")
		var out map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, r)
		}
		for _, k := range []string{"module", "version", "vcs_revision", "vcs_time", "vcs_modified", "go_version"} {
			if _, ok := out[k]; !ok {
				t.Errorf("%s: no %q in %s", name, k, r.stdout)
			}
		}
		if out["vcs_revision"] != nil {
			t.Errorf("%s: a test binary records no revision, yet: %s", name, r.stdout)
		}
		if r := c.must(0, name); !strings.Contains(r.stdout, "vcs revision  unknown (") {
			t.Errorf("%s: %s", name, r)
		}
	}
	c.must(ExitUsage, "version", "extra")
}
