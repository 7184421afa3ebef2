package kvfence

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"github.com/kvfence/kvfence/engine"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// chainModel is the state that an audit chain implies, rebuilt entry by
// entry by replayChain. The crash and hold-race tests compare it with the
// database and with what callers were told.
type chainModel struct {
	head    audit.Head
	entries map[uint64]audit.Entry
	scopes  map[string]*scopeModel
	targets map[string]*targetModel
	// applied maps a receipt key (scope, zero byte, action) to the seq of
	// the entry that applied it.
	applied map[string]uint64
	// submits counts submit entries by outcome.
	submits map[string]int
}

type scopeModel struct {
	epoch  uint64
	active string // "" while held
}

type targetModel struct {
	scope    string
	rev      uint64
	valueSHA []byte
}

// replayChain walks r's whole audit chain and fails the test where it
// breaks a rule of the fence:
//   - links and seqs run 1, 2, 3, ... with each prev the hash before it;
//   - a hold advances its scope's epoch and leaves no active grant; an
//     activation happens only on a held scope, at its current epoch;
//   - an applied mutation uses the scope's active grant at its current
//     epoch: no mutation commits under a grant after the hold that
//     superseded it commits (the acceptance rule, docs/design.md §1);
//   - an applied mutation moves its target from the revision the chain
//     last gave it to the next one, and each (scope, action) is applied at
//     most once; already_applied answers only an action applied before.
func replayChain(t testing.TB, r *Receiver) *chainModel {
	t.Helper()
	m := &chainModel{entries: map[uint64]audit.Entry{}, scopes: map[string]*scopeModel{},
		targets: map[string]*targetModel{}, applied: map[string]uint64{}, submits: map[string]int{}}
	var prev audit.Hash
	fail := func(e audit.Entry, format string, args ...any) {
		t.Helper()
		t.Errorf("audit entry %d (%s %s %s): %s", e.Seq, e.Kind, e.Scope, e.Outcome, fmt.Sprintf(format, args...))
	}
	err := r.Events(0, func(ev Event) bool {
		e := ev.Entry
		if e.Seq != m.head.Seq+1 || !bytes.Equal(e.Prev, prev[:]) {
			fail(e, "follows seq %d with prev %x, want seq %d with prev %x", m.head.Seq, e.Prev, m.head.Seq+1, prev)
		}
		prev, m.head = ev.Hash, audit.Head{Seq: e.Seq, Hash: ev.Hash}
		m.entries[e.Seq] = e
		sc := m.scopes[e.Scope]
		switch e.Kind {
		case KindScopeCreated:
			if sc != nil {
				fail(e, "scope created twice")
			}
			m.scopes[e.Scope] = &scopeModel{epoch: e.Epoch}
		case KindTargetCreated:
			m.targets[e.Target] = &targetModel{scope: e.Scope, rev: e.RevAfter, valueSHA: e.ValueSHA256}
		case KindHold:
			if sc == nil || e.Epoch != sc.epoch+1 {
				fail(e, "hold to epoch %d from %+v", e.Epoch, sc)
				return true
			}
			sc.epoch, sc.active = e.Epoch, ""
		case KindActivate:
			if sc == nil || sc.active != "" || e.Epoch != sc.epoch {
				fail(e, "activation at epoch %d of %+v", e.Epoch, sc)
				return true
			}
			sc.active = e.Grant
		case KindSubmit:
			m.submits[e.Outcome]++
			key := string(receiptKey(e.Scope, e.Action))
			switch e.Outcome {
			case string(Applied):
				if sc == nil || sc.active == "" || e.Grant != sc.active || e.Epoch != sc.epoch {
					fail(e, "applied under grant %s epoch %d while the scope is %+v", e.Grant, e.Epoch, sc)
				}
				if seq, ok := m.applied[key]; ok {
					fail(e, "action %q applied again (first at %d)", e.Action, seq)
				}
				m.applied[key] = e.Seq
				tg := m.targets[e.Target]
				if tg == nil || tg.scope != e.Scope || e.RevBefore != tg.rev || e.RevAfter != tg.rev+1 {
					fail(e, "mutation %d->%d of target %q, model %+v", e.RevBefore, e.RevAfter, e.Target, tg)
					return true
				}
				tg.rev, tg.valueSHA = e.RevAfter, e.ValueSHA256
			case string(AlreadyApplied):
				if _, ok := m.applied[key]; !ok {
					fail(e, "already_applied for action %q, never applied", e.Action)
				}
			case string(Denied):
				if e.Reason == "" {
					fail(e, "denial without a reason")
				}
			default:
				fail(e, "unknown outcome")
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("audit chain: %v", err)
	}
	return m
}

// checkState fails the test unless the database holds exactly what the
// chain says: every target at the revision and value of its last entry, a
// receipt for every applied action naming that entry, and no other
// receipt. No target changed without both its audit entry and its receipt.
func checkState(t testing.TB, r *Receiver, m *chainModel) {
	t.Helper()
	for name, want := range m.targets {
		tg, err := r.Target(name)
		if err != nil {
			t.Errorf("target %q: %v", name, err)
			continue
		}
		sum := sha256.Sum256(tg.Value)
		if tg.Revision != want.rev || !bytes.Equal(sum[:], want.valueSHA) {
			t.Errorf("target %q at revision %d (value sha256 %x); the chain says revision %d (%x)",
				name, tg.Revision, sum, want.rev, want.valueSHA)
		}
	}
	receipts := 0
	err := r.view(func(tx engine.Tx) error {
		receipts = 0
		return tx.Scan(bucketReceipts, nil, func(k, _ []byte) error {
			receipts++
			scope, action, _ := strings.Cut(string(k), "\x00")
			rc, err := getReceipt(tx, scope, action)
			if err != nil {
				return err
			}
			seq, ok := m.applied[string(k)]
			e := m.entries[seq]
			if !ok || rc.AuditSeq != seq || rc.RevAfter != e.RevAfter || rc.Grant != e.Grant ||
				!bytes.Equal(rc.RequestSHA256, e.RequestSHA256) {
				t.Errorf("receipt %q/%q %+v does not match audit entry %d %+v", scope, action, rc, seq, e)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatalf("receipts: %v", err)
	}
	if receipts != len(m.applied) {
		t.Errorf("%d receipts for %d applied actions", receipts, len(m.applied))
	}
}
