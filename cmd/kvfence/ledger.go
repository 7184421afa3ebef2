package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/reqwire"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/ledger"
)

// Environment variables of the ledger commands. They differ from the
// receiver's: the ledger is a separate file with its own anchor.
const (
	envLedger       = "KVFENCE_LEDGER"
	envLedgerAnchor = "KVFENCE_LEDGER_ANCHOR"
	envLedgerKey    = "KVFENCE_LEDGER_KEY"
	// envLedgerEtcd and envLedgerEtcdPrefix put the ledger on etcd.
	envLedgerEtcd       = "KVFENCE_LEDGER_ETCD"
	envLedgerEtcdPrefix = "KVFENCE_LEDGER_ETCD_PREFIX"
	// envLedgerEtcdUser and envLedgerEtcdPasswordFile authenticate to it.
	envLedgerEtcdUser         = "KVFENCE_LEDGER_ETCD_USER"
	envLedgerEtcdPasswordFile = "KVFENCE_LEDGER_ETCD_PASSWORD_FILE"
	// envLedgerAnchorEtcdUser and envLedgerAnchorEtcdPasswordFile
	// authenticate to the cluster of the ledger's etcd anchor, as the
	// ledger's own user there.
	envLedgerAnchorEtcdUser         = "KVFENCE_LEDGER_ANCHOR_ETCD_USER"
	envLedgerAnchorEtcdPasswordFile = "KVFENCE_LEDGER_ANCHOR_ETCD_PASSWORD_FILE"
)

// defaultLedgerPrefix is the ledger's etcd prefix unless --etcd-prefix
// says otherwise: apart from the receiver's default, /kvfence/.
const defaultLedgerPrefix = "/kvfence-ledger/"

// LedgerCommand runs the execution ledger's subcommands: approvals and
// claims, kept apart from the receiver. Nothing here authorises a write at
// the receiver.
type LedgerCommand struct{ m *Main }

// ledgerFlags holds the flags every ledger subcommand shares.
type ledgerFlags struct {
	name        string
	path        string
	anchor      string
	anchorEtcd  anchorEtcdFlags
	etcd        etcdFlags // --etcd: the ledger on etcd instead of --ledger
	etcdPrefix  string
	key         string
	lockTimeout time.Duration
	json        bool
	// witness are the ledger's witnesses (KVFENCE_LEDGER_WITNESS*), and
	// witnessErr what resolving them refused, reported by require.
	witness    witnessFlags
	witnessErr error
}

func (f *ledgerFlags) register(fs *flag.FlagSet) {
	f.witness = witnessFlags{ledger: true}
	f.witness.register(fs)
	fs.StringVar(&f.path, "ledger", "", "")
	fs.StringVar(&f.anchor, "anchor", "", "")
	f.anchorEtcd.register(fs)
	f.etcd.register(fs)
	fs.StringVar(&f.etcdPrefix, "etcd-prefix", defaultLedgerPrefix, "")
	fs.StringVar(&f.key, "key", "", "")
	lockTimeoutVar(fs, &f.lockTimeout, ledger.DefaultLockTimeout)
	fs.BoolVar(&f.json, "json", false, "")
}

func (f *ledgerFlags) resolve(fs *flag.FlagSet, getenv func(string) string) {
	for _, v := range []struct {
		name, env string
		dst       *string
	}{{"ledger", envLedger, &f.path}, {"anchor", envLedgerAnchor, &f.anchor}, {"key", envLedgerKey, &f.key},
		{"etcd", envLedgerEtcd, &f.etcd.urls}, {"etcd-prefix", envLedgerEtcdPrefix, &f.etcdPrefix},
		{"etcd-user", envLedgerEtcdUser, &f.etcd.user}, {"etcd-password-file", envLedgerEtcdPasswordFile, &f.etcd.passwordFile},
		{"anchor-etcd-user", envLedgerAnchorEtcdUser, &f.anchorEtcd.user},
		{"anchor-etcd-password-file", envLedgerAnchorEtcdPasswordFile, &f.anchorEtcd.passwordFile}} {
		if !isSet(fs, v.name) {
			if e := getenv(v.env); e != "" || v.name != "etcd-prefix" {
				*v.dst = e
			}
		}
	}
	f.witnessErr = f.witness.resolve(fs, f.name, getenv)
}

// require checks the flags that every write needs (and show without
// --anchor does not).
func (f *ledgerFlags) require(write bool) error {
	if f.witnessErr != nil {
		return f.witnessErr
	}
	if f.witness.on() && f.anchor == "" {
		// The witnesses are asked only where the anchor is checked.
		return witnessUsage(f.name, "--witness needs --anchor: the witnesses are asked where the ledger is checked against its anchor")
	}
	if f.path != "" && f.etcd.on() {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --ledger and --etcd both name the ledger's store (flags or %s, %s)", f.name, envLedger, envLedgerEtcd),
			hint: "give one of them"}
	}
	if err := f.etcd.check(f.name); err != nil {
		return err
	}
	if f.etcd.on() {
		if err := checkEtcdPrefix(f.etcdPrefix); err != nil {
			return &usageError{msg: fmt.Sprintf("kvfence %s: --etcd-prefix %q: %v", f.name, f.etcdPrefix, err), hint: "kvfence " + f.name + " -h"}
		}
	} else if f.path == "" {
		return missingFlag(f.name, "ledger", envLedger)
	}
	if err := f.anchorEtcd.check(f.name, f.anchor); err != nil {
		return err
	}
	if f.anchor != "" && !isEtcdAnchor(f.anchor) && filepath.Clean(f.anchor) == filepath.Clean(f.path) {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --anchor names the ledger file; the anchor must be a separate file", f.name)}
	}
	if !write {
		return nil
	}
	if f.anchor == "" {
		return missingFlag(f.name, "anchor", envLedgerAnchor)
	}
	if f.key == "" {
		return missingFlag(f.name, "key", envLedgerKey)
	}
	return nil
}

