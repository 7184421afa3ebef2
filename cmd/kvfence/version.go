package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// VersionCommand prints the module version and the VCS revision the binary
// was built from, as the Go toolchain recorded them in it.
type VersionCommand struct{ m *Main }

// versionJSON is the --json shape of version. version is "(devel)" for a
// build from a source tree rather than a tagged module; vcs_revision,
// vcs_time and vcs_modified are null when the binary records no VCS
// information (go run, go test, -buildvcs=false, or a build outside a
// repository).
type versionJSON struct {
	Module      string  `json:"module"`
	Version     string  `json:"version"`
	VCSRevision *string `json:"vcs_revision"`
	VCSTime     *string `json:"vcs_time"`
	VCSModified *bool   `json:"vcs_modified"`
	GoVersion   string  `json:"go_version"`
}

// Values shown when the binary records nothing.
const (
	unknownModule  = "github.com/kvfence/kvfence"
	unknownVersion = "unknown"
	develVersion   = "(devel)"
)

// versionOf reads what bi records; ok false means the binary carries no
// build information at all.
func versionOf(bi *debug.BuildInfo, ok bool) versionJSON {
	v := versionJSON{Module: unknownModule, Version: unknownVersion, GoVersion: runtime.Version()}
	if !ok || bi == nil {
		return v
	}
	if bi.Main.Path != "" {
		v.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		val := s.Value
		switch s.Key {
		case "vcs.revision":
			v.VCSRevision = &val
		case "vcs.time":
			v.VCSTime = &val
		case "vcs.modified":
			m := val == "true"
			v.VCSModified = &m
		}
	}
	return v
}

// Run runs the command.
func (c *VersionCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("version")
	cf := commonFlags{name: "version"}
	cf.register(fs, 0)
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	v := versionOf(debug.ReadBuildInfo())
	if cf.json {
		return writeJSON(c.m.Stdout, v)
	}
	return printVersion(c.m.Stdout, v)
}

// printVersion writes v as text.
func printVersion(w io.Writer, v versionJSON) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "module\t%s\n", v.Module)
	fmt.Fprintf(tw, "version\t%s\n", v.Version)
	if v.VCSRevision == nil {
		fmt.Fprintf(tw, "vcs revision\tunknown (this binary records none: go run, go test, -buildvcs=false, or built outside a repository)\n")
	} else {
		rev := *v.VCSRevision
		if v.VCSModified != nil && *v.VCSModified {
			rev += " (with uncommitted changes)"
		}
		fmt.Fprintf(tw, "vcs revision\t%s\n", rev)
		if v.VCSTime != nil {
			fmt.Fprintf(tw, "vcs time\t%s\n", *v.VCSTime)
		}
	}
	fmt.Fprintf(tw, "go\t%s\n", v.GoVersion)
	return tw.Flush()
}

// Usage prints the command's help.
func (c *VersionCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence version [--json]
       kvfence --version [--json]

Prints the module version and the VCS revision this binary was built from,
as the Go toolchain recorded them. The version is "(devel)" for a build
from a source tree; the revision is "unknown" (null with --json) when the
binary records none, as under go run or with -buildvcs=false.

With --json: {"module","version","vcs_revision","vcs_time","vcs_modified",
"go_version"}.

Arguments:

`+usageJSON)
}
