package kubeproc

import "testing"

// Ensure that the token file holds only identities it can hold: a name
// given twice, an empty user, or a value with a comma, a quote or a line
// break (which would forge another field or line of the CSV) is refused.
func TestIdentities(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []Identity
		ok    bool
	}{
		{"defaults", nil, true},
		{"one more", []Identity{{Name: "worker-b", User: "b", Groups: []string{WorkersGroup}}}, true},
		{"repeated name", []Identity{{Name: Worker, User: "w2"}}, false},
		{"empty name", []Identity{{User: "x"}}, false},
		{"empty user", []Identity{{Name: "x"}}, false},
		{"comma in user", []Identity{{Name: "x", User: "a,system:masters"}}, false},
		{"quote in group", []Identity{{Name: "x", User: "x", Groups: []string{`g"`}}}, false},
		{"line break in group", []Identity{{Name: "x", User: "x", Groups: []string{"g\ntok,admin,1,system:masters"}}}, false},
	} {
		ids, err := identities(tc.extra)
		if tc.ok != (err == nil) {
			t.Errorf("%s: err = %v, want ok %v", tc.name, err, tc.ok)
		}
		if tc.ok && len(ids) != len(DefaultIdentities)+len(tc.extra) {
			t.Errorf("%s: %d identities", tc.name, len(ids))
		}
	}
}
