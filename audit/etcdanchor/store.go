package etcdanchor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/clusterid"
	"github.com/kvfence/kvfence/internal/etcdauth"
	"github.com/kvfence/kvfence/internal/etcdcluster"
)

// Defaults for Options.
const (
	DefaultDialTimeout = 5 * time.Second
	DefaultTimeout     = 5 * time.Second
	DefaultAttempts    = 4
)

// Options configures a Store. Nil or the zero value means plain-text
// connections and the defaults above.
type Options struct {
	// CertFile and KeyFile are the PEM client certificate and its private
	// key, for a cluster that authenticates clients by certificate; both
	// or neither. The key file must not be readable by group or others.
	CertFile, KeyFile string
	// CAFile is a PEM file of the CA certificates that the members'
	// certificates must chain to. Naming any TLS file makes every
	// connection TLS; nothing falls back to plain text.
	CAFile string
	// Username and Password authenticate to a cluster with etcd auth
	// enabled, whose roles let this user read and write the anchor key;
	// both or neither. No error of this package quotes the password.
	Username, Password string
	// DialTimeout bounds connecting to a member; 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// Timeout bounds each request to the cluster: a read, or one
	// compare-and-swap attempt; 0 means DefaultTimeout.
	Timeout time.Duration
	// Attempts bounds the compare-and-swap attempts of one write: after an
	// attempt of unknown outcome, or when the key was rewritten with the
	// anchor the writer expected, the write is attempted again; 0 means
	// DefaultAttempts.
	Attempts int
}

func (o *Options) orDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.DialTimeout <= 0 {
		r.DialTimeout = DefaultDialTimeout
	}
	if r.Timeout <= 0 {
		r.Timeout = DefaultTimeout
	}
	if r.Attempts <= 0 {
		r.Attempts = DefaultAttempts
	}
	return r
}

// Store is an audit.AnchorStore in one etcd key. It is safe for concurrent
// use; its writes are compare-and-swap on the key's mod revision, so they
// are also safe between processes.
type Store struct {
	client *clientv3.Client
	owned  bool // Close closes client
	// kv is client's key-value API; tests put a faulty network in between.
	kv       clientv3.KV
	key      string
	timeout  time.Duration
	attempts int

	mu sync.Mutex
	// last is the newest value this Store read or wrote. A write whose old
	// is that anchor goes straight to its compare-and-swap, one round trip
	// instead of two; if the hint is stale the compare fails and the Txn
	// reads the key, so it can cost a retry but never decide a write.
	last value
	// unknowns counts the attempts whose outcome was unknown.
	unknowns atomic.Int64
	// cluster, once ExpectCluster set it, is the only cluster ID an
	// answer may carry.
	cluster atomic.Uint64
}

var _ audit.AnchorStore = (*Store)(nil)

// Open connects to the cluster that addr names, with the TLS files and
// timeouts of opts. Without a user name it does not contact the cluster:
// the first Load or Store does, and reports a cluster it cannot reach.
// With one (etcd auth) it authenticates first, within the dial timeout,
// and a wrong password or an unreachable cluster is its error; it then
// asks the cluster whether auth is enabled, within Options.Timeout, and a
// cluster without auth is ErrAuthOff.
func Open(addr Address, opts *Options) (*Store, error) {
	if _, err := ParseAddress(addr.String()); err != nil {
		return nil, err
	}
	o := opts.orDefaults()
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	if (o.Username == "") != (o.Password == "") {
		return nil, fmt.Errorf("%w: a user name and a password go together", ErrBadAuth)
	}
	// The scheme decides TLS for each endpoint: with "http://" the client
	// would drop a TLS configuration, so name it explicitly either way.
	scheme := "http://"
	if tlsCfg != nil {
		scheme = "https://"
	}
	eps := make([]string, len(addr.Endpoints))
	for i, hp := range addr.Endpoints {
		eps[i] = scheme + hp
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: o.DialTimeout,
		TLS:         tlsCfg,
		Username:    o.Username,
		Password:    o.Password,
		// The receiver's stderr belongs to its own messages; every
		// failure comes back as an error.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcdanchor: %s: %w", addr, err)
	}
	if o.Username != "" {
		// etcd's client drops the user without a word on a cluster whose
		// auth is off: ask, with the user's own token.
		ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
		err := etcdauth.RequireEnabled(ctx, client)
		cancel()
		if err != nil {
			client.Close()
			return nil, fmt.Errorf("etcdanchor: %s: user %s: %w", addr, o.Username, err)
		}
	}
	return &Store{client: client, kv: client, owned: true, key: addr.Key, timeout: o.Timeout, attempts: o.Attempts}, nil
}

