package boltengine_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	bolt "go.etcd.io/bbolt"
)

// An Update writes in named buckets; a View reads, copying out what it
// keeps past its function.
func ExampleEngine() {
	dir, err := os.MkdirTemp("", "boltengine")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := bolt.Open(filepath.Join(dir, "example.db"), 0o600, nil)
	if err != nil {
		log.Fatal(err)
	}
	e := boltengine.New(db, nil)
	defer e.Close()

	ctx := context.Background()
	scopes := []byte("scopes")
	err = e.Update(ctx, func(tx engine.Tx) error {
		if err := tx.CreateBucket(scopes); err != nil {
			return err
		}
		for _, name := range []string{"payments", "deploy", "billing"} {
			if err := tx.Put(scopes, []byte(name), []byte("open")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	var names []string
	err = e.View(ctx, func(tx engine.Tx) error {
		names = names[:0] // the function may run more than once
		return tx.Scan(scopes, nil, func(k, v []byte) error {
			names = append(names, string(k)+"="+string(v))
			return nil
		})
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(names)
	// Output: [billing=open deploy=open payments=open]
}