func (f *ledgerFlags) open(write bool) (*ledger.Ledger, error) {
	opts := &ledger.Options{LockTimeout: f.lockTimeout, ReadOnly: !write}
	var err error
	opts.WitnessFaults = f.witness.faults
	if opts.Witnesses, opts.WitnessQuorum, err = f.witness.load(f.name); err != nil {
		return nil, err
	}
	if f.anchor != "" {
		if opts.Anchor, err = f.anchorEtcd.open(f.name, f.anchor); err != nil {
			return nil, err
		}
	}
	if write {
		priv, err := loadPrivate(f.key)
		if err != nil {
			return nil, err
		}
		opts.Key = priv
	}
	if f.etcd.on() {
		e, err := f.engine()
		if err != nil {
			return nil, err
		}
		return ledger.OpenEngine(e, opts)
	}
	return ledger.Open(f.path, opts)
}

// engine connects to --etcd and returns the engine on --etcd-prefix.
func (f *ledgerFlags) engine() (engine.Engine, error) {
	cli, err := f.etcd.client(f.name)
	if err != nil {
		return nil, err
	}
	e, err := etcdengine.New(cli, &etcdengine.Options{Prefix: f.etcdPrefix, MaxTxnOps: f.etcd.maxTxnOps})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("kvfence %s: %w", f.name, err)
	}
	if err := f.anchorEtcd.checkApart(f.name, e); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// store names the ledger's store in output: the file, or the etcd prefix.
func (f *ledgerFlags) store() string {
	if f.etcd.on() {
		return "etcd " + f.etcdPrefix
	}
	return f.path
}

// ledgerSub is one ledger subcommand: its flags, whether it writes, and
// what it does with the open ledger.
type ledgerSub struct {
	write bool
	// flags registers the subcommand's flags and returns check, which
	// validates them before the ledger is opened (a usage error writes
	// nothing and takes no lock), and run.
	flags func(fs *flag.FlagSet) (check func() error, run func(l *ledger.Ledger, ctx context.Context) (any, error))
}

// Run runs the command.
func (c *LedgerCommand) Run(ctx context.Context, args []string) (err error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && isHelpFlag(args[0]) {
			c.Usage()
			return flag.ErrHelp
		}
		return &usageError{msg: "kvfence ledger: missing subcommand", hint: "kvfence ledger -h"}
	}
	name := args[0]
	if name == "receiver" {
		// Two words name it: receiver add, receiver list.
		if len(args) < 2 || strings.HasPrefix(args[1], "-") {
			if len(args) > 1 && isHelpFlag(args[1]) {
				c.Usage()
				return flag.ErrHelp
			}
			return &usageError{msg: "kvfence ledger receiver: missing subcommand (add or list)", hint: "kvfence ledger -h"}
		}
		name, args = "receiver "+args[1], args[1:]
	}
	switch name {
	case "init":
		return c.init(ctx, args[1:])
	case "verify-chain":
		return c.verifyChain(ctx, args[1:])
	case "events":
		return c.events(ctx, args[1:])
	}
	sub, ok := ledgerSubs(c.m)[name]
	if !ok {
		return &usageError{msg: fmt.Sprintf("kvfence ledger %s: unknown subcommand", name), hint: "kvfence ledger -h"}
	}
	lf := ledgerFlags{name: "ledger " + name}
	fs := newFlagSet(lf.name)
	lf.register(fs)
	check, run := sub.flags(fs)
	if err := parseFlags(fs, c.Usage, args[1:], 0); err != nil {
		return err
	}
	lf.resolve(fs, c.m.Getenv)
	if err := lf.require(sub.write); err != nil {
		return err
	}
	if err := check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l, err := lf.open(sub.write)
	if err != nil {
		return ledgerHint(err, lf)
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	out, err := run(l, ctx)
	if err != nil {
		return err
	}
	if lf.json {
		return writeJSON(c.m.Stdout, out)
	}
	return printLedger(c.m, out)
}

// ledgerHint adds the ledger's own next step to an error from opening it.
func ledgerHint(err error, lf ledgerFlags) error {
	switch {
	case errors.Is(err, ledger.ErrBadFormat) && !lf.etcd.on() && isReceiverFile(lf.path, lf.lockTimeout):
		return withHint(fmt.Errorf("kvfence %s: %s is a receiver database, not an execution ledger: %w", lf.name, lf.path, err),
			"the ledger commands take the ledger file (kvfence ledger init --ledger FILE); for this database use "+
				"the receiver's commands, e.g. kvfence verify-chain --db "+lf.path+" --anchor ANCHOR --pub RECEIVER.pub")
	case errors.Is(err, audit.ErrRollbackDetected), errors.Is(err, audit.ErrForkDetected):
		return withHint(err, "the ledger file is older than its anchor or disagrees with it: a backup may have been "+
			"restored over it; its approvals and claims cannot be trusted; find the newest ledger file")
	case errors.Is(err, ledger.ErrNotInitialized):
		return withHint(err, "kvfence ledger init --ledger FILE --anchor FILE --key FILE --id LEDGER_ID, or check --ledger / KVFENCE_LEDGER")
	case errors.Is(err, ledger.ErrStorageBusy):
		return withHint(err, "wait for the other process to release the ledger, or raise --lock-timeout")
	case errors.Is(err, ledger.ErrKeyMismatch):
		return withHint(err, "pass the ledger's own private key, the one given to kvfence ledger init")
	}
	return err
}

