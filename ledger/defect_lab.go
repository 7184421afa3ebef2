//go:build kvfencelab

package ledger

import "github.com/kvfence/kvfence/internal/defect"

// The lab build (go build -tags kvfencelab) installs the opener of a ledger
// without its anchor check, with which the lab shows what a restored,
// unanchored ledger does. No other build contains this file.
func init() {
	defectsAllowed.Store(true)
	defect.OpenLedger = func(path string, opts any, v defect.Variant) (any, error) {
		o, _ := opts.(*Options)
		return open(path, o, v)
	}
}
