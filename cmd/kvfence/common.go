package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/audit/etcdanchor"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// Environment variables consulted when the matching flag is not given.
const (
	envDB     = "KVFENCE_DB"
	envAnchor = "KVFENCE_ANCHOR"
	envKey    = "KVFENCE_KEY"
	// envAnchorEtcdUser and envAnchorEtcdPasswordFile authenticate to an
	// etcd anchor's cluster.
	envAnchorEtcdUser         = "KVFENCE_ANCHOR_ETCD_USER"
	envAnchorEtcdPasswordFile = "KVFENCE_ANCHOR_ETCD_PASSWORD_FILE"
)

// flagGroup selects which common flags a command accepts.
type flagGroup int

const (
	// withDB registers --db, --anchor, --pub and --lock-timeout.
	withDB flagGroup = 1 << iota
	// withKey registers --key.
	withKey
	// withoutLock leaves --lock-timeout out of withDB, for init, which
	// creates the file and so never waits for a lock.
	withoutLock
	// withoutPub leaves --pub out of withDB, for commands that take other
	// keys instead (admission new, recover).
	withoutPub
	// withoutWitnesses leaves the witness flags out of withDB, for
	// commands that do not check the database against its anchor or do
	// not open it at all (init, admission new, recover).
	withoutWitnesses
)

// commonFlags holds the flags shared by commands (docs/design.md §9).
type commonFlags struct {
	name string // the command, for messages: "scope create"
	// signKey is the receiver's key for a read-only command that signs
	// what it prints (observe receipt --proof signs the checkpoint note).
	signKey    ed25519.PrivateKey
	db         string
	anchor     string // the anchor file or etcd key, kept apart from the database (docs/design.md §7.3, §13)
	anchorEtcd anchorEtcdFlags
	etcd       etcdFlags // --etcd instead of --db (docs/design.md §13)
	etcdPrefix string
	// etcdPrefixSet says --etcd-prefix or its variable was given.
	etcdPrefixSet bool
	// reserved are the etcd prefixes no etcd target's key may lie under
	// besides the receiver's own: the ledger's, by default and as
	// $KVFENCE_LEDGER_ETCD_PREFIX names it, and the anchor's key.
	reserved    []string
	kube        kubeFlags // targets of kind kubernetes (docs/design.md §4.2)
	key         string
	pub         string
	lockTimeout time.Duration
	json        bool
	// witness are the witness flags (withDB without withoutWitnesses), and
	// witnessErr what resolving them refused: reported by checkAnchorPath,
	// before anything is read or opened.
	witness    witnessFlags
	witnessErr error
}

// register adds the selected common flags, and always --json, to fs.
func (c *commonFlags) register(fs *flag.FlagSet, g flagGroup) {
	if g&withDB != 0 {
		fs.StringVar(&c.db, "db", "", "")
		fs.StringVar(&c.anchor, "anchor", "", "")
		c.anchorEtcd.register(fs)
		c.etcd.register(fs)
		fs.StringVar(&c.etcdPrefix, "etcd-prefix", etcdengine.DefaultPrefix, "")
		c.kube.register(fs)
		if g&withoutPub == 0 {
			fs.StringVar(&c.pub, "pub", "", "")
		}
		if g&withoutLock == 0 {
			lockTimeoutVar(fs, &c.lockTimeout, kvfence.DefaultLockTimeout)
		}
		if g&withoutWitnesses == 0 {
			c.witness.register(fs)
		}
	}
	if g&withKey != 0 {
		fs.StringVar(&c.key, "key", "", "")
	}
	fs.BoolVar(&c.json, "json", false, "")
}