// New returns a Store on key through client, which the caller keeps and
// closes; only opts' Timeout and Attempts apply. The key follows
// ParseAddress's rules. If client authenticates as a user, New asks the
// cluster, within Options.Timeout, whether its auth is enabled, and a
// cluster without auth is ErrAuthOff, as with Open.
func New(client *clientv3.Client, key string, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("etcdanchor: nil client")
	}
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("%w: key %q: %v", ErrBadAddress, key, err)
	}
	o := opts.orDefaults()
	if client.Username != "" {
		ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
		err := etcdauth.RequireEnabled(ctx, client)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("etcdanchor: user %s: %w", client.Username, err)
		}
	}
	return &Store{client: client, kv: client, key: key, timeout: o.Timeout, attempts: o.Attempts}, nil
}

// Key returns the etcd key that holds the anchor.
func (s *Store) Key() string { return s.key }

// Location names the anchor by its etcd key (audit.Locator). The endpoints
// are left out: any member of the anchor's cluster serves the same key.
func (s *Store) Location() string { return "etcd:" + s.key }

// ClusterID returns the ID of the cluster that answers for the anchor's
// key, from a linearizable read (etcdcluster.ID) bounded by
// Options.Timeout. A receiver compares it with its store's cluster, and
// with the ID recorded when it was initialised: an address's text cannot
// say which cluster answers at it. After ExpectCluster, an answer from
// another cluster is ErrClusterMismatch.
func (s *Store) ClusterID(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	id, err := etcdcluster.ID(ctx, s.kv, s.key)
	if err != nil {
		return 0, fmt.Errorf("etcdanchor: etcd key %s: %w", s.key, err)
	}
	if err := s.checkCluster(id); err != nil {
		return 0, err
	}
	return id, nil
}

// ExpectCluster makes every later answer that names a cluster other than
// id fail with ErrClusterMismatch, before its content is used: a Store
// checked once against its recorded cluster stays on it, even if another
// cluster starts answering at the same address. Zero is ignored; a second
// call with another id does not move the Store to that cluster.
func (s *Store) ExpectCluster(id uint64) {
	if id != 0 {
		s.cluster.CompareAndSwap(0, id)
	}
}

// checkCluster refuses an answer from a cluster other than the expected
// one, once there is one.
func (s *Store) checkCluster(id uint64) error {
	if want := s.cluster.Load(); want != 0 && id != want {
		return fmt.Errorf("%w: etcd key %s: cluster %s answered, the anchor's cluster is %s", ErrClusterMismatch, s.key,
			clusterid.Format(id), clusterid.Format(want))
	}
	return nil
}

// Close closes the connection if Open made it.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.client.Close()
}

// Load returns the anchor the key holds, read linearizably: a member cut
// off from the majority does not answer with an old one. An absent key is
// audit.ErrAnchorMissing and a value that is not a canonical anchor is
// audit.ErrBadAnchor. Load never writes.
func (s *Store) Load() (audit.SignedCheckpoint, error) {
	return s.LoadContext(context.Background())
}

// LoadContext is Load under ctx.
func (s *Store) LoadContext(ctx context.Context) (audit.SignedCheckpoint, error) {
	v, err := s.read(ctx)
	if err != nil {
		return audit.SignedCheckpoint{}, err
	}
	s.remember(v)
	if v.cur == nil {
		return audit.SignedCheckpoint{}, fmt.Errorf("%w: etcd key %s", audit.ErrAnchorMissing, s.key)
	}
	return *v.cur, nil
}

