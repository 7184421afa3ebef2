package kubetarget

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/kubeproc"
	"github.com/kvfence/kvfence/kvfence"
)

// The hold race of docs/design.md §4.2 on a real API server: a receiver
// whose Kubernetes dispatcher's transport holds, delays and loses the
// answers of its updates, while an administrator activates and holds and
// current and stale workers submit. Kubernetes keeps no history of an
// object, so the transport records every update it delivers and the
// server's answer to it, and the test reads the object after each round.

// raceTimeout is the receivers' DispatchTimeout: short, so that unknown
// outcomes and the fences after them happen within the test.
const raceTimeout = time.Second

// raceScope is the scope every schedule's receiver fences.
const raceScope = "prod/backup-policy"

// faultMode is what the transport does with one update.
type faultMode int

const (
	// sendNow delivers the update and returns the answer.
	sendNow faultMode = iota
	// loseAnswer delivers the update, then drops the answer: the caller
	// sees its deadline pass with the write applied.
	loseAnswer
	// delaySend delivers the update after a delay that may pass the
	// caller's deadline; a caller gone by then never sees the answer.
	delaySend
	// holdSend keeps the update until the test releases it (after the
	// hold's acknowledgment), whatever the caller's deadline.
	holdSend
	// changeFirst has another writer change the object just before the
	// update is delivered: a concurrent change the precondition must
	// turn into a conflict, not a lost update.
	changeFirst
)

var faultNames = [...]string{"send", "lose", "delay", "hold", "change"}

// delivery is one update the transport sent to the server, with its
// answer.
type delivery struct {
	// grant and receipt are the stamp the update carried.
	grant, receipt string
	mode           faultMode
	// sent is when the update left for the server.
	sent time.Time
	// status is the server's HTTP status; 0 if the request failed.
	status int
	// version is the resourceVersion a 2xx answer names.
	version string
}

// faultPUT is a fault-injecting transport for a Dispatcher's updates of
// values (those that carry a grant); reads and fencing writes go straight
// through, so that the hold's own fence is never what a schedule delays.
type faultPUT struct {
	next  http.RoundTripper
	randn func(int) int
	// change makes the out-of-band change of changeFirst.
	change func()

	mu sync.Mutex
	// readDone, if not nil, is closed (and cleared) when a read's answer
	// comes back: a hold timed by it lands near a decision.
	readDone   chan struct{}
	parked     []chan struct{}
	deliveries []delivery
	inflight   sync.WaitGroup
}

func (f *faultPUT) wrap(rt http.RoundTripper) http.RoundTripper { f.next = rt; return f }

type answer struct {
	resp *http.Response
	err  error
}

