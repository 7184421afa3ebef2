package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/witness"
)

// Environment variables consulted when the matching witness flag of a
// receiver command is not given (a ledger command reads them with
// KVFENCE_LEDGER_ in place of KVFENCE_: the ledger's witnesses need not be
// the receiver's). A list variable holds comma-separated NAME=VALUE pairs.
const (
	envWitness       = "KVFENCE_WITNESS"
	envWitnessPub    = "KVFENCE_WITNESS_PUB"
	envWitnessQuorum = "KVFENCE_WITNESS_QUORUM"
	envWitnessCA     = "KVFENCE_WITNESS_CA"
	envWitnessFaults = "KVFENCE_WITNESS_FAULTS"
)

// ledgerEnvPrefix replaces "KVFENCE_" in the witness variables of a
// ledger command (witnessFlags.ledger).
const ledgerEnvPrefix = "KVFENCE_LEDGER_"

// witnessFlags are --witness NAME=URL and --witness-pub NAME=FILE
// (repeatable), --witness-quorum K and --witness-ca FILE: the quorum of
// witnesses that cosign a store's checkpoints (docs/design.md §7.10). A
// command of the receiver or the ledger registers them, resolves them, and
// loads them into its options' Witnesses and WitnessQuorum; a ledger
// command sets ledger first:
//
//	wf := witnessFlags{ledger: true}
//	wf.register(fs)
//	err = wf.resolve(fs, cmd, getenv) // after parsing
//	opts.Witnesses, opts.WitnessQuorum, err = wf.load(cmd)
type witnessFlags struct {
	urls   namedValues
	pubs   namedValues
	quorum int
	ca     string
	// faults is F, --witness-faults (0 unless given).
	faults int
	// quorumSet says --witness-quorum or its variable was given.
	quorumSet bool
	// ledger makes resolve read the KVFENCE_LEDGER_ variables.
	ledger bool
}

// env returns the variable name for a receiver command, renamed for a
// ledger command.
func (w *witnessFlags) env(name string) string {
	if w.ledger {
		return ledgerEnvPrefix + strings.TrimPrefix(name, "KVFENCE_")
	}
	return name
}

// register adds the witness flags to fs.
func (w *witnessFlags) register(fs *flag.FlagSet) {
	w.urls = namedValues{flag: "witness", what: "URL"}
	w.pubs = namedValues{flag: "witness-pub", what: "FILE"}
	fs.Var(&w.urls, "witness", "")
	fs.Var(&w.pubs, "witness-pub", "")
	fs.IntVar(&w.quorum, "witness-quorum", 0, "")
	fs.StringVar(&w.ca, "witness-ca", "", "")
	fs.IntVar(&w.faults, "witness-faults", 0, "")
}

// registered reports whether fs has the witness flags.
func (w *witnessFlags) registered(fs *flag.FlagSet) bool { return fs.Lookup("witness") != nil }

// resolve fills the witness flags that were not given from the
// environment, as commonFlags.resolve does for the others, and checks
// them: a malformed variable, a name given twice, a name with a URL and no
// public key file (or the reverse), a quorum without witnesses or outside
// 1..N, and --witness-ca without witnesses are usage errors. Witnesses
// without --witness-quorum need all of them (K = N).
func (w *witnessFlags) resolve(fs *flag.FlagSet, cmd string, getenv func(string) string) error {
	if !w.registered(fs) {
		return nil
	}
	for _, v := range []struct {
		nv  *namedValues
		env string
	}{{&w.urls, w.env(envWitness)}, {&w.pubs, w.env(envWitnessPub)}} {
		if isSet(fs, v.nv.flag) {
			continue
		}
		if s := getenv(v.env); s != "" {
			for pair := range strings.SplitSeq(s, ",") {
				if err := v.nv.Set(pair); err != nil {
					return witnessUsage(cmd, "$%s: %v", v.env, err)
				}
			}
		}
	}
	w.quorumSet = isSet(fs, "witness-quorum")
	if s := getenv(w.env(envWitnessQuorum)); !w.quorumSet && s != "" {
		k, err := strconv.Atoi(s)
		if err != nil {
			return witnessUsage(cmd, "$%s %q is not a number", w.env(envWitnessQuorum), s)
		}
		w.quorum, w.quorumSet = k, true
	}
	if !isSet(fs, "witness-ca") {
		w.ca = getenv(w.env(envWitnessCA))
	}
	if s := getenv(w.env(envWitnessFaults)); !isSet(fs, "witness-faults") && s != "" {
		f, err := strconv.Atoi(s)
		if err != nil {
			return witnessUsage(cmd, "$%s %q is not a number", w.env(envWitnessFaults), s)
		}
		w.faults = f
	}
	return w.check(cmd)
}

