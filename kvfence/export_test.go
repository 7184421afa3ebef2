package kvfence

import (
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/defect"
)

// OpenDefective opens the receiver at path as a defective variant, for this
// package's external tests: like its internal tests, and unlike every other
// build without the kvfencelab tag, they may (defect_test.go sets the
// switch for the whole test binary).
func OpenDefective(path string, opts *Options, v defect.Variant) (*Receiver, error) {
	return open(path, opts, v)
}

// OpenEngineDefective opens the receiver in e as a defective variant, for
// this package's external tests.
func OpenEngineDefective(e engine.Engine, opts *Options, v defect.Variant) (*Receiver, error) {
	return openWith(e, "engine store", false, opts, v)
}