func (f *faultPUT) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet {
		resp, err := f.next.RoundTrip(req)
		f.mu.Lock()
		if f.readDone != nil {
			close(f.readDone)
			f.readDone = nil
		}
		f.mu.Unlock()
		return resp, err
	}
	if req.Method != http.MethodPut || req.Body == nil {
		return f.next.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	var sent struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &sent); err != nil {
		return nil, fmt.Errorf("faultPUT: %w", err)
	}
	d := delivery{grant: sent.Metadata.Annotations[AnnotationGrant], receipt: sent.Metadata.Annotations[AnnotationReceipt]}
	// send delivers the update under ctx and records the answer.
	send := func(ctx context.Context) answer {
		r := req.Clone(ctx)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		d := d
		d.sent = time.Now()
		resp, err := f.next.RoundTrip(r)
		if err == nil {
			raw, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(raw))
			d.status = resp.StatusCode
			if rerr != nil {
				err = rerr
			}
			var got stored
			if resp.StatusCode/100 == 2 && json.Unmarshal(raw, &got) == nil {
				d.version = got.Metadata.ResourceVersion
			}
		}
		f.mu.Lock()
		f.deliveries = append(f.deliveries, d)
		f.mu.Unlock()
		return answer{resp, err}
	}
	if d.grant == "" {
		return send(req.Context()).resp, nil
	}
	d.mode = faultMode(f.randn(len(faultNames)))
	ctx := req.Context()
	switch d.mode {
	case changeFirst:
		f.change()
		a := send(ctx)
		return a.resp, a.err
	case sendNow:
		a := send(ctx)
		return a.resp, a.err
	case loseAnswer:
		send(context.WithoutCancel(ctx))
		<-ctx.Done()
		return nil, ctx.Err()
	}
	release := make(chan struct{})
	if d.mode == delaySend {
		delay := time.Duration(f.randn(int(raceTimeout*3/2/time.Millisecond))) * time.Millisecond
		go func() { time.Sleep(delay); close(release) }()
	} else {
		f.mu.Lock()
		f.parked = append(f.parked, release)
		f.mu.Unlock()
	}
	done := make(chan answer, 1)
	f.inflight.Add(1)
	go func() {
		defer f.inflight.Done()
		<-release
		// The update leaves whether or not its caller still waits: a
		// request the network kept reaches the server late.
		done <- send(context.WithoutCancel(ctx))
	}()
	select {
	case a := <-done:
		return a.resp, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// releaseAll lets every held update go and waits until every update the
// transport kept has its answer.
func (f *faultPUT) releaseAll() {
	f.mu.Lock()
	for _, c := range f.parked {
		close(c)
	}
	f.parked = nil
	f.mu.Unlock()
	f.inflight.Wait()
}

func (f *faultPUT) log() []delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deliveries)
}

// unfenced is a Dispatcher whose Fence writes nothing: it reads the
// object and returns it as if fenced. It is the defective receiver the
// race must catch.
type unfenced struct{ *Dispatcher }

func (u unfenced) Fence(ctx context.Context, obj kvfence.RemoteObject, _ kvfence.Stamp) (kvfence.RemoteState, error) {
	return u.Read(ctx, obj)
}

// raceTally counts the dispatch states the schedules ended in.
type raceTally struct {
	mu     sync.Mutex
	states map[kvfence.DispatchState]int
	modes  map[string]int
}

func (c *raceTally) add(st kvfence.DispatchState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.states[st]++
}

// Ensure, on a real API server, that remote writes race holds safely over
// many schedules: an administrator activates a grant for a new worker and
// holds at a random moment while that worker submits (twice) and the
// workers of earlier grants submit their envelopes (as issued, and
// re-addressed to the current epoch), with updates held, delayed past
// their deadline, answered and lost, and the object changed out of band.
// After each hold's acknowledgment no update carrying a superseded grant
// is applied by the server, a held update released then gets 409, and
// every dispatch decided before the hold has settled, each unknown one
// listed as outstanding. At the end the receipts, the audit chain
// (verified) and the object's kvfence.dev/* annotations agree.
func TestKubeHoldRace(t *testing.T) {
	e := startKube(t)
	schedules := 16
	if testing.Short() {
		schedules = 3
	}
	tally := &raceTally{states: map[kvfence.DispatchState]int{}, modes: map[string]int{}}
	for i := range schedules {
		seed := uint64(2200 + i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if v := kubeHoldRace(t, e.in(t), seed, false, tally); v != "" {
				t.Fatal(v)
			}
		})
	}
	t.Logf("dispatch outcomes %v; update faults %v", tally.states, tally.modes)
	if testing.Short() {
		return
	}
	// The schedules are seeded; enough of them must reach every outcome,
	// or the race tests less than it claims.
	for _, st := range []kvfence.DispatchState{kvfence.DispatchApplied, kvfence.DispatchCancelled, kvfence.DispatchConflict, kvfence.DispatchUnknown} {
		if tally.states[st] == 0 {
			t.Errorf("no schedule ended a dispatch %s: %v", st, tally.states)
		}
	}
	for _, m := range faultNames {
		if tally.modes[m] == 0 {
			t.Errorf("no update was given fault %q: %v", m, tally.modes)
		}
	}
}

