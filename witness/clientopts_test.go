package witness_test

import (
	"testing"

	"github.com/kvfence/kvfence/witness"
)

// Ensure that a negative maximum age is refused rather than read as "any
// age" or "none".
func TestClientNegativeMaxAge(t *testing.T) {
	if _, err := witness.NewClient("https://w.example", witness.ClientOptions{MaxAge: -1}); err == nil {
		t.Error("NewClient took a negative MaxAge")
	}
	if _, err := witness.NewClient("https://w.example", witness.ClientOptions{}); err != nil {
		t.Errorf("NewClient with the default MaxAge: %v", err)
	}
}
