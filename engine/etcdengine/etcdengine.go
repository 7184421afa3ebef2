package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/etcdauth"
	"github.com/kvfence/kvfence/internal/etcdcluster"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults of Options.
const (
	// DefaultPrefix is where the engine keeps its keys.
	DefaultPrefix = "/kvfence/"
	// DefaultMaxTxnOps is etcd's default --max-txn-ops.
	DefaultMaxTxnOps = 128
	// DefaultMaxRequestBytes is etcd's default --max-request-bytes.
	DefaultMaxRequestBytes = 1536 * 1024
	// DefaultMaxAttempts bounds the runs of one Update or View.
	DefaultMaxAttempts = 16
	// DefaultScanPage is how many keys one range request of a scan asks
	// for.
	DefaultScanPage = 256
	// AuthCheckTimeout bounds New's question whether the cluster's auth
	// is enabled, asked when the client authenticates as a user.
	AuthCheckTimeout = 5 * time.Second
)

// ErrAuthOff means the client authenticates as a user, but the cluster
// does not have auth enabled (New).
var ErrAuthOff = etcdauth.ErrAuthOff

// opOverhead is what one operation or compare adds to a Txn request beyond
// its key, range end and value: protobuf tags, lengths and a revision.
const opOverhead = 32

// baseOverhead is what a Txn request adds beyond its operations, with the
// header of the request etcd proposes to Raft.
const baseOverhead = 128

// Options configure an Engine. The zero value means the defaults.
type Options struct {
	// Prefix is prepended to every key; it must start and end with '/'.
	// Default DefaultPrefix.
	Prefix string
	// MaxTxnOps is the cluster's --max-txn-ops. Default DefaultMaxTxnOps.
	MaxTxnOps int
	// MaxRequestBytes is the cluster's --max-request-bytes. Default
	// DefaultMaxRequestBytes.
	MaxRequestBytes int
	// MaxAttempts bounds how often an Update runs its function before it
	// gives up with engine.ErrConflict. Default DefaultMaxAttempts.
	MaxAttempts int
	// ScanPage is the number of keys fetched per range request of a scan.
	// Default DefaultScanPage.
	ScanPage int
	// Reserved are key prefixes outside Prefix that raw keys
	// (engine.RawTx) must not lie under: another user's records on the
	// same cluster, such as a ledger's prefix or an anchor's key. Each
	// must be non-empty.
	Reserved []string
}

// Engine runs the seam's transactions on etcd. It is safe for concurrent
// use.
type Engine struct {
	cli    *clientv3.Client
	kv     clientv3.KV
	prefix string
	opts   Options
	closed atomic.Bool
	// known holds the buckets seen to exist. Buckets are never deleted
	// through the seam, so once seen they need no further read.
	known sync.Map
}

var _ engine.Engine = (*Engine)(nil)

// New returns an engine over cli, which it then owns: Close closes cli.
// opts may be nil. If cli authenticates as a user (etcd auth), New asks
// the cluster, within AuthCheckTimeout, whether its auth is enabled, and
// refuses a cluster without auth with ErrAuthOff: etcd's client would
// otherwise drop the user and go on unauthenticated, on a cluster where
// every client may write the engine's keys. Without a user New does not
// contact the cluster.
func New(cli *clientv3.Client, opts *Options) (*Engine, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !strings.HasPrefix(o.Prefix, "/") || !strings.HasSuffix(o.Prefix, "/") {
		return nil, fmt.Errorf("%w: etcd prefix %q must start and end with '/'", engine.ErrInvalid, o.Prefix)
	}
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.ScanPage <= 0 {
		o.ScanPage = DefaultScanPage
	}
	o.Reserved = append([]string(nil), o.Reserved...)
	for _, r := range o.Reserved {
		if r == "" {
			return nil, fmt.Errorf("%w: an empty reserved prefix would reserve every key", engine.ErrInvalid)
		}
	}
	if cli.Username != "" {
		// etcd's client drops the user on a cluster whose auth is off and
		// goes on unauthenticated: ask, with the user's own token.
		ctx, cancel := context.WithTimeout(context.Background(), AuthCheckTimeout)
		err := etcdauth.RequireEnabled(ctx, cli)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("etcdengine: user %s: %w", cli.Username, err)
		}
	}
	return &Engine{cli: cli, kv: cli.KV, prefix: o.Prefix, opts: o}, nil
}

