package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/kvfence/kvfence/engine"
)

// Ensure that writers in two engines on one prefix (two receiver
// processes) that append to a chain through a head key that every append
// reads and writes never fork it: each acknowledged append has its own
// position, no entry is overwritten, and the head counts them all.
func TestHeadKeyFencesOtherWriters(t *testing.T) {
	a, b := setup(t)
	var mu sync.Mutex
	acked := map[int]string{}
	var wg sync.WaitGroup
	for _, e := range []*Engine{a, b, a, b} {
		wg.Go(func() {
			for i := range 10 {
				me := fmt.Sprintf("%p-%d", e, i)
				var pos int
				err := e.Update(context.Background(), func(tx engine.Tx) error {
					head, err := tx.Get(bk, []byte("head"))
					if err != nil {
						return err
					}
					pos = atoi(head) + 1
					key := []byte("entry/" + strconv.Itoa(pos))
					if old, err := tx.Get(bk, key); err != nil || old != nil {
						return fmt.Errorf("entry %d already written (%q, %v): the chain forked", pos, old, err)
					}
					if err := tx.Put(bk, key, []byte(me)); err != nil {
						return err
					}
					return tx.Put(bk, []byte("head"), []byte(strconv.Itoa(pos)))
				})
				if err != nil {
					if !errors.Is(err, engine.ErrConflict) {
						t.Error(err)
					}
					continue
				}
				mu.Lock()
				if acked[pos] != "" {
					t.Errorf("position %d acknowledged to %s and %s", pos, acked[pos], me)
				}
				acked[pos] = me
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	err := a.View(context.Background(), func(tx engine.Tx) error {
		head, err := tx.Get(bk, []byte("head"))
		if err != nil {
			return err
		}
		if atoi(head) != len(acked) {
			return fmt.Errorf("head %s, %d appends acknowledged", head, len(acked))
		}
		for pos, me := range acked {
			v, err := tx.Get(bk, []byte("entry/"+strconv.Itoa(pos)))
			if err != nil || string(v) != me {
				return fmt.Errorf("entry %d = %q, %v; acknowledged to %s", pos, v, err, me)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of 40 appends acknowledged", len(acked))
}
