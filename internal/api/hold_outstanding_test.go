package api

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that a hold's outstanding writes cross the wire whole: the
// served answer lists them, always as an array, and the client reads
// back what the receiver returned.
func TestHoldOutstandingRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  []kvfence.OutstandingDispatch
		want string
	}{
		{name: "none", want: `[]`},
		{name: "one", out: []kvfence.OutstandingDispatch{{Scope: "s", Action: "a", Grant: "g", Target: "t",
			Object:     kvfence.RemoteObject{Version: "v1", Resource: "configmaps", Namespace: "prod", Name: "x"},
			DispatchID: "d", Precondition: "7", Version: "9", AuditSeq: 4}},
			want: `[{"scope":"s","action":"a","grant":"g","target":"t","object":{"group":"","version":"v1","resource":"configmaps","namespace":"prod","name":"x"},"dispatch_id":"d","precondition":"7","version":"9","audit_seq":4}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := HoldOf(kvfence.HoldResult{Outstanding: tc.out})
			b, err := json.Marshal(h.Outstanding)
			if err != nil || string(b) != tc.want {
				t.Fatalf("outstanding = %s, %v; want %s", b, err, tc.want)
			}
			var back Hold
			raw, _ := json.Marshal(h)
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			res, err := back.Result()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Outstanding, tc.out) {
				t.Fatalf("read back %+v, want %+v", res.Outstanding, tc.out)
			}
		})
	}
}