// resolve fills the flags that were not given from the environment. A flag
// given on the command line wins, even when it is given as empty.
func (c *commonFlags) resolve(fs *flag.FlagSet, getenv func(string) string) {
	for _, f := range []struct {
		name, env string
		dst       *string
	}{{"db", envDB, &c.db}, {"anchor", envAnchor, &c.anchor}, {"key", envKey, &c.key}, {"etcd", envEtcd, &c.etcd.urls},
		{"etcd-user", envEtcdUser, &c.etcd.user}, {"etcd-password-file", envEtcdPasswordFile, &c.etcd.passwordFile},
		{"anchor-etcd-user", envAnchorEtcdUser, &c.anchorEtcd.user},
		{"anchor-etcd-password-file", envAnchorEtcdPasswordFile, &c.anchorEtcd.passwordFile}} {
		if fs.Lookup(f.name) != nil && !isSet(fs, f.name) {
			*f.dst = getenv(f.env)
		}
	}
	c.kube.resolve(fs, getenv)
	c.witnessErr = c.witness.resolve(fs, c.name, getenv)
	if fs.Lookup("etcd-prefix") != nil {
		c.etcdPrefixSet = isSet(fs, "etcd-prefix")
		if p := getenv(envEtcdPrefix); !c.etcdPrefixSet && p != "" {
			c.etcdPrefix, c.etcdPrefixSet = p, true
		}
		c.reserved = []string{defaultLedgerPrefix}
		if p := getenv(envLedgerEtcdPrefix); p != "" {
			c.reserved = append(c.reserved, p)
		}
		if a, err := etcdanchor.ParseAddress(c.anchor); isEtcdAnchor(c.anchor) && err == nil {
			c.reserved = append(c.reserved, a.Key)
		}
	}
}

// usageDB documents the common flags of a command that writes: the anchor
// is required.
const usageDB = `	--db FILE
	    Receiver database. Defaults to $KVFENCE_DB.
	--anchor FILE
	    The receiver's anchor file (required; defaults to $KVFENCE_ANCHOR):
	    its latest signed checkpoint, kept apart from the database. The
	    database is checked against it before anything is written (a
	    restored or rewritten database exits with code 4), and it is moved
	    forward, durably, before the command returns. A missing anchor is
	    never recreated.
` + usageEtcdSee + usageKube + usagePubLock + usageWitness

// usageDBRead documents the common flags of an observation command: the
// anchor is optional.
const usageDBRead = `	--db FILE
	    Receiver database. Defaults to $KVFENCE_DB.
	--anchor FILE
	    The receiver's anchor file. Defaults to $KVFENCE_ANCHOR. If set,
	    a database that is older than its anchor or disagrees with it is
	    refused (exit code 4); without it nothing is checked against the
	    anchor and the output may describe a restored copy.
` + usageEtcdSee + usageKube + usagePubLock + usageWitness

const usagePubLock = `	--pub FILE
	    If set, refuse a receiver whose public key recorded at init
	    differs from this one (an ssh-ed25519 line).
` + usageLock

const usageLock = `	--lock-timeout DURATION
	    How long to wait for the database lock (default 1s; 0 means do
	    not wait: try once). A lock not obtained in time exits with code 5.
`

// noWait is the library's lock timeout for "do not wait": the lock is
// tried once. The libraries read 0 as their default timeout instead.
const noWait = -1

// lockTimeout is --lock-timeout: a duration, where 0 (or a negative
// value) means do not wait. It stores noWait for those, since the
// libraries would read 0 as their default of one second.
type lockTimeout struct{ d *time.Duration }

func (l lockTimeout) String() string {
	switch {
	case l.d == nil:
		return ""
	case *l.d < 0:
		return "0s"
	}
	return l.d.String()
}

func (l lockTimeout) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 500ms, 2s or 0 (do not wait)")
	}
	if d <= 0 {
		d = noWait
	}
	*l.d = d
	return nil
}

// lockTimeoutVar registers --lock-timeout on fs, stored in dst.
func lockTimeoutVar(fs *flag.FlagSet, dst *time.Duration, def time.Duration) {
	*dst = def
	fs.Var(lockTimeout{dst}, "lock-timeout", "")
}

