package kvfence

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvfence/kvfence/internal/defect"
)

// Red-team tests of the func target kind (docs/design.md §4.1): each tries
// to break one of the effect's guarantees.

// rtFixture is a fixture on a fresh store of s's engine whose receiver
// registers apply as effect "rt" over the given buckets, with the func
// target effTarget naming it.
func rtFixture(t *testing.T, s *store, buckets []string, apply func(tx EffectTx, in EffectInput) error) *fixture {
	t.Helper()
	f := newFixtureOn(t, s, defect.Variant{})
	f.effects = map[string]Effect{"rt": {Buckets: buckets, Apply: apply}}
	f.reopen()
	if _, err := f.admin.CreateTargetSpec(f.ctx, TargetSpec{Scope: fixScope, Name: effTarget, Value: []byte("{}"), Kind: TargetFunc, Effect: "rt"}); err != nil {
		t.Fatalf("CreateTargetSpec: %v", err)
	}
	return f
}

// Attack: an effect that writes and then returns an error whose text is
// empty. The contract: "An error refuses the write: nothing the effect
// wrote is kept".
func TestRedteamEffect_EmptyErrorRefuses(t *testing.T) {
	f := rtFixture(t, engines[0].new(t), []string{effBucket}, func(tx EffectTx, in EffectInput) error {
		if err := tx.Put(effBucket, []byte("k"), []byte("written before the error")); err != nil {
			return err
		}
		return errors.New("")
	})
	w := f.effWorker("worker-a", "a1", `{"v":1}`)
	res := f.submit(w.name, w.envelope)
	if res.Outcome != Denied {
		t.Errorf("an effect that returned an error: outcome %s, want denied", res.Outcome)
	}
	if got := appValue(t, f, "k"); got != "" {
		t.Errorf("app record %q kept after the effect returned an error", got)
	}
	wantEffTarget(t, f, 1, `{}`)
}

// rtNilErr is an error type whose Error dereferences its receiver: a
// typed nil of it returned as an error is the classic Go bug.
type rtNilErr struct{ msg string }

func (e *rtNilErr) Error() string { return e.msg }

// Attack: an effect returns a typed nil error (non-nil interface, nil
// pointer) whose Error method panics. The contract: an effect's error or
// panic is a denial, precondition_failed, and costs the batch nothing; the
// receiver goes on.
func TestRedteamEffect_ErrorMethodPanics(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) { rtErrorMethodPanics(t, s) })
}

func rtErrorMethodPanics(t *testing.T, s *store) {
	var bad atomic.Bool
	bad.Store(true)
	f := rtFixture(t, s, []string{effBucket}, func(tx EffectTx, in EffectInput) error {
		if err := tx.Put(effBucket, []byte("k"), in.Value); err != nil {
			return err
		}
		if bad.Load() {
			var e *rtNilErr
			return e
		}
		return nil
	})
	w := f.effWorker("worker-a", "a1", `{"v":1}`)
	res, err := f.r.Submit(f.ctx, w.name, w.envelope)
	if err != nil || res.Outcome != Denied || res.Reason != ReasonPreconditionFailed {
		t.Errorf("an effect whose error panics: Submit = %+v, %v; want a precondition_failed denial", res, err)
	}
	if errors.Is(err, ErrBadFormat) {
		t.Errorf("a buggy effect is reported as a damaged store: %v", err)
	}
	if got := appValue(t, f, "k"); got != "" {
		t.Errorf("app record %q kept", got)
	}
	bad.Store(false)
	w2 := f.effWorker("worker-b", "b1", `{"v":2}`)
	if res := f.submit(w2.name, w2.envelope); res.Outcome != Applied {
		t.Fatalf("the next submit = %+v", res)
	}
}

// Attack: an effect whose Scan function writes and deletes keys of the
// range that the effect had written before the scan began. The contract:
// the scan merges the effect's own writes "as they were when the scan
// began".
func TestRedteamEffect_ScanSeesWritesMadeDuringScan(t *testing.T) {
	var seen []string
	f := rtFixture(t, engines[0].new(t), []string{effBucket}, func(tx EffectTx, in EffectInput) error {
		seen = seen[:0]
		for _, k := range []string{"a", "b", "c"} {
			if err := tx.Put(effBucket, []byte(k), []byte("old")); err != nil {
				return err
			}
		}
		return tx.Scan(effBucket, nil, func(k, v []byte) error {
			seen = append(seen, string(k)+"="+string(v))
			if string(k) == "a" {
				if err := tx.Put(effBucket, []byte("b"), []byte("new")); err != nil {
					return err
				}
				return tx.Delete(effBucket, []byte("c"))
			}
			return nil
		})
	})
	w := f.effWorker("worker-a", "a1", `{"v":1}`)
	if res := f.submit(w.name, w.envelope); res.Outcome != Applied {
		t.Fatalf("submit = %+v", res)
	}
	if want := []string{"a=old", "b=old", "c=old"}; !slices.Equal(seen, want) {
		t.Errorf("scan saw %q, want the writes as they were when it began, %q", seen, want)
	}
}

