//go:build !kvfencelab

package kvfence

import (
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// Ensure that a build without the kvfencelab tag installs no defective
// opener and does not allow defects outside this package's tests.
func TestDefectOpenerNotInstalled(t *testing.T) {
	if defect.Open != nil {
		t.Fatal("defect.Open is installed in a build without the kvfencelab tag")
	}
}
