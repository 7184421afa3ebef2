package etcdanchor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvfence/kvfence/audit"
)

// lostAnswerKV passes every request to the cluster, but the answers of the
// first lose Txns it commits never come back: the Txn takes effect and the
// caller sees a timeout, as when a member dies after committing.
type lostAnswerKV struct {
	clientv3.KV
	lose atomic.Int64
}

func (k *lostAnswerKV) Txn(ctx context.Context) clientv3.Txn {
	return &lostAnswerTxn{Txn: k.KV.Txn(ctx), kv: k}
}

type lostAnswerTxn struct {
	clientv3.Txn
	kv *lostAnswerKV
}

func (t *lostAnswerTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *lostAnswerTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *lostAnswerTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *lostAnswerTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.kv.lose.Add(-1) >= 0 {
		return nil, context.DeadlineExceeded
	}
	return resp, err
}

// Ensure that a write whose answer is lost after it took effect is
// reported as success once a repeat finds it landed, and as an unknown
// outcome, never as a conflict, when there is no attempt left to find out;
// a re-read then shows it landed.
func TestLostAnswer(t *testing.T) {
	_, cl := startCluster(t)
	for _, tc := range []struct {
		name     string
		attempts int
		lose     int64
		want     error
	}{
		{"settled by the repeat", 2, 1, nil},
		{"settled after several lost answers", 4, 3, nil},
		{"no attempt left", 1, 1, ErrOutcomeUnknown},
		{"every answer lost", 3, 3, ErrOutcomeUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(cl, testKey(t), &Options{Attempts: tc.attempts})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Store(nil, at(t, 1)); err != nil {
				t.Fatal(err)
			}
			kv := &lostAnswerKV{KV: cl}
			kv.lose.Store(tc.lose)
			s.kv = kv
			err = s.Store(ptr(at(t, 1)), at(t, 2))
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Store: %v, want %v", err, tc.want)
			}
			if errors.Is(err, audit.ErrWriteConflict) {
				t.Fatalf("a lost answer reported as a conflict: %v", err)
			}
			if got, err := s.Load(); err != nil || got != at(t, 2) {
				t.Fatalf("the re-read = seq %d, %v; want 2: the first attempt landed", got.Seq, err)
			}
		})
	}
}
