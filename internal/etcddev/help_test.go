package etcddev

import (
	"bytes"
	"strings"
	"testing"
)

// Ensure that kvfence-etcd's help names dev-cluster before etcd's own
// help, for every spelling of a help request and only for those.
func TestHelpPreamble(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--help"}, true},
		{[]string{"-help"}, true},
		{[]string{"-h"}, true},
		{[]string{"help"}, false},
		{nil, false},
		{[]string{"--name", "m1"}, false},
		{[]string{"--help", "--name"}, false},
		{[]string{"--version"}, false},
	} {
		var b bytes.Buffer
		got := HelpPreamble(tc.args, &b)
		if got != tc.want || (b.Len() > 0) != tc.want {
			t.Errorf("HelpPreamble(%q) = %v, wrote %q; want %v", tc.args, got, b.String(), tc.want)
		}
		if tc.want && !strings.Contains(b.String(), "kvfence-etcd dev-cluster --dir DIR") {
			t.Errorf("HelpPreamble(%q) does not name dev-cluster:\n%s", tc.args, b.String())
		}
	}
}
