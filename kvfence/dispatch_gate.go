package kvfence

import "sync"

// dispatchGate is one Receiver handle's record of holds that a remote write
// checks before it starts (docs/design.md §4.2). A hold sets its scopes'
// new epochs here inside the write transaction that commits it, once
// every scope is held, before the commit, under the writer's lock; a
// write decided at an older epoch that checks the gate after that does
// not start. A hold whose commit then fails has cancelled such writes
// for nothing, which is safe (nothing was written), until a hold that
// commits moves the scope on. Holds of other processes sharing an etcd
// prefix do not reach this gate; their wait and fencing write order the
// write before their acknowledgment instead.
type dispatchGate struct {
	mu sync.Mutex
	// held is, by scope, the highest epoch a hold of this process moved
	// the scope to.
	held map[string]uint64
	// changed is closed, and replaced, whenever a dispatch settles, to
	// wake the holds that wait for one.
	changed chan struct{}
}

// hold records that scope is being held at epoch.
func (g *dispatchGate) hold(scope string, epoch uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		g.held = make(map[string]uint64)
	}
	g.held[scope] = max(g.held[scope], epoch)
}

// holdAll records the scopes of a hold whose transaction is about to
// commit.
func (g *dispatchGate) holdAll(scopes []HeldScope) {
	for _, s := range scopes {
		g.hold(s.Scope, s.Epoch)
	}
}

// mayStart reports whether a write decided at epoch in scope may start:
// no hold of this process moved the scope past it.
func (g *dispatchGate) mayStart(scope string, epoch uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[scope] <= epoch
}

// wait returns a channel closed at the next settled dispatch.
func (g *dispatchGate) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

// notify wakes the waiters of wait.
func (g *dispatchGate) notify() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}
