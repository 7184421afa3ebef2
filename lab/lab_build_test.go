//go:build kvfencelab

package lab

import "testing"

// Ensure that the lab build has the defective openers its workers need.
func TestAvailable_LabBuild(t *testing.T) {
	if !Available() {
		t.Fatal("a build with the kvfencelab tag lacks the defective openers")
	}
}