// Store implements audit.AnchorStore.Store: it replaces old by next if the
// key holds old (nil: if the key is absent), as one compare-and-swap on the
// key's mod revision, and returns once a majority of the members has
// committed it (etcd fsyncs its log before it answers). A value that is
// not an anchor is never overwritten. An error that wraps
// ErrOutcomeUnknown leaves the key holding old or next; see the package
// documentation.
func (s *Store) Store(old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	return s.StoreContext(context.Background(), old, next)
}

// StoreContext is Store under ctx.
func (s *Store) StoreContext(ctx context.Context, old *audit.SignedCheckpoint, next audit.SignedCheckpoint) error {
	return s.swap(ctx, old, next, false)
}

// Supersede implements audit.AnchorStore.Supersede.
func (s *Store) Supersede(old, next audit.SignedCheckpoint) error {
	return s.SupersedeContext(context.Background(), old, next)
}

// SupersedeContext is Supersede under ctx.
func (s *Store) SupersedeContext(ctx context.Context, old, next audit.SignedCheckpoint) error {
	return s.swap(ctx, &old, next, true)
}

// value is what the key held at a revision: the anchor (nil if the key was
// absent), its bytes and the key's mod revision (0 if absent).
type value struct {
	cur *audit.SignedCheckpoint
	raw []byte
	rev int64
}

func (s *Store) read(ctx context.Context) (value, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.kv.Get(ctx, s.key)
	if err != nil {
		return value{}, fmt.Errorf("etcdanchor: reading etcd key %s: %w", s.key, err)
	}
	if err := s.checkCluster(headerCluster(resp.Header)); err != nil {
		return value{}, err
	}
	return s.decode(resp.Kvs)
}

// decode checks a range answer for the key and parses its value.
func (s *Store) decode(kvs []*mvccpb.KeyValue) (value, error) {
	switch {
	case len(kvs) == 0:
		return value{}, nil
	case len(kvs) > 1 || string(kvs[0].Key) != s.key:
		// A point read answers with the key itself or nothing; anything
		// else is not an answer to trust.
		return value{}, fmt.Errorf("%w: etcd answered a read of key %s with %d other keys", audit.ErrBadAnchor, s.key, len(kvs))
	}
	kv := kvs[0]
	sc, err := audit.ParseAnchor(kv.Value)
	if err != nil {
		return value{}, fmt.Errorf("etcd key %s at revision %d: %w", s.key, kv.ModRevision, err)
	}
	return value{cur: &sc, raw: kv.Value, rev: kv.ModRevision}, nil
}

