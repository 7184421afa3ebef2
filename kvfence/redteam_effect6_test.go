package kvfence

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/defect"
)

// Attack: a buggy effect that uses its EffectTx from several goroutines at
// once (documented as not safe for concurrent use). The receiver runs in
// a child process; whatever happens to it, the store must hold the write
// whole or not at all when it is reopened.
func TestRedteamEffect_ConcurrentTxUse(t *testing.T) {
	if dir := os.Getenv("KVFENCE_RT_CHILD"); dir != "" {
		rtConcurrentChild(t, dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedteamEffect_ConcurrentTxUse$", "-test.count=1")
	cmd.Env = append(os.Environ(), "KVFENCE_RT_CHILD="+dir)
	out, err := cmd.CombinedOutput()
	crashed := strings.Contains(string(out), "fatal error")
	t.Logf("child: err %v, fatal error in output: %v", err, crashed)
	if crashed {
		t.Errorf("an effect using its tx from goroutines at once killed the receiver's process: %s",
			rtLineWith(string(out), "fatal error"))
	}
	// Reopen the child's store: the write is whole or absent.
	f := &fixture{t: t, path: filepath.Join(dir, "receiver.db"), clock: newClock(), anchor: rtAnchor(dir)}
	f.effects = map[string]Effect{"rt": {Buckets: []string{effBucket}, Apply: func(EffectTx, EffectInput) error { return nil }}}
	r, err := f.openStore(f.opts(), defect.Variant{})
	if err != nil {
		t.Fatalf("reopen after the child: %v", err)
	}
	f.r, f.admin = r, r.Admin()
	defer r.Close()
	tg, err := r.Target(effTarget)
	if err != nil {
		t.Fatal(err)
	}
	recs := appRecords(t, f)
	if tg.Revision == 2 && len(recs) != 8*400 || tg.Revision == 1 && len(recs) != 0 {
		t.Errorf("target at revision %d with %d app records: not whole", tg.Revision, len(recs))
	}
	t.Logf("target revision %d, %d app records", tg.Revision, len(recs))
}

func rtAnchor(dir string) audit.FileAnchor {
	return audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
}

func rtLineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

func rtConcurrentChild(t *testing.T, dir string) {
	s := &store{name: "bbolt", path: filepath.Join(dir, "receiver.db")}
	f := &fixture{t: t, path: s.path, clock: newClock(), ctx: t.Context(), anchor: rtAnchor(dir), store: s}
	if err := s.init(t, &InitOptions{ReceiverID: "test-receiver", Key: testKey, Anchor: f.anchor, Now: f.clock.Now}); err != nil {
		t.Fatal(err)
	}
	f.effects = map[string]Effect{"rt": {Buckets: []string{effBucket}, Apply: func(tx EffectTx, in EffectInput) error {
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 400 {
					tx.Put(effBucket, []byte(strconv.Itoa(g)+"/"+strconv.Itoa(i)), []byte("v"))
					tx.Get(effBucket, []byte("x"))
				}
			})
		}
		wg.Wait()
		return nil
	}}}
	r, err := f.openStore(f.opts(), defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	if _, err := f.admin.CreateScope(f.ctx, fixScope); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: effTarget, Value: []byte("{}"), Kind: TargetFunc, Effect: "rt"}); err != nil {
		t.Fatal(err)
	}
	w := f.activate("worker-a", "claim-a", f.request(&Request{V: 1, Action: "a1", Target: effTarget, Set: ptr([]byte(`{}`))}))
	for range 1 {
		res, err := r.Submit(f.ctx, w.name, w.envelope)
		t.Logf("submit: %s %v", res.Outcome, err)
	}
	r.Close()
}
