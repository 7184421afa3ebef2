package kvfence

import (
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// Attack: two receiver processes on one etcd prefix, both registering the
// effect. A's effect writes app records; B, whose known records predate
// them, then decides a write whose effect reads and rewrites them. B must
// re-verify (the head moved) and decide on A's records, not refuse them
// as edited, nor lose them; and A must then see B's.
func TestRedteamEffect_EtcdTwoReceivers(t *testing.T) {
	s := engines[1].new(t)
	f := rtFixture(t, s, []string{effBucket}, rtCounter)
	b, err := f.store.open(t, f.opts(), defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w1 := f.effWorker("w1", "a1", `{"v":1}`)
	if res := f.submit(w1.name, w1.envelope); res.Outcome != Applied {
		t.Fatalf("A: %+v", res)
	}
	w2 := f.effWorker("w2", "a2", `{"v":2}`)
	res, err := b.Submit(f.ctx, w2.name, w2.envelope)
	if err != nil || res.Outcome != Applied {
		t.Fatalf("B: %+v, %v", res, err)
	}
	w3 := f.effWorker("w3", "a3", `{"v":3}`)
	if res := f.submit(w3.name, w3.envelope); res.Outcome != Applied {
		t.Fatalf("A again: %+v", res)
	}
	if got := appValue(t, f, "count"); got != "3" {
		t.Errorf("count = %q, want 3", got)
	}
	for a, want := range map[string]string{"a1": "0", "a2": "1", "a3": "2"} {
		if got := appValue(t, f, "entry/"+a); got != want {
			t.Errorf("entry/%s = %q, want %q", a, got, want)
		}
	}
}