// init creates a ledger file and its anchor.
func (c *LedgerCommand) init(ctx context.Context, args []string) error {
	lf := ledgerFlags{name: "ledger init"}
	fs := newFlagSet(lf.name)
	lf.register(fs)
	id := fs.String("id", "", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	lf.resolve(fs, c.m.Getenv)
	for _, name := range []string{"witness", "witness-pub", "witness-quorum", "witness-ca"} {
		if isSet(fs, name) {
			// Init signs the first checkpoint alone; the witnesses first
			// see the ledger at its first write.
			return witnessUsage(lf.name, "--"+name+" is for the commands that write or check the ledger, not init")
		}
	}
	lf.witness, lf.witnessErr = witnessFlags{ledger: true}, nil
	if err := lf.require(true); err != nil {
		return err
	}
	if err := require(lf.name, [2]string{"id", *id}); err != nil {
		return err
	}
	priv, err := loadPrivate(lf.key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	anchor, err := lf.anchorEtcd.open(lf.name, lf.anchor)
	if err != nil {
		return err
	}
	initOpts := &ledger.InitOptions{LedgerID: *id, Key: priv, Anchor: anchor}
	if lf.etcd.on() {
		e, eerr := lf.engine()
		if eerr != nil {
			return eerr
		}
		err = ledger.InitEngine(e, initOpts)
		e.Close()
	} else {
		err = ledger.Init(lf.path, initOpts)
	}
	if err != nil {
		return err
	}
	out := ledgerInitJSON{Ledger: *id, File: lf.store(), Anchor: lf.anchor, PublicKey: publicLine(priv.Public().(ed25519.PublicKey))}
	if lf.json {
		return writeJSON(c.m.Stdout, out)
	}
	return printLedger(c.m, out)
}

// ledgerSubs returns the subcommands that open an existing ledger.
func ledgerSubs(m *Main) map[string]ledgerSub {
	type runFunc = func(*ledger.Ledger, context.Context) (any, error)
	return map[string]ledgerSub{
		"approve": {write: true, flags: func(fs *flag.FlagSet) (func() error, runFunc) {
			action, approver, decision := fs.String("action", "", ""), fs.String("approver", "", ""), fs.String("decision", "", "")
			reqFile, digest := fs.String("request", "", ""), fs.String("request-sha256", "", "")
			ttl := fs.Duration("ttl", time.Hour, "")
			var boundaryArgs stringList
			fs.Var(&boundaryArgs, "boundary", "")
			var sum [32]byte
			var request []byte
			var bounds []ledger.Boundary
			check := func() error {
				if err := require("ledger approve", [2]string{"action", *action}, [2]string{"approver", *approver}); err != nil {
					return err
				}
				bounds = bounds[:0]
				for _, b := range boundaryArgs {
					recv, scope, ok := strings.Cut(b, ":")
					if !ok || recv == "" || scope == "" {
						return &usageError{msg: fmt.Sprintf("kvfence ledger approve: --boundary %q: want RECEIVER:SCOPE", b),
							hint: "name a receiver registered with kvfence ledger receiver add, e.g. --boundary orders:payments"}
					}
					bounds = append(bounds, ledger.Boundary{Receiver: recv, Scope: scope})
				}
				if *ttl <= 0 {
					return usageErrorf("kvfence ledger approve: --ttl must be positive")
				}
				switch {
				case (*reqFile == "") == (*digest == ""):
					return usageErrorf("kvfence ledger approve: give exactly one of --request and --request-sha256")
				case *reqFile != "":
					b, err := m.readInput(*reqFile)
					if err != nil {
						return err
					}
					// What the receiver would refuse is a mistake in the
					// command line's input: nothing is approved.
					if _, err := kvfence.DecodeRequest(b, reqwire.MaxSize); err != nil {
						return &usageError{msg: fmt.Sprintf("kvfence ledger approve: --request %s: %v", *reqFile, err),
							hint: "kvfence request build writes a request file"}
					}
					// The ledger itself checks that the request names
					// --action, and binds its digest.
					request = b
				default:
					b, err := hex.DecodeString(*digest)
					if err != nil || len(b) != len(sum) {
						return usageErrorf("kvfence ledger approve: --request-sha256 must be 64 hex digits")
					}
					copy(sum[:], b)
				}
				return nil
			}
			return check, func(l *ledger.Ledger, ctx context.Context) (any, error) {
				a, err := l.Approve(ctx, ledger.ApproveRequest{Action: *action, Request: request, RequestSHA256: sum,
					Approver: *approver, Decision: *decision, TTL: *ttl, Boundaries: bounds})
				if errors.Is(err, ledger.ErrUnknownReceiver) {
					return nil, withHint(err, "register it first: kvfence ledger receiver add --name N --server URL --receiver-id ID "+
						"--receiver-pub FILE --operator O; kvfence ledger receiver list shows the registered ones")
				}
				if errors.Is(err, ledger.ErrActionMismatch) {
					return nil, withHint(err, "approve the request under the action it names, or build the request "+
						"for this action (kvfence request build --action "+*action+")")
				}
				if err != nil {
					return nil, err
				}
				return approvalView(a), nil
			}
		}},
		"receiver add": {write: true, flags: func(fs *flag.FlagSet) (func() error, runFunc) {
			name, server, receiverID := fs.String("name", "", ""), fs.String("server", "", ""), fs.String("receiver-id", "", "")
			db, recvAnchor := fs.String("db", "", ""), fs.String("receiver-anchor", "", "")
			pubFile, operator := fs.String("receiver-pub", "", ""), fs.String("operator", "", "")
			var req ledger.AddReceiverRequest
			check := func() error {
				const cmd = "ledger receiver add"
				if err := require(cmd, [2]string{"name", *name}, [2]string{"receiver-pub", *pubFile}, [2]string{"operator", *operator}); err != nil {
					return err
				}
				switch {
				case (*server == "") == (*db == ""):
					return usageErrorf("kvfence %s: give exactly one of --server URL (a served receiver) and --db DB (a receiver on this host)", cmd)
				case *server != "":
					if *recvAnchor != "" {
						return usageErrorf("kvfence %s: --receiver-anchor goes with --db, not with --server", cmd)
					}
					if err := require(cmd, [2]string{"receiver-id", *receiverID}); err != nil {
						return err
					}
				default:
					if *recvAnchor == "" {
						return &usageError{msg: fmt.Sprintf("kvfence %s: --db needs --receiver-anchor, the receiver's anchor", cmd),
							hint: "--anchor is the ledger's own anchor; the receiver's goes in --receiver-anchor"}
					}
					if isEtcdAnchor(*recvAnchor) {
						return usageErrorf("kvfence %s: --receiver-anchor: a receiver on this host is registered with its anchor file", cmd)
					}
				}
				pub, err := keyfile.LoadPublic(*pubFile)
				if err != nil {
					return fmt.Errorf("kvfence %s: --receiver-pub %s: %w", cmd, *pubFile, err)
				}
				if *db != "" {
					// The ledger is read from other directories than this
					// one (contain, verify): a relative path would name
					// another file there, or none.
					if *db, err = filepath.Abs(*db); err != nil {
						return fmt.Errorf("kvfence %s: --db: %w", cmd, err)
					}
					if *recvAnchor, err = filepath.Abs(*recvAnchor); err != nil {
						return fmt.Errorf("kvfence %s: --receiver-anchor: %w", cmd, err)
					}
				}
				req = ledger.AddReceiverRequest{Name: *name, Server: *server, DB: *db, Anchor: *recvAnchor, ReceiverID: *receiverID,
					PublicKey: pub, Operator: *operator}
				if *db == "" {
					return nil
				}
				// The id and key are read from the receiver itself, checked
				// against its anchor: a key the database does not record
				// would pin a boundary that no acknowledgment can satisfy,
				// or one that someone else's key satisfies.
				r, err := kvfence.Open(*db, &kvfence.Options{ReadOnly: true,
					Anchor: audit.FileAnchor{Path: *recvAnchor}, Warn: func(string) {}})
				if err != nil {
					return fmt.Errorf("kvfence %s: --db %s: %w", cmd, *db, err)
				}
				defer r.Close()
				if !pub.Equal(r.PublicKey()) {
					return withHint(fmt.Errorf("kvfence %s: --receiver-pub %s: %w", cmd, *pubFile, errPubMismatch),
						"pass the public key that kvfence init wrote for this receiver")
				}
				if *receiverID != "" && *receiverID != r.ID() {
					return usageErrorf("kvfence %s: --receiver-id %q, but the receiver in %s is %q", cmd, *receiverID, *db, r.ID())
				}
				req.ReceiverID = r.ID()
				return nil
			}
			return check, func(l *ledger.Ledger, ctx context.Context) (any, error) {
				r, err := l.AddReceiver(ctx, req)
				if errors.Is(err, ledger.ErrReceiverKeyPinned) {
					return nil, withHint(err, "each receiver has its own key; check --receiver-pub, or kvfence ledger receiver list")
				}
				if err != nil {
					return nil, err
				}
				return receiverView(r), nil
			}
		}},
		"receiver list": {write: false, flags: func(fs *flag.FlagSet) (func() error, runFunc) {
			return func() error { return nil }, func(l *ledger.Ledger, ctx context.Context) (any, error) {
				rs, err := l.Receivers()
				if err != nil {
					return nil, err
				}
				out := ledgerReceiversJSON{Ledger: l.ID(), Receivers: []ledgerReceiverJSON{}}
				for _, r := range rs {
					out.Receivers = append(out.Receivers, receiverView(r))
				}
				return out, nil
			}
		}},
		"claim": {write: true, flags: func(fs *flag.FlagSet) (func() error, runFunc) {
			action, worker, lease := fs.String("action", "", ""), fs.String("worker", "", ""), fs.Duration("lease", ledger.DefaultLease, "")
			check := func() error {
				if err := require("ledger claim", [2]string{"action", *action}, [2]string{"worker", *worker}); err != nil {
					return err
				}
				return checkLease("ledger claim", *lease)
			}
			return check, func(l *ledger.Ledger, ctx context.Context) (any, error) {
				return claimResult(l.Claim(ctx, ledger.ClaimRequest{Action: *action, Worker: *worker, Lease: *lease}))
			}
		}},
		"heartbeat": {write: true, flags: func(fs *flag.FlagSet) (func() error, runFunc) {
			ref, worker, lease := fs.String("claim", "", ""), fs.String("worker", "", ""), fs.Duration("lease", ledger.DefaultLease, "")
			check := func() error {
				if err := require("ledger heartbeat", [2]string{"claim", *ref}, [2]string{"worker", *worker}); err != nil {
					return err
				}
				return checkLease("ledger heartbeat", *lease)
			}
			return check, func(l *ledger.Ledger, ctx context.Context) (any, error) {
				return claimResult(l.Heartbeat(ctx, *ref, *worker, *lease))
			}
		}},
		"dispatch": {write: true, flags: func(fs *flag.FlagSet) (func() error, runFunc) {
			ref, worker := fs.String("claim", "", ""), fs.String("worker", "", "")
			check := func() error {
				return require("ledger dispatch", [2]string{"claim", *ref}, [2]string{"worker", *worker})
			}
			return check, func(l *ledger.Ledger, ctx context.Context) (any, error) {
				return claimResult(l.Dispatch(ctx, *ref, *worker))
			}
		}},
		"finish": {write: true, flags: func(fs *flag.FlagSet) (func() error, runFunc) {
			ref, worker, outcome := fs.String("claim", "", ""), fs.String("worker", "", ""), fs.String("outcome", "", "")
			check := func() error {
				if err := require("ledger finish", [2]string{"claim", *ref}, [2]string{"worker", *worker}, [2]string{"outcome", *outcome}); err != nil {
					return err
				}
				return checkOutcome("ledger finish", *outcome)
			}
			return check, func(l *ledger.Ledger, ctx context.Context) (any, error) {
				return claimResult(l.Finish(ctx, *ref, *worker, ledger.State(*outcome)))
			}
		}},
		"takeover": {write: true, flags: func(fs *flag.FlagSet) (func() error, runFunc) {
			action, operator, worker := fs.String("action", "", ""), fs.String("operator", "", ""), fs.String("worker", "", "")
			reason, lease := fs.String("reason", "", ""), fs.Duration("lease", ledger.DefaultLease, "")
			check := func() error {
				if err := require("ledger takeover", [2]string{"action", *action}, [2]string{"operator", *operator},
					[2]string{"worker", *worker}, [2]string{"reason", *reason}); err != nil {
					return err
				}
				return checkLease("ledger takeover", *lease)
			}
			return check, func(l *ledger.Ledger, ctx context.Context) (any, error) {
				return claimResult(l.Takeover(ctx, ledger.TakeoverRequest{Action: *action, Operator: *operator, Worker: *worker,
					Reason: *reason, Lease: *lease}))
			}
		}},
		"reconcile": {write: true, flags: func(fs *flag.FlagSet) (func() error, runFunc) {
			ref, operator, outcome := fs.String("claim", "", ""), fs.String("operator", "", ""), fs.String("outcome", "", "")
			check := func() error {
				if err := require("ledger reconcile", [2]string{"claim", *ref}, [2]string{"operator", *operator}, [2]string{"outcome", *outcome}); err != nil {
					return err
				}
				return checkOutcome("ledger reconcile", *outcome)
			}
			return check, func(l *ledger.Ledger, ctx context.Context) (any, error) {
				return claimResult(l.Reconcile(ctx, *ref, *operator, ledger.State(*outcome)))
			}
		}},
		"show": {write: false, flags: func(fs *flag.FlagSet) (func() error, runFunc) {
			action := fs.String("action", "", "")
			return func() error { return nil }, func(l *ledger.Ledger, ctx context.Context) (any, error) {
				var views []ledger.ActionView
				if *action != "" {
					v, err := l.Action(*action)
					if err != nil {
						return nil, err
					}
					views = []ledger.ActionView{v}
				} else {
					var err error
					if views, err = l.Actions(); err != nil {
						return nil, err
					}
				}
				out := ledgerShowJSON{Ledger: l.ID(), AuditSeq: l.Head().Seq, Actions: []ledgerActionJSON{}}
				now := time.Now()
				for _, v := range views {
					a := ledgerActionJSON{Action: v.Action, Live: v.Live, Claims: []ledgerClaimJSON{}}
					if v.Approval != nil {
						av := approvalView(*v.Approval)
						a.Approval = &av
					}
					for _, cl := range v.Claims {
						a.Claims = append(a.Claims, claimView(cl, now))
					}
					out.Actions = append(out.Actions, a)
				}
				return out, nil
			}
		}},
	}
}

func checkLease(cmd string, d time.Duration) error {
	if d < 0 || d > ledger.MaxLease {
		return usageErrorf("kvfence %s: --lease must be at most %s and not negative (0 means %s)", cmd, ledger.MaxLease, ledger.DefaultLease)
	}
	return nil
}

func checkOutcome(cmd, outcome string) error {
	if outcome != string(ledger.StateSucceeded) && outcome != string(ledger.StateFailed) {
		return usageErrorf("kvfence %s: --outcome must be succeeded or failed", cmd)
	}
	return nil
}

func claimResult(cl ledger.Claim, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return claimView(cl, time.Now()), nil
}

// The --json shapes of the ledger commands.
type (
	ledgerInitJSON struct {
		Ledger    string `json:"ledger"`
		File      string `json:"file"`
		Anchor    string `json:"anchor"`
		PublicKey string `json:"public_key"`
	}
	ledgerApprovalJSON struct {
		Action        string  `json:"action"`
		RequestSHA256 string  `json:"request_sha256"`
		ActionChecked bool    `json:"action_checked"`
		Approver      string  `json:"approver"`
		Decision      string  `json:"decision"`
		ApprovedAt    *string `json:"approved_at"`
		ExpiresAt     *string `json:"expires_at"`
		AuditSeq      uint64  `json:"audit_seq"`
		// Boundaries is empty, never absent, for an approval without any.
		Boundaries []ledgerBoundaryJSON `json:"boundaries"`
	}
	ledgerBoundaryJSON struct {
		Receiver string `json:"receiver"`
		Scope    string `json:"scope"`
	}
	ledgerReceiverJSON struct {
		Name           string  `json:"name"`
		Server         string  `json:"server"`
		DB             string  `json:"db"`
		Anchor         string  `json:"anchor"`
		ReceiverID     string  `json:"receiver_id"`
		PublicKey      string  `json:"public_key"`
		KeyFingerprint string  `json:"key_fingerprint"`
		AddedBy        string  `json:"added_by"`
		AddedAt        *string `json:"added_at"`
		AuditSeq       uint64  `json:"audit_seq"`
	}
	ledgerReceiversJSON struct {
		Ledger    string               `json:"ledger"`
		Receivers []ledgerReceiverJSON `json:"receivers"`
	}
	ledgerClaimJSON struct {
		Claim           string  `json:"claim"`
		Action          string  `json:"action"`
		Worker          string  `json:"worker"`
		Generation      uint64  `json:"generation"`
		State           string  `json:"state"`
		Resumed         bool    `json:"resumed"`
		ClaimedAt       *string `json:"claimed_at"`
		HeartbeatAt     *string `json:"heartbeat_at"`
		LeaseExpiresAt  *string `json:"lease_expires_at"`
		LeaseExpired    bool    `json:"lease_expired"`
		DispatchedAt    *string `json:"dispatched_at"`
		SettledAt       *string `json:"settled_at"`
		SupersededBy    string  `json:"superseded_by"`
		SupersededState string  `json:"superseded_state"`
		TakeoverBy      string  `json:"takeover_by"`
		TakeoverReason  string  `json:"takeover_reason"`
		ReconciledBy    string  `json:"reconciled_by"`
		ReconciledAt    *string `json:"reconciled_at"`
		AuditSeq        uint64  `json:"audit_seq"`
	}
	ledgerActionJSON struct {
		Action   string              `json:"action"`
		Approval *ledgerApprovalJSON `json:"approval"`
		Live     string              `json:"live_claim"`
		Claims   []ledgerClaimJSON   `json:"claims"`
	}
	ledgerShowJSON struct {
		Ledger   string             `json:"ledger"`
		AuditSeq uint64             `json:"audit_seq"`
		Actions  []ledgerActionJSON `json:"actions"`
	}
)

func approvalView(a ledger.Approval) ledgerApprovalJSON {
	v := ledgerApprovalJSON{Action: a.Action, RequestSHA256: hex.EncodeToString(a.RequestSHA256[:]),
		ActionChecked: a.ActionChecked, Approver: a.Approver,
		Decision: a.Decision, ApprovedAt: api.Time(a.ApprovedAt), ExpiresAt: api.Time(a.ExpiresAt), AuditSeq: a.AuditSeq,
		Boundaries: []ledgerBoundaryJSON{}}
	for _, b := range a.Boundaries {
		v.Boundaries = append(v.Boundaries, ledgerBoundaryJSON{Receiver: b.Receiver, Scope: b.Scope})
	}
	return v
}

func receiverView(r ledger.Receiver) ledgerReceiverJSON {
	return ledgerReceiverJSON{Name: r.Name, Server: r.Server, DB: r.DB, Anchor: r.Anchor, ReceiverID: r.ReceiverID,
		PublicKey: publicLine(r.PublicKey), KeyFingerprint: audit.KeyFingerprint(r.PublicKey).String(), AddedBy: r.AddedBy,
		AddedAt: api.Time(r.AddedAt), AuditSeq: r.AuditSeq}
}

// boundariesText lists an approval's boundaries on one line.
func boundariesText(bs []ledgerBoundaryJSON) string {
	if len(bs) == 0 {
		return "-"
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = b.Receiver + ":" + b.Scope
	}
	return strings.Join(parts, " ")
}

func claimView(c ledger.Claim, now time.Time) ledgerClaimJSON {
	return ledgerClaimJSON{Claim: c.Ref, Action: c.Action, Worker: c.Worker, Generation: c.Generation, State: string(c.State),
		Resumed: c.Resumed, ClaimedAt: api.Time(c.ClaimedAt), HeartbeatAt: api.Time(c.HeartbeatAt),
		LeaseExpiresAt: api.Time(c.LeaseExpiresAt), LeaseExpired: c.LeaseExpired(now), DispatchedAt: api.Time(c.DispatchedAt),
		SettledAt: api.Time(c.SettledAt), SupersededBy: c.SupersededBy, SupersededState: string(c.SupersededState),
		TakeoverBy: c.TakeoverBy, TakeoverReason: c.TakeoverReason, ReconciledBy: c.ReconciledBy,
		ReconciledAt: api.Time(c.ReconciledAt), AuditSeq: c.AuditSeq}
}

// printLedger writes a ledger result as text.
func printLedger(m *Main, v any) error {
	tw := newTable(m.Stdout)
	str := func(p *string) string {
		if p == nil {
			return "-"
		}
		return *p
	}
	claim := func(c ledgerClaimJSON) {
		fmt.Fprintf(tw, "claim\t%s\n", c.Claim)
		fmt.Fprintf(tw, "action\t%s\n", c.Action)
		fmt.Fprintf(tw, "worker\t%s\n", c.Worker)
		fmt.Fprintf(tw, "generation\t%d\n", c.Generation)
		state := c.State
		if c.Resumed {
			state += " (resumed: this worker's existing claim)"
		}
		fmt.Fprintf(tw, "state\t%s\n", state)
		// A settled claim has no lease; its time is settled_at.
		if c.LeaseExpiresAt != nil {
			lease := *c.LeaseExpiresAt
			if c.LeaseExpired {
				lease += " (expired; the claim stays live until an operator takes over)"
			}
			fmt.Fprintf(tw, "lease expires\t%s\n", lease)
		}
		if c.SettledAt != nil {
			fmt.Fprintf(tw, "settled at\t%s\n", *c.SettledAt)
		}
		if c.SupersededBy != "" {
			fmt.Fprintf(tw, "superseded by\t%s (by %s: %s; was %s)\n", c.SupersededBy, c.TakeoverBy, c.TakeoverReason, c.SupersededState)
		}
		if c.ReconciledBy != "" {
			fmt.Fprintf(tw, "reconciled\tby %s at %s\n", c.ReconciledBy, str(c.ReconciledAt))
		}
		fmt.Fprintf(tw, "audit seq\t%d\n", c.AuditSeq)
	}
	receiver := func(r ledgerReceiverJSON) {
		fmt.Fprintf(tw, "receiver\t%s\n", r.Name)
		if r.Server != "" {
			fmt.Fprintf(tw, "server\t%s\n", r.Server)
		} else {
			fmt.Fprintf(tw, "database\t%s (anchor %s)\n", r.DB, r.Anchor)
		}
		fmt.Fprintf(tw, "receiver id\t%s\n", r.ReceiverID)
		fmt.Fprintf(tw, "pinned key\t%s\n", r.KeyFingerprint)
		fmt.Fprintf(tw, "added\tby %s at %s\n", r.AddedBy, str(r.AddedAt))
		fmt.Fprintf(tw, "audit seq\t%d\n", r.AuditSeq)
	}
	switch v := v.(type) {
	case ledgerInitJSON:
		fmt.Fprintf(tw, "ledger\t%s\nfile\t%s\nanchor\t%s\npublic key\t%s\n", v.Ledger, v.File, v.Anchor, v.PublicKey)
	case ledgerApprovalJSON:
		fmt.Fprintf(tw, "action\t%s\nrequest sha256\t%s\naction checked\t%s\napprover\t%s\nexpires at\t%s\nboundaries\t%s\naudit seq\t%d\n",
			v.Action, v.RequestSHA256, actionChecked(v.ActionChecked), v.Approver, str(v.ExpiresAt), boundariesText(v.Boundaries), v.AuditSeq)
	case ledgerReceiverJSON:
		receiver(v)
	case ledgerReceiversJSON:
		fmt.Fprintf(tw, "ledger\t%s\n", v.Ledger)
		if len(v.Receivers) == 0 {
			fmt.Fprintf(tw, "receivers\tnone registered\n")
		}
		for _, r := range v.Receivers {
			fmt.Fprintln(tw)
			receiver(r)
		}
	case ledgerClaimJSON:
		claim(v)
	case ledgerShowJSON:
		fmt.Fprintf(tw, "ledger\t%s\naudit seq\t%d\n", v.Ledger, v.AuditSeq)
		for _, a := range v.Actions {
			fmt.Fprintf(tw, "\naction\t%s\n", a.Action)
			if a.Approval != nil {
				fmt.Fprintf(tw, "approved by\t%s, until %s\n", a.Approval.Approver, str(a.Approval.ExpiresAt))
				fmt.Fprintf(tw, "action checked\t%s\n", actionChecked(a.Approval.ActionChecked))
				fmt.Fprintf(tw, "boundaries\t%s\n", boundariesText(a.Approval.Boundaries))
			}
			fmt.Fprintf(tw, "live claim\t%s\n", orDash(a.Live))
			for _, c := range a.Claims {
				fmt.Fprintln(tw)
				claim(c)
			}
		}
	}
	return tw.Flush()
}

// actionChecked says in words whether the approval's action was checked
// against its request.
func actionChecked(ok bool) string {
	if ok {
		return "yes (the request names this action)"
	}
	return "no (approved by digest alone; the ledger could not read the request's action)"
}

// Usage prints the command's help.
func (c *LedgerCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence ledger <subcommand> --ledger FILE [--anchor FILE --key FILE] [arguments]

The execution ledger: which actions were approved and which worker holds
each one's claim. It is a separate file with its own anchor and key, and
it authorises nothing at the receiver: a claim never activates a grant.

Subcommands:

	init --id LEDGER_ID
	    Create the ledger file and its anchor.
	receiver add --name N (--server URL --receiver-id ID | --db DB
	        --receiver-anchor FILE) --receiver-pub FILE --operator O
	    Register a receiving boundary and pin its public key: only
	    acknowledgments that key signs, naming that receiver id, count.
	    --server is https://HOST:PORT or unix:///PATH. For a receiver on
	    this host, --db and its anchor are opened read-only: the id is
	    read from them, and a --receiver-pub other than the key the
	    database records is refused. A name registered already, or a key
	    pinned for another name (two boundaries signing with one key
	    could answer for each other), is refused with exit code 3.
	receiver list
	    Print the registered receivers and their pinned keys.
	approve --action A (--request REQ.cbor | --request-sha256 HEX)
	        --approver P [--ttl 1h] [--decision REF] [--boundary N:SCOPE ...]
	    Approve an action, bound to the digest of its exact request. With
	    --request, the request must name action A (else exit code 3) and
	    be well formed (else exit code 2); with --request-sha256 the
	    ledger cannot read the action, and the approval says so
	    ("action_checked": false). Each --boundary (repeatable) names a
	    scope at a registered receiver that the action's effects can
	    reach: kvfence contain holds every one of them after a takeover.
	claim --action A --worker W [--lease 30s]
	    Claim an approved action. A worker that restarted gets its own
	    live claim back ("resumed"). Another worker's claim is refused
	    (exit code 3) even after its lease expired: only takeover moves it.
	heartbeat --claim REF --worker W [--lease 30s]
	    Renew the claim's lease.
	dispatch --claim REF --worker W
	    Record that the request is being sent: claimed -> dispatched.
	finish --claim REF --worker W --outcome succeeded|failed
	    Settle the claim; succeeded needs a dispatched claim.
	takeover --action A --operator O --worker W --reason R [--lease 30s]
	    Supersede the action's live claim (it becomes uncertain) and give
	    the action a new claim for worker W.
	reconcile --claim REF --operator O --outcome succeeded|failed
	    Settle an uncertain claim once its effect is known.
	show [--action A]
	    Print approvals (with their boundaries) and claims (read-only;
	    checked against --anchor when it is given). A settled claim shows no lease: settled_at is
	    when it stopped being live (for a taken-over claim, the takeover),
	    reconciled_at when an operator reconciled it.
	events [--since SEQ] [--action A]
	    Print the ledger's audit chain, oldest first (read-only; checked
	    against --anchor when it is given). With --json,
	    {"ledger","events":[...]}, each entry as in kvfence observe events;
	    "decision" is the claim ref and "epoch" the claim's generation.
	verify-chain --anchor FILE --pub FILE [--max-age DURATION]
	    Check the ledger's whole audit chain against its anchor and the
	    ledger's public key from your own records, as kvfence verify-chain
	    does for a receiver; same report, --json shape and exit codes (0 ok,
	    4 a problem, 6 ok but an anchor slot damaged, 1 could not run).

Arguments of every subcommand:

	--ledger FILE
	    The ledger file. Defaults to $KVFENCE_LEDGER.
	--etcd URL[,URL...]
	    Keep the ledger on etcd instead of a file (not with --ledger;
	    defaults to $KVFENCE_LEDGER_ETCD), under --etcd-prefix P (default
	    /kvfence-ledger/, or $KVFENCE_LEDGER_ETCD_PREFIX).
`+usageEtcdTLS+`	--anchor FILE
	    The ledger's anchor file, kept apart from it (required to write;
	    defaults to $KVFENCE_LEDGER_ANCHOR). A restored or rewritten ledger
	    is refused with exit code 4.
	--anchor etcd://HOST:PORT/KEY, --anchor-etcd-* flags: see kvfence help etcd
	    The anchor in an etcd key instead of a file. The ledger's user
	    there defaults to $KVFENCE_LEDGER_ANCHOR_ETCD_USER and
	    $KVFENCE_LEDGER_ANCHOR_ETCD_PASSWORD_FILE.
	--key FILE
	    The ledger's private key (required to write; defaults to
	    $KVFENCE_LEDGER_KEY).
	--witness NAME=URL, --witness-pub NAME=FILE, --witness-quorum K,
	--witness-ca FILE
	    The witnesses that cosign the ledger's checkpoints, as for the
	    receiver's commands (kvfence hold -h), except for init: a write
	    is acknowledged once K cosigned it, and a ledger behind or beside
	    a witness is refused (exit 4). Defaults to $KVFENCE_LEDGER_WITNESS,
	    $KVFENCE_LEDGER_WITNESS_PUB, $KVFENCE_LEDGER_WITNESS_QUORUM and
	    $KVFENCE_LEDGER_WITNESS_CA.
	--lock-timeout DURATION
	    How long to wait for the ledger's lock (default 1s; 0 means do
	    not wait: try once); exit code 5.
	--json
	    Write one JSON document to stdout instead of text.

Refusals by the ledger's rules (claimed by another worker, superseded,
settled, not approved, wrong state, a request that names another action)
exit with code 3. Given a receiver database instead of a ledger file, the
ledger commands say so and name the receiver's commands.
`)
}