// Limits returns etcd's limits as given in Options. MaxOps bounds both the
// writes and the compares of one Update.
func (e *Engine) Limits() engine.Limits {
	return engine.Limits{MaxOps: e.opts.MaxTxnOps, MaxBytes: e.opts.MaxRequestBytes - baseOverhead, OpOverhead: opOverhead}
}

// ClusterID returns the ID of the etcd cluster that holds the engine's
// keys, from a linearizable read under the prefix (etcdcluster.ID). An
// anchor kept apart from this store must answer with another one: the
// spelling of an address cannot tell two clusters apart, the ID can.
func (e *Engine) ClusterID(ctx context.Context) (uint64, error) {
	if e.closed.Load() {
		return 0, engine.ErrClosed
	}
	id, err := etcdcluster.ID(ctx, e.kv, e.prefix)
	if err != nil {
		return 0, fmt.Errorf("etcdengine: %w", err)
	}
	return id, nil
}

// Close closes the client.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	return e.cli.Close()
}

// Update runs fn optimistically and commits its writes as one Txn; see the
// package documentation for what it compares.
func (e *Engine) Update(ctx context.Context, fn func(engine.Tx) error) error {
	return e.run(ctx, true, fn)
}

// View runs fn on the state at one revision, fixed by its first read,
// which is linearizable.
func (e *Engine) View(ctx context.Context, fn func(engine.Tx) error) error {
	return e.run(ctx, false, fn)
}

// run runs fn until it commits, fails, or the attempts run out.
func (e *Engine) run(ctx context.Context, writable bool, fn func(engine.Tx) error) error {
	for attempt := 1; ; attempt++ {
		if e.closed.Load() {
			return engine.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		t := newTx(ctx, e, writable)
		err := fn(t)
		switch {
		case t.tooLarge != nil:
			return t.tooLarge
		case t.retry != nil:
			// The revision was compacted under a read: nothing can be
			// said about this run, start again on a newer one.
		case err != nil:
			return err
		case t.readFailed != nil:
			// fn went on past a failed read: what it decided rests on a
			// read the commit could not compare.
			return t.readFailed
		case !writable || len(t.writes) == 0:
			// Nothing to write: the reads were one consistent state.
			t.learnBuckets()
			return nil
		default:
			rev, ok, err := t.commit()
			if err != nil {
				return err
			}
			if ok {
				t.learnBuckets()
				for _, fn := range t.committed {
					fn(rev)
				}
				return nil
			}
		}
		if attempt >= e.opts.MaxAttempts {
			return fmt.Errorf("%w: %d attempts", engine.ErrConflict, attempt)
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
}

// backoff waits a random time that grows with the attempt, so that
// writers that conflicted do not meet again at once.
func backoff(ctx context.Context, attempt int) error {
	ceiling := time.Millisecond << min(attempt, 6)
	timer := time.NewTimer(rand.N(ceiling))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// commit sends the Txn. It reports whether the compares held, and the
// revision of a Txn whose compares held; an error means nothing was
// decided by the compares.
func (t *tx) commit() (int64, bool, error) {
	cmps := t.compares()
	ops := make([]clientv3.Op, 0, len(t.writes))
	for k, w := range t.writes {
		if w.del {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(w.val)))
		}
	}
	// A context that ended before the send leaves nothing in doubt.
	if err := t.ctx.Err(); err != nil {
		return 0, false, err
	}
	resp, err := t.e.kv.Txn(t.ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, false, commitErr(err)
	}
	return resp.Header.Revision, resp.Succeeded, nil
}

// commitErr sorts a failed Txn: refusals that etcd gives before applying
// anything, and everything else, whose outcome is unknown.
func commitErr(err error) error {
	if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) {
		return fmt.Errorf("%w: etcd refused the commit: %w", engine.ErrTxnTooLarge, err)
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
		// Checked before a proposal is made: nothing was applied.
		return fmt.Errorf("etcdengine: etcd refused the commit: %w", err)
	}
	return fmt.Errorf("%w: commit: %w", engine.ErrOutcomeUnknown, err)
}

// readErr sorts a failed read. A compacted revision makes the run start
// again; other failures end the transaction and wrote nothing.
func (t *tx) readErr(err error) error {
	if errors.Is(err, rpctypes.ErrCompacted) {
		t.retry = err
		return fmt.Errorf("%w: read revision compacted: %w", engine.ErrConflict, err)
	}
	if cerr := t.ctx.Err(); cerr != nil {
		err = cerr
	}
	if t.readFailed == nil {
		t.readFailed = fmt.Errorf("etcdengine: read: %w", err)
	}
	return t.readFailed
}