// Attack: an effect writes an empty value (allowed: "value may be
// empty"), then later effects read, rewrite and delete it, and the
// receiver is reopened (the digest is recomputed). An engine that stores
// an empty value as absent would make the known records or the digest
// disagree.
func TestRedteamEffect_EmptyValue(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		var got []string
		f := rtFixture(t, s, []string{effBucket}, func(tx EffectTx, in EffectInput) error {
			v, err := tx.Get(effBucket, []byte("e"))
			if err != nil {
				return err
			}
			if v == nil {
				got = append(got, in.Action+":absent")
			} else {
				got = append(got, in.Action+":"+string(v)+"|")
			}
			switch in.Action {
			case "a1", "a2":
				return tx.Put(effBucket, []byte("e"), nil)
			case "a3":
				return tx.Delete(effBucket, []byte("e"))
			}
			return nil
		})
		for _, a := range []string{"a1", "a2", "a3", "a4"} {
			w := f.effWorker("w-"+a, a, `{}`)
			res, err := f.r.Submit(f.ctx, w.name, w.envelope)
			if err != nil || res.Outcome != Applied {
				t.Fatalf("%s: Submit = %+v, %v", a, res, err)
			}
			f.reopen()
		}
		if want := []string{"a1:absent", "a2:|", "a3:|", "a4:absent"}; !slices.Equal(got, want) {
			t.Errorf("the effect read %q, want %q", got, want)
		}
	})
}

// Attack: MaxRecords bypass through app records. The receiver is opened
// with a small MaxRecords; an effect writes more new records than are
// left. The contract: app records count against Options.MaxRecords.
func TestRedteamEffect_MaxRecords(t *testing.T) {
	f := rtFixture(t, engines[0].new(t), []string{effBucket}, func(tx EffectTx, in EffectInput) error {
		for i := range 50 {
			if err := tx.Put(effBucket, []byte{'k', byte(i)}, []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	f.r.Close()
	o := f.opts()
	o.MaxRecords = 20
	r, err := f.openStore(o, defect.Variant{})
	if err != nil {
		t.Fatal(err)
	}
	f.r, f.admin = r, r.Admin()
	w := f.effWorker("worker-a", "a1", `{}`)
	res, err := f.r.Submit(f.ctx, w.name, w.envelope)
	if err == nil && res.Outcome == Applied {
		t.Errorf("50 app records were written past MaxRecords 20")
	}
	if err != nil && !errors.Is(err, ErrRecordLimit) {
		t.Errorf("Submit = %v, want ErrRecordLimit", err)
	}
	if recs := appRecords(t, f); len(recs) != 0 {
		t.Errorf("%d app records kept", len(recs))
	}
	f.reopen()
}

// Attack: a record added to an app bucket in the store under the running
// receiver, found by an effect's Scan (not a Get). The contract: "A scan
// finds records added under the receiver (each is checked)".
func TestRedteamEffect_ScanFindsForgedRecord(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		var seen []string
		f := rtFixture(t, s, []string{effBucket}, func(tx EffectTx, in EffectInput) error {
			if err := tx.Put(effBucket, []byte(in.Action), in.Value); err != nil {
				return err
			}
			return tx.Scan(effBucket, nil, func(k, v []byte) error {
				seen = append(seen, string(k))
				return nil
			})
		})
		a := f.effWorker("worker-a", "a1", `{}`)
		if res := f.submit(a.name, a.envelope); res.Outcome != Applied {
			t.Fatalf("submit = %+v", res)
		}
		storePut(t, f, bucketApp, string(appKey(effBucket, []byte("forged"))), []byte("x"))
		b := f.effWorker("worker-b", "b1", `{}`)
		head := f.r.Head()
		res, err := f.r.Submit(f.ctx, b.name, b.envelope)
		if !errors.Is(err, ErrStateMismatch) {
			t.Errorf("Submit over a forged app record found by a scan = %+v, %v; want ErrStateMismatch", res, err)
		}
		if f.r.Head() != head {
			t.Errorf("something was written")
		}
		storePut(t, f, bucketApp, string(appKey(effBucket, []byte("forged"))), nil)
	})
}

// Attack: a forged record in another app bucket whose key sorts inside
// the scanned bucket's range if the prefix check were loose: bucket
// "app_a" key "\x00b" is "app_a\x00\x00b", and bucket "app_a" scans
// "app_a\x00..."; a neighbouring bucket "app_a_" or "app_a0" must never
// show in app_a's scan, nor app_a's keys in theirs.
func TestRedteamEffect_ScanBucketBoundaries(t *testing.T) {
	seen := map[string][]string{}
	f := rtFixture(t, engines[0].new(t), []string{"app_a", "app_a_", "app_a0", "app_"}, func(tx EffectTx, in EffectInput) error {
		if in.Action == "a1" {
			for _, b := range []string{"app_a", "app_a_", "app_a0", "app_"} {
				for _, k := range []string{"\x00", "\x00b", "\xff", "a\x00"} {
					if err := tx.Put(b, []byte(k), []byte(b)); err != nil {
						return err
					}
				}
			}
			return nil
		}
		for _, b := range []string{"app_a", "app_a_", "app_a0", "app_"} {
			err := tx.Scan(b, nil, func(k, v []byte) error {
				if string(v) != b {
					seen[b] = append(seen[b], "foreign "+string(v)+"/"+string(k))
				} else {
					seen[b] = append(seen[b], string(k))
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	for _, a := range []string{"a1", "a2"} {
		w := f.effWorker("w-"+a, a, `{}`)
		if res := f.submit(w.name, w.envelope); res.Outcome != Applied {
			t.Fatalf("submit = %+v", res)
		}
	}
	want := []string{"\x00", "\x00b", "a\x00", "\xff"}
	for _, b := range []string{"app_a", "app_a_", "app_a0", "app_"} {
		if !slices.Equal(seen[b], want) {
			t.Errorf("scan of %s saw %q, want %q", b, seen[b], want)
		}
	}
	_ = strings.Repeat
	_ = context.Background
}
