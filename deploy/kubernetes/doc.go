// Package kubernetes holds the manifests that close a Kubernetes target's
// other write paths (README.md beside them says what each does and what
// it does not cover), embedded so that tests and tools apply the very
// files that ship. Its tests apply them to a real API server
// (internal/kubeproc).
package kubernetes

import (
	"embed"
	"io/fs"
	"sort"
)

// Manifests holds the shipped YAML files.
//
//go:embed *.yaml
var Manifests embed.FS

// Names returns the manifests' file names in the order to apply them: the
// order of their names, which start with a number.
func Names() []string {
	names, err := fs.Glob(Manifests, "*.yaml")
	if err != nil {
		// The pattern is a constant and valid.
		panic(err)
	}
	sort.Strings(names)
	return names
}