// swap writes next over old. Each attempt is one Txn: if the key's mod
// revision is the one just read, put next, else read the key. An attempt
// that fails the compare decides again on the value the Txn read. An
// attempt of unknown outcome is repeated as it was: the compare makes it
// take effect at most once, so either the repeat lands, or the Txn finds
// the key changed and its value says whether the first attempt landed.
func (s *Store) swap(ctx context.Context, old *audit.SignedCheckpoint, next audit.SignedCheckpoint, supersede bool) error {
	text, err := next.MarshalAnchor()
	if err != nil {
		return err
	}
	v, hinted := s.hint(old)
	if !hinted {
		if v, err = s.read(ctx); err != nil {
			// Nothing was written; a value that is not an anchor is
			// evidence and is never overwritten.
			return err
		}
	}
	var unknown error // the last attempt's outcome, if it is unknown
	for attempt := 1; ; attempt++ {
		if unknown != nil && bytes.Equal(v.raw, text) {
			// An attempt whose answer was lost took effect.
			return nil
		}
		if err := checkSwap(v.cur, old, &next, supersede); err != nil {
			if hinted {
				// Refuse only on what the key holds, not on a hint.
				hinted = false
				if v, err = s.read(ctx); err != nil {
					return err
				}
				attempt--
				continue
			}
			return fmt.Errorf("etcd key %s: %w", s.key, err)
		}
		if v.cur != nil && *v.cur == next {
			return nil
		}
		if attempt > s.attempts {
			if unknown != nil {
				return fmt.Errorf("%w: etcd key %s: writing seq %d, %d attempts: %w", ErrOutcomeUnknown, s.key, next.Seq, s.attempts, unknown)
			}
			return fmt.Errorf("%w: etcd key %s was rewritten %d times during one write", audit.ErrWriteConflict, s.key, s.attempts)
		}
		if unknown != nil {
			if err := sleep(ctx, time.Duration(attempt)*50*time.Millisecond); err != nil {
				return fmt.Errorf("%w: etcd key %s: writing seq %d: %w (then %w)", ErrOutcomeUnknown, s.key, next.Seq, unknown, err)
			}
		}
		resp, err := s.txn(ctx, v.rev, v.raw, text)
		switch {
		case err != nil && unknown == nil && notApplied(err):
			return fmt.Errorf("etcdanchor: writing etcd key %s: %w", s.key, err)
		case err != nil:
			unknown = err
			s.unknowns.Add(1)
			continue
		}
		if err := s.checkCluster(headerCluster(resp.Header)); err != nil {
			// Another cluster took the write: the expected one did not,
			// and this one is not the anchor.
			return err
		}
		switch {
		case resp.Succeeded:
			// A Txn of one put gives the key the Txn's revision.
			s.remember(value{cur: &next, raw: text, rev: resp.Header.Revision})
			return nil
		}
		if len(resp.Responses) != 1 || resp.Responses[0].GetResponseRange() == nil {
			return fmt.Errorf("etcdanchor: writing etcd key %s: etcd answered the compare with %d responses", s.key, len(resp.Responses))
		}
		if v, err = s.decode(resp.Responses[0].GetResponseRange().Kvs); err != nil {
			return err
		}
		hinted = false
		s.remember(v)
		// The key was read again, and it said what it holds: the answer
		// of the attempt before, if it was lost, no longer matters.
		if !bytes.Equal(v.raw, text) {
			unknown = nil
		}
	}
}

// headerCluster returns the cluster ID of an answer's header, 0 if it has
// none (which no expected cluster matches).
func headerCluster(h *etcdserverpb.ResponseHeader) uint64 {
	if h == nil {
		return 0
	}
	return h.ClusterId
}

// hint returns the value last seen if it holds old.
func (s *Store) hint(old *audit.SignedCheckpoint) (value, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old == nil || s.last.cur == nil || *s.last.cur != *old {
		return value{}, false
	}
	return s.last, true
}

// remember keeps v as the hint if it is newer than the one kept: writes
// that finish out of order must not bring an older one back.
func (s *Store) remember(v value) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v.cur != nil && v.rev > s.last.rev {
		s.last = v
	}
}

// txn puts text at the key if its mod revision is rev (0: the key is
// absent) and it holds cur, or else reads the key. The value is compared
// too: a revision remembered from an earlier read can recur with another
// value once the anchor's own cluster was restored from a snapshot.
func (s *Store) txn(ctx context.Context, rev int64, cur, text []byte) (*clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.key), "=", rev)}
	if rev != 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.Value(s.key), "=", string(cur)))
	}
	return s.kv.Txn(ctx).
		If(cmps...).
		Then(clientv3.OpPut(s.key, string(text))).
		Else(clientv3.OpGet(s.key)).
		Commit()
}

// notApplied reports whether err proves that a write was refused before it
// could take effect: the request was malformed, too large, or not
// permitted. Every other failure, a timeout, a lost leader or connection,
// leaves the outcome unknown.
func notApplied(err error) bool {
	var code codes.Code
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
	} else {
		return false
	}
	switch code {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.ResourceExhausted, codes.FailedPrecondition:
		return true
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
