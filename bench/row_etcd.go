package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdPrefixRoot is where the etcd rows write: each cell under a fresh
// prefix below it, deleted when the cell closes.
const EtcdPrefixRoot = "/kvfence-bench/"

// etcdCleanupTimeout bounds deleting a cell's prefix.
const etcdCleanupTimeout = 30 * time.Second

// errNoEtcd means an etcd row was selected without a cluster.
var errNoEtcd = errors.New("needs an etcd cluster (Options.NewEtcdClient)")

// etcdCell is the engine's own limit: one RecordSize Put per Txn, under an
// 8-byte key, the operation's number, below a fresh prefix. A Txn is
// acknowledged once a majority of the members have it in their
// write-ahead logs, synced, so the row is durable; their syncs are not
// counted here (FsyncsPerOp is 0).
type etcdCell struct {
	cli    *clientv3.Client // the cell's own
	prefix string
	record []byte
}

// freshPrefix returns a new prefix below EtcdPrefixRoot that no run has
// used.
func freshPrefix() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return EtcdPrefixRoot + hex.EncodeToString(b[:]) + "/", nil
}

func openEtcdTxn(_ context.Context, _ string, newClient func() (*clientv3.Client, error)) (cell, error) {
	p, err := freshPrefix()
	if err != nil {
		return nil, err
	}
	cli, err := newClient()
	if err != nil {
		return nil, err
	}
	return &etcdCell{cli: cli, prefix: p, record: record(1)}, nil
}

func (c *etcdCell) op(ctx context.Context, _ int, i int64) error {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], uint64(i))
	resp, err := c.cli.Txn(ctx).Then(clientv3.OpPut(c.prefix+string(key[:]), string(c.record))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd Txn without compares did not succeed")
	}
	return nil
}

func (c *etcdCell) syncs() (float64, error) { return 0, nil }

// close deletes everything the cell wrote.
func (c *etcdCell) close() error { return errors.Join(deletePrefix(c.cli, c.prefix), c.cli.Close()) }

// deletePrefix deletes every key below prefix.
func deletePrefix(cli *clientv3.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), etcdCleanupTimeout)
	defer cancel()
	if _, err := cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("deleting the bench prefix %s: %w", prefix, err)
	}
	return nil
}