const usageKey = `	--key FILE
	    The receiver's private key (OpenSSH Ed25519, not readable by
	    group or others). Defaults to $KVFENCE_KEY.
`

const usageJSON = `	--json
	    Write one JSON document to stdout instead of text.
`

// newFlagSet returns a flag set that reports errors only through its
// return value, so that each problem is printed once, as "Error:".
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("kvfence "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs. It prints the command's usage for -h
// (and returns flag.ErrHelp), turns a parse error into a usage error, and
// refuses positional arguments beyond the first npos.
// parseInterspersed parses flags that may come before, between and after
// positional arguments, and hands each positional argument to keep in
// command-line order, interleaved with the flags parsed around it (an
// argument after "--" is taken as it is). keep may refuse one.
func parseInterspersed(fs *flag.FlagSet, usage func(), args []string, keep func(arg string) error) error {
	for {
		if err := parseFlags(fs, usage, args, 1<<30); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			for _, arg := range rest {
				if err := keep(arg); err != nil {
					return err
				}
			}
			return nil
		}
		if err := keep(rest[0]); err != nil {
			return err
		}
		args = rest[1:]
	}
}

func parseFlags(fs *flag.FlagSet, usage func(), args []string, npos int) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	case err != nil:
		msg := fmt.Sprintf("%s: %v", fs.Name(), err)
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			if near := closestFlag(fs, name); near != "" {
				msg += fmt.Sprintf(" (did you mean --%s?)", near)
			}
		}
		return &usageError{msg: msg, hint: fs.Name() + " -h"}
	case fs.NArg() > npos:
		return &usageError{msg: fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(npos)),
			hint: fs.Name() + " -h"}
	}
	return nil
}

// closestFlag returns the flag of fs whose name is nearest to name, for a
// "did you mean" suggestion, or "" when none is near enough.
func closestFlag(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return closest(strings.TrimLeft(name, "-"), names)
}

