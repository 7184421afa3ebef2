package kvfence

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Attack: the longest app key under the longest app bucket name, with
// every byte value in it, written, read, scanned from the middle, and
// reopened (digest and known records recomputed), on both engines.
func TestRedteamEffect_LongestKey(t *testing.T) {
	forEngines(t, func(t *testing.T, s *store) {
		bucket := "app_" + strings.Repeat("z", 60)
		key := make([]byte, MaxAppKeySize)
		for i := range key {
			key[i] = byte(i)
		}
		key2 := bytes.Clone(key)
		key2[len(key2)-1] = 0xff
		var scanned [][]byte
		f := rtFixture(t, s, []string{bucket}, func(tx EffectTx, in EffectInput) error {
			if in.Action == "a1" {
				if err := tx.Put(bucket, key, []byte("1")); err != nil {
					return err
				}
				return tx.Put(bucket, key2, []byte("2"))
			}
			v, err := tx.Get(bucket, key)
			if err != nil || string(v) != "1" {
				return fmt.Errorf("get = %q, %v", v, err)
			}
			return tx.Scan(bucket, key[:MaxAppKeySize-1], func(k, v []byte) error {
				scanned = append(scanned, bytes.Clone(k))
				return nil
			})
		})
		for _, a := range []string{"a1", "a2"} {
			w := f.effWorker("w-"+a, a, `{}`)
			res, err := f.r.Submit(f.ctx, w.name, w.envelope)
			if err != nil || res.Outcome != Applied {
				t.Fatalf("%s: Submit = %+v, %v", a, res, err)
			}
			f.reopen()
		}
		if len(scanned) != 2 || !bytes.Equal(scanned[0], key) || !bytes.Equal(scanned[1], key2) {
			t.Errorf("scan found %d keys", len(scanned))
		}
		if v, err := f.r.AppGet(bucket, key2); err != nil || string(v) != "2" {
			t.Errorf("AppGet = %q, %v", v, err)
		}
	})
}

// Attack: an effect that writes more than etcd takes in one transaction.
// The write must be refused whole (an error or a denial), nothing kept,
// and the receiver must go on.
func TestRedteamEffect_EtcdHugeEffect(t *testing.T) {
	s := engines[1].new(t)
	big := true
	f := rtFixture(t, s, []string{effBucket}, func(tx EffectTx, in EffectInput) error {
		n := 1
		if big {
			n = 3000
		}
		for i := range n {
			if err := tx.Put(effBucket, []byte(fmt.Sprintf("k%05d", i)), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	w := f.effWorker("worker-a", "a1", `{}`)
	res, err := f.r.Submit(f.ctx, w.name, w.envelope)
	t.Logf("huge effect: %+v, %v", res, err)
	if err == nil && res.Outcome == Applied {
		if recs := appRecords(t, f); len(recs) != 3000 {
			t.Errorf("applied with %d of 3000 records", len(recs))
		}
	} else if recs := appRecords(t, f); len(recs) != 0 {
		t.Errorf("refused, but %d app records kept", len(recs))
	}
	if err != nil && !errors.Is(err, ErrTooLarge) {
		t.Errorf("error %v, want ErrTooLarge", err)
	}
	big = false
	w2 := f.effWorker("worker-b", "b1", `{}`)
	if res := f.submit(w2.name, w2.envelope); res.Outcome != Applied {
		t.Fatalf("the next submit = %+v", res)
	}
	f.reopen()
}
