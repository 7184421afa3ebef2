//go:build race

package testbin

// Race is whether this test binary was built with the race detector.
const Race = true
