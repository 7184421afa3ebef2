//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package boltengine

import "math"

// freeSpace cannot be measured on this platform; the reserve is not
// enforced there (package documentation, Caveats).
func freeSpace(string) (int64, error) { return math.MaxInt64, nil }