// Ensure that the race goes red against a receiver whose fence writes
// nothing: an update held past its deadline and released after the
// hold's acknowledgment then reaches the object under the superseded
// grant.
func TestKubeHoldRaceWithoutFence(t *testing.T) {
	e := startKube(t)
	tally := &raceTally{states: map[kvfence.DispatchState]int{}, modes: map[string]int{}}
	for i := range 12 {
		if v := kubeHoldRace(t, e, uint64(3300+i), true, tally); v != "" {
			t.Logf("caught at schedule %d: %s", i, v)
			return
		}
	}
	t.Fatal("no schedule caught an update applied after the hold's acknowledgment")
}

// kubeHoldRace runs one schedule on a fresh ConfigMap and receiver and
// returns the first violation of the invariants, or "". defective gives
// the receiver a dispatcher whose fence writes nothing.
func kubeHoldRace(t *testing.T, e *kubeEnv, seed uint64, defective bool, tally *raceTally) string {
	rng := rand.New(rand.NewPCG(seed, seed^0x6b756265))
	var rngMu sync.Mutex
	randn := func(n int) int {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.IntN(n)
	}
	ctx := context.Background()
	name := fmt.Sprintf("race-%d", seed)
	obj := e.create(name, true)
	faults := &faultPUT{randn: randn}
	var d kvfence.Dispatcher = e.dispatcher(kubeproc.Receiver, faults.wrap)
	if defective {
		d = unfenced{d.(*Dispatcher)}
	}
	// Another writer with the receiver's identity changes the object
	// under the receiver, as a second receiver would: the conflicts.
	other := e.dispatcher(kubeproc.Receiver, nil)

	dir := t.TempDir()
	path, anchor := filepath.Join(dir, "receiver.db"), audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	_, key, _ := ed25519.GenerateKey(crand.Reader)
	recovery, _, _ := ed25519.GenerateKey(crand.Reader)
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "race", Key: key, Anchor: anchor, RecoveryKey: recovery}); err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor,
		Dispatchers: map[kvfence.TargetKind]kvfence.Dispatcher{kvfence.TargetKubernetes: d}, DispatchTimeout: raceTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	admin := r.Admin()
	if _, err := admin.CreateScope(ctx, raceScope); err != nil {
		t.Fatal(err)
	}
	history := e.watchHistory(obj, e.get(obj).Metadata.ResourceVersion)
	target := "cm/" + testNS + "/" + name
	if _, err := admin.CreateTargetSpec(ctx, kvfence.TargetSpec{Scope: raceScope, Name: target, Kind: kvfence.TargetKubernetes, Object: &obj}); err != nil {
		t.Fatal(err)
	}

	type worker struct {
		name, claim string
		grant       kvfence.Grant
		request     []byte
	}
	envelopeAt := func(w worker, epoch uint64) []byte {
		env, err := kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: raceScope, Epoch: epoch,
			Grant: w.grant.ID, Executor: w.name, Claim: w.claim, Request: w.request})
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	var gone []superseded
	var stale []worker
	var oobMu sync.Mutex
	oob := map[string]bool{}
	// changeOOB changes the object as another writer with the receiver's
	// identity would (a second receiver): the conflicts.
	changeOOB := func(epoch uint64) error {
		oobMu.Lock()
		id := fmt.Sprintf("oob-%d-%d", seed, len(oob))
		oob[id] = true
		oobMu.Unlock()
		_, err := other.Fence(ctx, obj, kvfence.Stamp{Scope: raceScope, Epoch: epoch, Receipt: id})
		return err
	}
	const rounds = 4
	for round := range rounds {
		w := worker{name: fmt.Sprintf("worker-%d", round), claim: fmt.Sprintf("claim-%d", round)}
		value := []byte(fmt.Sprintf(`{"mode":"full","retention_days":"%d"}`, 31+round))
		if w.request, err = kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: fmt.Sprintf("a-%d", round), Target: target, Set: &value}); err != nil {
			t.Fatal(err)
		}
		st, err := r.Status(raceScope)
		if err != nil {
			t.Fatal(err)
		}
		if w.grant, err = admin.Activate(ctx, kvfence.ActivateRequest{Scope: raceScope, Executor: w.name, Claim: w.claim, Request: w.request, Epoch: st.Epoch}); err != nil {
			t.Fatalf("round %d: Activate: %v", round, err)
		}
		// Half the holds are timed by the first read of the round, so
		// that some commit between a decision and its write's start.
		var readDone chan struct{}
		if randn(2) == 0 {
			readDone = make(chan struct{})
			faults.mu.Lock()
			faults.readDone = readDone
			faults.mu.Unlock()
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		submit := func(caller string, env []byte) {
			defer wg.Done()
			time.Sleep(time.Duration(randn(30)) * time.Millisecond)
			if _, err := r.Submit(ctx, caller, env); err != nil {
				errs <- fmt.Errorf("Submit by %s: %w", caller, err)
			}
		}
		own := envelopeAt(w, w.grant.Epoch)
		wg.Add(2)
		go submit(w.name, own)
		go submit(w.name, own)
		for _, s := range stale {
			wg.Add(2)
			go submit(s.name, envelopeAt(s, s.grant.Epoch))
			go submit(s.name, envelopeAt(s, w.grant.Epoch))
		}
		faults.change = func() {
			if err := changeOOB(w.grant.Epoch); err != nil {
				errs <- fmt.Errorf("out-of-band change: %w", err)
			}
		}
		if randn(3) == 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(randn(60)) * time.Millisecond)
				faults.change()
			}()
		}
		if readDone != nil {
			select {
			case <-readDone:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: no read within 5 s", round)
			}
			time.Sleep(time.Duration(randn(4000)) * time.Microsecond)
		} else {
			time.Sleep(time.Duration(randn(80)) * time.Millisecond)
		}
		faults.mu.Lock()
		faults.readDone = nil
		faults.mu.Unlock()
		h, err := admin.Hold(ctx, kvfence.HoldRequest{Scopes: []string{raceScope}, Reason: "rotate"})
		if err != nil {
			t.Fatalf("round %d: Hold: %v", round, err)
		}
		g := superseded{grant: w.grant.ID, ackAt: time.Now()}
		g.ackVersion, _ = strconv.ParseInt(e.get(obj).Metadata.ResourceVersion, 10, 64)
		gone = append(gone, g)
		stale = append(stale, w)
		// Every dispatch decided before the hold has settled; an unknown
		// one is listed as outstanding.
		rc, rerr := r.Receipt(raceScope, fmt.Sprintf("a-%d", round))
		faults.releaseAll()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		if rerr == nil {
			switch rc.Dispatch {
			case kvfence.DispatchDispatching:
				return fmt.Sprintf("round %d: dispatch %s still in flight at the acknowledgment", round, rc.DispatchID)
			case kvfence.DispatchUnknown:
				if !slices.ContainsFunc(h.Outstanding, func(o kvfence.OutstandingDispatch) bool { return o.DispatchID == rc.DispatchID }) {
					return fmt.Sprintf("round %d: unknown dispatch %s not listed: %+v", round, rc.DispatchID, h.Outstanding)
				}
			}
		}
		if v := checkAfterAck(faults.log(), gone); v != "" {
			return fmt.Sprintf("round %d: %s", round, v)
		}
		// The object as it stands: its stamp is a dispatch's the receipts
		// hold or a fence the audit chain records.
		o := e.get(obj)
		e.checkKept(o)
		_, _, fences, err := auditOf(r)
		if err != nil {
			t.Fatal(err)
		}
		receipts := map[string]kvfence.Receipt{}
		for i := range round + 1 {
			if rc, err := r.Receipt(raceScope, fmt.Sprintf("a-%d", i)); err == nil {
				receipts[rc.DispatchID] = rc
			}
		}
		if v := stampAgrees(r, o, receipts, fences, oob); v != "" {
			return fmt.Sprintf("round %d: %s", round, v)
		}
	}

	// Late stale submits, after every hold, change nothing.
	before := e.get(obj).Metadata.ResourceVersion
	for _, s := range stale {
		res, err := r.Submit(ctx, s.name, envelopeAt(s, s.grant.Epoch))
		if err != nil || res.Outcome == kvfence.Applied || res.Outcome == kvfence.Dispatching {
			return fmt.Sprintf("late stale submit by %s: %+v %v", s.name, res, err)
		}
	}
	if after := e.get(obj).Metadata.ResourceVersion; after != before {
		return fmt.Sprintf("late stale submits moved the object from %s to %s", before, after)
	}
	log := faults.log()
	if v := checkAfterAck(log, gone); v != "" {
		return v
	}
	for _, dl := range log {
		if dl.grant != "" {
			tally.mu.Lock()
			tally.modes[faultNames[dl.mode]]++
			tally.mu.Unlock()
		}
	}

	decided, outcome, fences, err := auditOf(r)
	if err != nil {
		t.Fatal(err)
	}
	// Receipts, audit and the server's answers agree.
	receipts := map[string]kvfence.Receipt{}
	for round := range rounds {
		rc, err := r.Receipt(raceScope, fmt.Sprintf("a-%d", round))
		if err != nil {
			continue // the hold came before the decision: denied, no receipt
		}
		receipts[rc.DispatchID] = rc
		tally.add(rc.Dispatch)
		if !decided[rc.DispatchID] {
			return fmt.Sprintf("receipt %+v has no decision in the audit chain", rc)
		}
		if outcome[rc.DispatchID] != string(rc.Dispatch) {
			return fmt.Sprintf("receipt %s is %s; the audit chain says %q", rc.DispatchID, rc.Dispatch, outcome[rc.DispatchID])
		}
		if rc.Dispatch == kvfence.DispatchApplied && !slices.ContainsFunc(log, func(dl delivery) bool {
			return dl.receipt == rc.DispatchID && dl.status/100 == 2 && dl.version == rc.Version
		}) {
			return fmt.Sprintf("applied receipt %+v: the server applied no update at its version", rc)
		}
	}
	started := 0
	for _, dl := range log {
		if dl.grant == "" {
			continue
		}
		started++
		rc, ok := receipts[dl.receipt]
		if !ok || rc.Grant != dl.grant {
			return fmt.Sprintf("an update stamped %s/%s matches no receipt", dl.grant, dl.receipt)
		}
		if dl.status/100 == 2 && rc.Dispatch != kvfence.DispatchApplied && rc.Dispatch != kvfence.DispatchUnknown {
			return fmt.Sprintf("the server applied dispatch %s, recorded %s", dl.receipt, rc.Dispatch)
		}
	}
	// The object's history, from the server's watch: every change the
	// receiver's dispatches made is one the transport saw applied at that
	// version (nothing reached the object around the transport, and no
	// update was sent twice), and none under a superseded grant comes
	// after its hold's acknowledgment.
	changes := history()
	// And the other way: every update the server answered 2xx is a change
	// the watch saw, so the history is not empty by accident.
	for _, dl := range log {
		if dl.status/100 == 2 && !slices.ContainsFunc(changes, func(ev historyEvent) bool {
			return strconv.FormatInt(ev.version, 10) == dl.version && ev.stamp.Receipt == dl.receipt
		}) {
			return fmt.Sprintf("the server applied update %s at version %s; the watch did not see it", dl.receipt, dl.version)
		}
	}
	for _, ev := range changes {
		if ev.stamp.Grant == "" {
			continue // a fence's, or the other writer's
		}
		if !slices.ContainsFunc(log, func(dl delivery) bool {
			return dl.receipt == ev.stamp.Receipt && dl.status/100 == 2 && dl.version == strconv.FormatInt(ev.version, 10)
		}) {
			return fmt.Sprintf("the object changed at version %d under stamp %+v, which no update the transport sent made", ev.version, ev.stamp)
		}
		for _, g := range gone {
			if ev.stamp.Grant == g.grant && ev.version > g.ackVersion {
				return fmt.Sprintf("the object changed at version %d under grant %s after its hold's acknowledgment (at %d)", ev.version, g.grant, g.ackVersion)
			}
		}
	}
	// Each dispatch sent at most one update, whoever repeated it.
	if n := len(receipts); started > n {
		return fmt.Sprintf("%d updates sent for %d dispatches", started, n)
	}
	if v := stampAgrees(r, e.get(obj), receipts, fences, oob); v != "" {
		return v
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := kvfence.VerifyChain(path, kvfence.VerifyOptions{Anchor: anchor, PublicKey: key.Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		return fmt.Sprintf("the audit chain does not verify: %+v", rep)
	}
	return ""
}

// auditOf reads r's audit chain: the dispatches decided, the outcome
// each was last recorded with, and the fences recorded.
func auditOf(r *kvfence.Receiver) (decided map[string]bool, outcome map[string]string, fences map[string]bool, err error) {
	decided, outcome, fences = map[string]bool{}, map[string]string{}, map[string]bool{}
	err = r.Events(1, func(ev kvfence.Event) bool {
		if id, ok := noteDispatchID(ev.Note); ok {
			if ev.Kind == kvfence.KindDispatch {
				outcome[id] = ev.Outcome
			} else if ev.Outcome == string(kvfence.Dispatching) {
				decided[id] = true
			}
		}
		if _, fid, ok := strings.Cut(ev.Note, "; fence "); ok && ev.Kind == kvfence.KindDispatch {
			fences[fid] = true
		}
		return true
	})
	return decided, outcome, fences, err
}

// stampAgrees returns a violation unless o's kvfence.dev/* annotations
// name what the receipts and audit chain say last changed it: a dispatch
// recorded applied, at o's version, under its grant's epoch;
// a fence the chain records; or one of the test's own changes (oob).
func stampAgrees(r *kvfence.Receiver, o stored, receipts map[string]kvfence.Receipt, fences, oob map[string]bool) string {
	stamp, err := ParseStamp(o.Metadata.Annotations)
	if err != nil {
		return fmt.Sprintf("the object's stamp: %v", err)
	}
	switch {
	case stamp.Grant != "":
		rc, ok := receipts[stamp.Receipt]
		gr, gerr := r.Grant(stamp.Grant)
		// Not unknown: an unknown dispatch is fenced, so its stamp
		// cannot be the last one.
		if !ok || gerr != nil || rc.Grant != stamp.Grant || gr.Epoch != stamp.Epoch || rc.Dispatch != kvfence.DispatchApplied {
			return fmt.Sprintf("the object is stamped %+v; its receipt is %+v", stamp, rc)
		}
		if rc.Version != o.Metadata.ResourceVersion {
			return fmt.Sprintf("the object is at %s; its last write's receipt says %s", o.Metadata.ResourceVersion, rc.Version)
		}
	case stamp.Receipt != "" && !fences[stamp.Receipt] && !oob[stamp.Receipt]:
		return fmt.Sprintf("the object is stamped by fence %s, which the audit chain does not record", stamp.Receipt)
	}
	return ""
}

// historyEvent is one change of the object as a watch reported it.
type historyEvent struct {
	version int64
	stamp   kvfence.Stamp
}

// watchHistory watches obj from version on, as the administrator, and
// returns a function that stops the watch and returns every change it saw
// up to the object's resourceVersion then: the object's history, which
// Kubernetes does not otherwise keep.
func (e *kubeEnv) watchHistory(obj kvfence.RemoteObject, from string) func() []historyEvent {
	e.t.Helper()
	w := e.openWatch(obj, from)
	return func() []historyEvent {
		e.t.Helper()
		want, _ := strconv.ParseInt(e.get(obj).Metadata.ResourceVersion, 10, 64)
		// A loaded machine under -race can take a while to deliver a few
		// hundred events; the bound only keeps a lost watch from hanging.
		// A watch that delivered nothing at all in 10 s while the object
		// moved is opened again once from the same version: CI runs met
		// such watches, and the history a new one gives is as complete.
		deadline := time.Now().Add(30 * time.Second)
		reopen := time.Now().Add(10 * time.Second)
		for {
			n, last, err := w.state()
			if last >= want || (n == 0 && want == 0) {
				break
			}
			if err != nil {
				e.t.Fatal(err)
			}
			if n == 0 && !reopen.IsZero() && time.Now().After(reopen) {
				w.stop()
				w, reopen = e.openWatch(obj, from), time.Time{}
				deadline = time.Now().Add(30 * time.Second)
				continue
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("the watch saw up to version %d of %d within 30 s (%d events)", last, want, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return w.stop()
	}
}

// historyWatch is one watch of an object and the changes it reported.
type historyWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	events []historyEvent
	err    error
}

// state returns how many changes the watch reported, the last one's
// version, and what ended it early, if anything.
func (w *historyWatch) state() (n int, last int64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n = len(w.events); n > 0 {
		last = w.events[n-1].version
	}
	return n, last, w.err
}

// stop ends the watch and returns the changes it reported.
func (w *historyWatch) stop() []historyEvent {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events)
}

// openWatch starts a watch of obj from version on, as the administrator.
func (e *kubeEnv) openWatch(obj kvfence.RemoteObject, from string) *historyWatch {
	e.t.Helper()
	client, err := e.config(kubeproc.Admin, nil).HTTPClient()
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.s.URL+testColl+"?watch=1&allowWatchBookmarks=false&resourceVersion="+from+
		"&fieldSelector=metadata.name%3D"+obj.Name, nil)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		e.t.Fatalf("watch: %v %v", resp, err)
	}
	w := &historyWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var ev struct {
				Type   string `json:"type"`
				Object stored `json:"object"`
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Type != "MODIFIED" {
				w.mu.Lock()
				w.err = fmt.Errorf("watch event %q: %v", sc.Bytes(), err)
				w.mu.Unlock()
				return
			}
			v, _ := strconv.ParseInt(ev.Object.Metadata.ResourceVersion, 10, 64)
			st, _ := ParseStamp(ev.Object.Metadata.Annotations)
			w.mu.Lock()
			w.events = append(w.events, historyEvent{version: v, stamp: st})
			w.mu.Unlock()
		}
		// An end of the stream before it was stopped is said as such, so
		// that a watch the server closed is not read as a slow one.
		if ctx.Err() == nil {
			w.mu.Lock()
			if w.err == nil {
				w.err = fmt.Errorf("the watch ended after %d events: %v", len(w.events), sc.Err())
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// superseded is a grant a hold superseded, with its acknowledgment.
type superseded struct {
	grant string
	// ackAt is when the hold returned.
	ackAt time.Time
	// ackVersion is the object's resourceVersion read just after the
	// acknowledgment.
	ackVersion int64
}

// checkAfterAck returns a violation if the server applied an update
// carrying a superseded grant after its hold's acknowledgment: sent after
// it, or leaving a resourceVersion past the one read just after it.
// resourceVersions are opaque to clients; here, on one API server over one
// etcd, they are etcd revisions, which order every write.
func checkAfterAck(log []delivery, gone []superseded) string {
	for _, g := range gone {
		for _, dl := range log {
			if dl.grant != g.grant || dl.status/100 != 2 {
				continue
			}
			v, _ := strconv.ParseInt(dl.version, 10, 64)
			if dl.sent.After(g.ackAt) || v > g.ackVersion {
				return fmt.Sprintf("update %s under superseded grant %s (%s) applied at version %s after the acknowledgment (object at %d then)",
					dl.receipt, g.grant, faultNames[dl.mode], dl.version, g.ackVersion)
			}
		}
	}
	return ""
}

// noteDispatchID is the dispatch id an audit note begins with
// ("dispatch ID; ..."), if any.
func noteDispatchID(note string) (string, bool) {
	rest, ok := strings.CutPrefix(note, "dispatch ")
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, ";")
	return strings.TrimSpace(id), id != ""
}
