package kvfence

import (
	bolt "go.etcd.io/bbolt"
)

func ptr[T any](v T) *T { return &v }

func deleteKey(bucket []byte, key string) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete([]byte(key)) }
}

// forgeActiveGrant writes grant id into the fixture scope's control record
// directly, to reach checks past 2-4 with a grant of another scope.
func forgeActiveGrant(f *fixture, id string) {
	f.t.Helper()
	err := f.r.db.Update(func(tx *bolt.Tx) error {
		c, err := getControl(tx, fixScope)
		if err != nil {
			return err
		}
		c.ActiveGrant = id
		raw, err := encodeRecord(c)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketControl).Put([]byte(fixScope), raw)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}
