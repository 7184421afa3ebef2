package lab

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/kvfence/kvfence/internal/fixture"
)

// sourceManifest records what produced the lab's output.
type sourceManifest struct {
	// Module is the main module's path, from the binary's build info.
	Module string `json:"module"`
	// Version is the main module's version, "(devel)" for a source build.
	Version string `json:"version"`
	// VCSRevision is the source's commit; "" when VCSSource says it could
	// not be had.
	VCSRevision string `json:"vcs_revision"`
	// VCSModified is "true" when the source tree differs from that commit,
	// "false" when it does not, "" when unknown.
	VCSModified string `json:"vcs_modified"`
	// VCSTime is the commit's time, UTC in RFC 3339, or "".
	VCSTime string `json:"vcs_time"`
	// VCSSource says where they come from: "build info" (the binary's own
	// stamp), "git" (read with git from SourceDir, as under go run, which
	// stamps none), or "none: " and why neither could be read.
	VCSSource string `json:"vcs_source"`
	// SourceDir is the source tree git was asked about, if it was.
	SourceDir string `json:"source_dir,omitempty"`
	// Dependencies maps each module the binary was built with to its
	// version (and replacement).
	Dependencies map[string]string `json:"dependencies"`
	// Binary is the path of the binary run as the lab's workers and serve.
	Binary string `json:"binary"`
	// BinarySHA256 is that binary's SHA-256.
	BinarySHA256 string `json:"binary_sha256"`
	// Fixtures maps each fixture file to its SHA-256.
	Fixtures map[string]string `json:"fixtures_sha256"`
}

// environmentManifest records where the lab ran.
type environmentManifest struct {
	// GoVersion is the Go release the binary was built with.
	GoVersion string `json:"go_version"`
	// OS is the operating system.
	OS string `json:"os"`
	// Arch is the processor architecture.
	Arch string `json:"arch"`
	// CPUs is the number of logical processors.
	CPUs int `json:"cpus"`
	// Bbolt is the version of go.etcd.io/bbolt the binary was built with.
	Bbolt string `json:"bbolt_version"`
}

func (l *lab) writeManifests() error {
	value, patch, err := fixture.Load()
	if err != nil {
		return fmt.Errorf("lab: the backup-policy fixture: %w", err)
	}
	src := sourceManifest{Dependencies: map[string]string{}, Binary: l.opts.Executable,
		Fixtures: map[string]string{
			fixture.ValueFile: sha256Hex(value),
			fixture.PatchFile: sha256Hex(patch),
		}}
	env := environmentManifest{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		src.Module, src.Version = bi.Main.Path, bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				src.VCSRevision = s.Value
			case "vcs.modified":
				src.VCSModified = s.Value
			case "vcs.time":
				src.VCSTime = s.Value
			}
		}
		for _, d := range bi.Deps {
			v := d.Version
			if d.Replace != nil {
				v += " => " + d.Replace.Path + " " + d.Replace.Version
			}
			src.Dependencies[d.Path] = v
			if d.Path == "go.etcd.io/bbolt" {
				env.Bbolt = d.Version
			}
		}
	}
	if src.VCSRevision != "" {
		src.VCSSource = "build info"
	} else {
		src.SourceDir = moduleDir()
		src.VCSSource = "git"
		v, err := gitVCS(src.SourceDir, l.opts.Output)
		if err != nil {
			src.VCSSource = "none: the binary carries no VCS stamp (as under go run), and " + err.Error()
		}
		src.VCSRevision, src.VCSModified, src.VCSTime = v.revision, v.modified, v.time
	}
	sum, err := fileSHA256(l.opts.Executable)
	if err != nil {
		return err
	}
	src.BinarySHA256 = sum
	if err := writeJSON(filepath.Join(l.opts.Output, "source.json"), src); err != nil {
		return err
	}
	return writeJSON(filepath.Join(l.opts.Output, "environment.json"), env)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
