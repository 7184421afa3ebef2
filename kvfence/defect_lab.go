//go:build kvfencelab

package kvfence

import "github.com/kvfence/kvfence/internal/defect"

// The lab build (go build -tags kvfencelab) installs the defective opener
// that its worker processes use to show what a receiver without checks 2-4,
// or without its anchor check, does. No other build contains this file, so
// in them defect.Open stays nil and open refuses every defective variant.
func init() {
	defectsAllowed.Store(true)
	defect.Open = func(path string, opts any, v defect.Variant) (any, error) {
		o, _ := opts.(*Options)
		return open(path, o, v)
	}
}
