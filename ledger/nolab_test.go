//go:build !kvfencelab

package ledger

import (
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that a build without the kvfencelab tag installs no opener of a
// ledger without its anchor check.
func TestDefectOpenerNotInstalled(t *testing.T) {
	if defect.OpenLedger != nil {
		t.Fatal("defect.OpenLedger is installed in a build without the kvfencelab tag")
	}
}