// closest returns the one of names nearest to name, or "" when none is
// near enough to be a typo of it: at most a third of its letters (and at
// least one) differ. Of two as near, the first in names wins.
func closest(name string, names []string) string {
	best, bestDist := "", max(len(name)/3, 1)+1
	for _, n := range names {
		if d := editDistance(name, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the edit distance between a and b in which inserting,
// deleting or changing a byte, or swapping two adjacent ones, costs one
// (optimal string alignment; flag and command names are ASCII).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// require returns a usage error for the first of names whose value is
// empty.
func require(cmd string, flags ...[2]string) error {
	for _, f := range flags {
		if f[1] == "" {
			return missingFlag(cmd, f[0], "")
		}
	}
	return nil
}

// requireWriter returns a usage error unless --db, --anchor and --key are
// all given, as every command that writes needs them, and refuses an
// anchor at the database's own path. Commands call it before they read
// any input, so that a usage error comes first.
func (c *commonFlags) requireWriter() error {
	if c.db == "" && !c.etcd.on() {
		return missingFlag(c.name, "db", envDB)
	}
	if c.anchor == "" {
		return missingFlag(c.name, "anchor", envAnchor)
	}
	if c.key == "" {
		return missingFlag(c.name, "key", envKey)
	}
	return c.checkAnchorPath()
}

// checkAnchorPath refuses the witness flags that resolve refused or that
// come without --anchor, an anchor that is the database file itself (the
// anchor exists to be kept apart from it), a bad etcd anchor, and a store
// that checkStore refuses.
func (c *commonFlags) checkAnchorPath() error {
	if c.witnessErr != nil {
		return c.witnessErr
	}
	if c.witness.on() && c.anchor == "" {
		// The witnesses are asked only where the anchor is checked;
		// without it they would be ignored, and nothing is ignored.
		return witnessUsage(c.name, "--witness needs --anchor: the witnesses are asked where the database is checked against its anchor")
	}
	if err := c.checkStore(); err != nil {
		return err
	}
	if err := c.checkEtcdAnchor(); err != nil {
		return err
	}
	if c.anchor != "" && !isEtcdAnchor(c.anchor) && filepath.Clean(c.anchor) == filepath.Clean(c.db) {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --anchor names the database file; the anchor must be a separate file", c.name),
			hint: "pass the anchor file that kvfence init wrote, e.g. --anchor receiver.anchor"}
	}
	return nil
}

// loadPub loads --pub, or returns nil when it is not given.
func (c *commonFlags) loadPub() (ed25519.PublicKey, error) {
	if c.pub == "" {
		return nil, nil
	}
	return keyfile.LoadPublic(c.pub)
}

// checkPub refuses r when --pub was given and is not r's recorded key.
func checkPub(r *kvfence.Receiver, pub ed25519.PublicKey) error {
	if pub != nil && !pub.Equal(r.PublicKey()) {
		r.Close()
		return errPubMismatch
	}
	return nil
}

// openObserver opens the receiver named by --db read-only, for observation
// commands. With --anchor, the database is checked against the anchor and
// a restored or rewritten copy is refused (an integrity error); without it
// nothing is checked. With --pub, it refuses a receiver whose recorded key
// differs. warn receives a damaged anchor slot's warning.
func (c *commonFlags) openObserver(warn func(string)) (*kvfence.Receiver, error) {
	if c.db == "" && !c.etcd.on() {
		return nil, missingFlag(c.name, "db", envDB)
	}
	if err := c.checkAnchorPath(); err != nil {
		return nil, err
	}
	pub, err := c.loadPub()
	if err != nil {
		return nil, err
	}
	opts := &kvfence.Options{LockTimeout: c.lockTimeout, ReadOnly: true, Warn: warn, Key: c.signKey}
	if c.anchor != "" {
		if opts.Anchor, err = c.anchorStore(); err != nil {
			return nil, err
		}
	}
	opts.WitnessFaults = c.witness.faults
	if opts.Witnesses, opts.WitnessQuorum, err = c.witness.load(c.name); err != nil {
		return nil, err
	}
	r, err := c.openReceiver(opts)
	if err != nil {
		return nil, err
	}
	if err := checkPub(r, pub); err != nil {
		return nil, err
	}
	return r, nil
}

// openWriter opens the receiver for a command that writes: the privileged
// ones and submit, which stands in for the embedding service. It requires
// --db, --anchor and --key, loads the key (refusing a file readable by
// group or others) before it takes the database lock, and lets the library
// refuse a key other than the one recorded at init (ErrKeyMismatch) and a
// database that disagrees with its anchor (an integrity error). The key
// signs the checkpoint that each commit writes to the anchor. warn
// receives a damaged anchor slot's warning, given before the command's
// first write replaces the slot.
func (c *commonFlags) openWriter(warn func(string)) (*kvfence.Receiver, error) {
	if err := c.requireWriter(); err != nil {
		return nil, err
	}
	priv, err := loadPrivate(c.key)
	if err != nil {
		return nil, err
	}
	pub, err := c.loadPub()
	if err != nil {
		return nil, err
	}
	anchor, err := c.anchorStore()
	if err != nil {
		return nil, err
	}
	opts := &kvfence.Options{LockTimeout: c.lockTimeout, Key: priv, Anchor: anchor, Warn: warn}
	opts.WitnessFaults = c.witness.faults
	if opts.Witnesses, opts.WitnessQuorum, err = c.witness.load(c.name); err != nil {
		return nil, err
	}
	r, err := c.openReceiver(opts)
	if err != nil {
		return nil, err
	}
	if err := checkPub(r, pub); err != nil {
		return nil, err
	}
	return r, nil
}

// loadPrivate loads a private key file; it refuses one that group or
// others may access.
func loadPrivate(path string) (ed25519.PrivateKey, error) {
	// keyfile's errors already name the file and the problem.
	return keyfile.LoadPrivate(path)
}

func ed25519PublicOf(priv ed25519.PrivateKey) ed25519.PublicKey {
	return priv.Public().(ed25519.PublicKey)
}

// anchorDamageJSON is a damaged anchor slot in the --json output of status
// and verify-chain: the served API's shape, so that the local and the
// served verify-chain print the same keys.
type anchorDamageJSON = api.AnchorDamage

// anchorDamageOf converts a damaged slot to its JSON shape; nil stays nil
// (JSON null).
func anchorDamageOf(d *audit.SlotDamage) *anchorDamageJSON { return api.AnchorDamageOf(d) }

// headHex formats a chain position's hash in lowercase hex, or "" for the
// zero head (an empty chain, or no readable anchor).
func headHex(h audit.Head) string {
	if h == (audit.Head{}) {
		return ""
	}
	return hex.EncodeToString(h.Hash[:])
}

// headText formats a chain position for text output: "seq N  HEX", or "-".
func headText(h audit.Head) string {
	if h == (audit.Head{}) {
		return "-"
	}
	return fmt.Sprintf("seq %d  %s", h.Seq, headHex(h))
}

// closeReceiver closes r and reports a close error only if nothing else
// failed first.
func closeReceiver(r *kvfence.Receiver, err *error) {
	if cerr := r.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("close %s: %w", r.Path(), cerr)
	}
}

// readInput reads a whole file, or Stdin for "-".
func (m *Main) readInput(path string) ([]byte, error) {
	if path == "-" {
		b, err := io.ReadAll(m.Stdin)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// writeNew creates path with data and mode perm. It never replaces an
// existing file (the error wraps fs.ErrExist), syncs the data, and removes
// the file if writing it failed.
func writeNew(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// outStdout is the --out value that means standard output.
const outStdout = "-"

// checkOut refuses "--out -" with --json, before the command does any
// work: stdout then carries the bytes, and cannot carry a JSON document
// as well.
func checkOut(cmd, out string, asJSON bool) error {
	if out == outStdout && asJSON {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --out - writes the bytes to stdout, which then cannot carry --json", cmd),
			hint: "pass --out FILE, or leave out --json (the summary then goes to stderr)"}
	}
	return nil
}

// refuseOutStdout refuses "--out -" for a command that writes a private
// key and a second file: neither belongs on stdout, where a private key
// would end up in a terminal's scrollback or a pipe's buffers.
func refuseOutStdout(cmd, out, files string) error {
	if out == outStdout {
		return &usageError{msg: fmt.Sprintf("kvfence %s: --out - is not supported: it writes %s, including a private key, "+
			"never to stdout", cmd, files), hint: "pass --out with a path (use ./- for a file named -)"}
	}
	return nil
}

// writeOut writes data to --out: to stdout for "-", else to a new file
// with mode perm, as writeNew does. It returns where the command's summary
// goes: stdout, or stderr when stdout carries the bytes.
func (m *Main) writeOut(out string, data []byte, perm os.FileMode) (io.Writer, error) {
	if out != outStdout {
		if err := writeNew(out, data, perm); err != nil {
			return nil, fmt.Errorf("write --out: %w", err)
		}
		return m.Stdout, nil
	}
	if _, err := m.Stdout.Write(data); err != nil {
		return nil, fmt.Errorf("write --out - (stdout): %w", err)
	}
	return m.Stderr, nil
}

// writeJSON writes v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// fromUnixNano returns the time of a Unix-nanosecond timestamp, or the zero
// time for 0 (never).
func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// humanTime formats t for text output, "-" for the zero time.
func humanTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// newTable returns a tabwriter for aligned text output; flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// printable reports whether b is UTF-8 text that prints as itself (see
// reviewable): no control characters but tab and newline, and no format
// characters such as bidirectional overrides.
func printable(b []byte) bool { return reviewable(b) }