// check refuses what the command line cannot mean, before anything is
// opened.
func (w *witnessFlags) check(cmd string) error {
	n := len(w.urls.values)
	for _, name := range w.urls.names {
		if _, ok := w.pubs.values[name]; !ok {
			return witnessUsage(cmd, "--witness %s has no --witness-pub %s=FILE", name, name)
		}
	}
	for _, name := range w.pubs.names {
		if _, ok := w.urls.values[name]; !ok {
			return witnessUsage(cmd, "--witness-pub %s has no --witness %s=URL", name, name)
		}
	}
	switch {
	case n == 0 && w.quorumSet:
		return witnessUsage(cmd, "--witness-quorum %d without any --witness", w.quorum)
	case n == 0 && w.ca != "":
		return witnessUsage(cmd, "--witness-ca without any --witness")
	case w.quorumSet && (w.quorum < 1 || w.quorum > n):
		return witnessUsage(cmd, "--witness-quorum %d: want 1 to the %d witnesses given", w.quorum, n)
	case n == 0 && w.faults != 0:
		return witnessUsage(cmd, "--witness-faults %d without any --witness", w.faults)
	}
	k := n
	if w.quorumSet {
		k = w.quorum
	}
	if n > 0 && (w.faults < 0 || w.faults > k-1) {
		return witnessUsage(cmd, "--witness-faults %d: want 0 to K-1 = %d", w.faults, k-1)
	}
	return nil
}

// on reports whether any witness was given.
func (w *witnessFlags) on() bool { return len(w.urls.values) > 0 }

// load reads the witnesses' public keys and CA bundle and returns them as
// quorum members with K, or nil and 0 without witnesses. A list
// witness.LoadMembers refuses (an http URL beside --witness-ca, an empty
// or unreadable CA bundle, two names with one key) is a usage error; a
// public key file that cannot be read keeps keyfile's error and code.
func (w *witnessFlags) load(cmd string) ([]witness.Member, int, error) {
	if !w.on() {
		return nil, 0, nil
	}
	members, err := witness.LoadMembers(witness.MemberSpec{URLs: w.urls.values, PubFiles: w.pubs.values, CAFile: w.ca})
	if errors.Is(err, witness.ErrBadMemberSpec) {
		return nil, 0, witnessUsage(cmd, "%v", err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("kvfence %s: --witness-pub: %w", cmd, err)
	}
	k := w.quorum
	if !w.quorumSet {
		k = len(members)
	}
	return members, k, nil
}

// witnessUsage is a usage error about the witness flags.
func witnessUsage(cmd, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf("kvfence "+cmd+": "+format, args...),
		hint: "--witness NAME=URL --witness-pub NAME=FILE for each witness (NAME its id), and --witness-quorum K"}
}

// namedValues is a repeatable NAME=VALUE flag: each name once.
type namedValues struct {
	flag, what string
	values     map[string]string
	names      []string // in command-line order, for messages
}

// String returns the pairs as given.
func (n *namedValues) String() string {
	if n == nil {
		return ""
	}
	var parts []string
	for _, name := range n.names {
		parts = append(parts, name+"="+n.values[name])
	}
	return strings.Join(parts, ",")
}

// Set adds one NAME=VALUE pair, refusing one without "=", with an empty
// name or value, with a name that is not a witness id, or with a name
// already given.
func (n *namedValues) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return fmt.Errorf("%q: want NAME=%s", s, n.what)
	case name == "" || value == "":
		return fmt.Errorf("%q: want NAME=%s, both non-empty", s, n.what)
	}
	if err := checkpoint.CheckName(name); err != nil {
		return fmt.Errorf("%q: the name is not a witness id: %v", s, err)
	}
	if _, dup := n.values[name]; dup {
		return fmt.Errorf("witness %s given twice", name)
	}
	if n.values == nil {
		n.values = map[string]string{}
	}
	n.values[name] = value
	n.names = append(n.names, name)
	return nil
}

// usageWitness documents the witness flags.
const usageWitness = `	--witness NAME=URL, --witness-pub NAME=FILE
	    A witness that cosigns the receiver's checkpoints (repeatable):
	    NAME is its id (as given to kvfence witness init), URL its base
	    URL, FILE its public key (the K.pub witness init wrote). Each
	    NAME needs both. A write is acknowledged only once K witnesses
	    cosigned it; the database is opened only once at least N-K+1
	    answered and none has cosigned a larger or another tree (a
	    rollback or fork: exit 4). Too few answers exit 1
	    (witnesses_unavailable). Need --anchor. Default
	    $KVFENCE_WITNESS and $KVFENCE_WITNESS_PUB (NAME=VALUE,...).
	--witness-quorum K
	    How many witnesses must cosign a write, 1 to N (default N;
	    $KVFENCE_WITNESS_QUORUM).
	--witness-faults F
	    How many witnesses may have lost, rolled back or forged their
	    database at once: opening then needs N-K+1+F answers, 0 to K-1
	    (default 0, which trusts every witness's database;
	    $KVFENCE_WITNESS_FAULTS).
	--witness-ca FILE
	    The CA certificates (PEM) the witnesses' https certificates chain
	    to, instead of the system's ($KVFENCE_WITNESS_CA). Witness URLs
	    are https only: over plain http a witness's answers could be
	    replayed, or its "none" forged.
`
