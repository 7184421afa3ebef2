// Command kvfence administers and exercises a kvfence receiver: the bbolt
// database that fences stale workers where their writes are committed.
//
// Usage:
//
//	kvfence <command> [arguments]
//
// Keys and files:
//
//	keygen          create an Ed25519 key pair (FILE 0600, FILE.pub)
//	init            create a receiver database and its first anchor
//
// Administration (privileged: each requires the receiver's private key,
// --key or KVFENCE_KEY, whose public half must match the one init recorded):
//
//	scope create    create a protected scope (epoch 1, held)
//	target create   create a target in a scope (revision 1)
//	activate        mint a grant for a held scope and open it
//	hold            advance the epoch of one or more scopes and hold them
//	grant extend    move an active grant's end later, within its scope's
//	                maximum from its activation
//
// Workers and approvers:
//
//	request build   encode the exact approved request bytes
//	request show    decode request bytes: every field, the SHA-256 a grant binds
//	envelope build  wrap request bytes with the authority a worker claims
//	envelope show   decode an envelope and the request it carries
//	submit          submit an envelope as an authenticated worker
//
// Observation (opens the database read-only):
//
//	status          control state of every scope, or of one
//	observe         a target, a receipt, or the audit events
//	verify-chain    check the whole audit chain against the anchor
//
// Audit retention (privileged):
//
//	audit archive   move the oldest audit entries to a signed archive file
//	                and record the new base in the chain
//
// Recovery (for a database whose history was questioned, or whose anchor
// was lost):
//
//	admission new   sign an admission with the separately held recovery key
//	recover         apply an admission: hold every scope at a new epoch,
//	                revoke every grant, write the anchor
//
// Backup:
//
//	backup          a verified backup file, from a running receiver
//	                (--server) or a stopped one's database
//	restore         write a backup's database in place, for recovery
//
// Execution ledger (its own file, anchor and key; authorises nothing):
//
//	ledger          init, approve, claim, heartbeat, dispatch, finish,
//	                takeover, reconcile, show, events, verify-chain
//	contain         hold an action at every boundary of its approval and
//	                keep the evidence; alternate, show, verify, activate
//	                (a successor, only after full containment)
//
// Serving (docs/design.md §12):
//
//	serve           run the receiver as a service: workers submit over mTLS
//	                (identity: the client certificate's SPIFFE ID),
//	                administrators over mTLS or a unix socket (SO_PEERCRED),
//	                Prometheus metrics on their own listener
//	cert            make a test CA, a server certificate and SPIFFE-ID
//	                client certificates for trying serve
//
// Demonstration and measurement:
//
//	lab             the fencing lab, in real processes, with its evidence
//	bench           durable fenced writes measured against fsync, bbolt and
//	                SQLite in one run on one disk
//	version         the module version and VCS revision (also --version)
//	completion      a shell completion script (bash, zsh, fish)
//	help etcd       the flags that keep the receiver or its anchor on etcd
//
// Common flags, with environment fallbacks (a flag wins over its variable):
// --db (KVFENCE_DB), --anchor (KVFENCE_ANCHOR), --key (KVFENCE_KEY),
// --pub (when set, the receiver's recorded key must equal it; verify-chain
// requires it and verifies the anchor with it), --lock-timeout (default 1s;
// 0 means do not wait), --json (anywhere on the command line, also before
// a subcommand). --out - writes the bytes to stdout and the summary to
// stderr (request build, envelope build, admission new).
//
// The anchor is a file, kept apart from the database, that holds the
// receiver's latest signed checkpoint of its audit chain (docs/design.md §7.3). Every
// command that writes (init, scope create, target create, activate, hold,
// submit, recover) requires --anchor and --key: it checks the database
// against the anchor before it writes and moves the anchor forward, signed
// with the key, before it returns. submit needs the key too because it
// stands in for the embedding service that runs the receiver; workers never
// hold it. Observation commands check the anchor when --anchor is given. A
// database older than its anchor (a restored backup), one whose history
// differs from it, or a missing or badly signed anchor is refused with exit
// code 4, and a missing anchor is never recreated. Only an admission signed
// by the recovery key (init --recovery-pub) re-admits such a database, and
// only a lost-anchor admission from that key gives one a new anchor.
//
// Human output goes to stdout, diagnostics to stderr as "Error: ..." with a
// "Try: ..." hint where one helps; for an integrity problem the hint says
// what was found and what to do next. --json replaces the human output on
// stdout with one JSON document whose keys are stable; consumers must ignore
// keys they do not know, since new keys may be added. In every JSON shape a
// time is an RFC 3339 string with nanoseconds in UTC, and a time that never
// happened (the zero time) is null; keys are never omitted except in the
// per-entry objects of "observe events", which carry only the fields the
// entry has. With --json anywhere on its command line, a command that
// fails also writes {"error":{"code","message","hint"}} to stdout (hint
// omitted when empty), unless it had already begun its own JSON document;
// the codes are stable (errorcodes.go, README).
//
// Exit codes:
//
//	0  success, including a submit whose outcome is already_applied
//	1  operational error (missing database, refused key, I/O, ...)
//	2  usage error (bad flags, a missing required flag, an unknown command,
//	   a malformed request, envelope or patch file)
//	3  request denied by the fence (submit), or refused by the receiver's
//	   or the ledger's rules: activate on an open scope, an epoch
//	   mismatch, a scope or target that exists already or is unknown, no
//	   such receipt or grant, a recovery key equal to the receiver key, a
//	   claim held by another worker, superseded, settled, ...
//	4  integrity problem: rollback, fork, tampering, a missing, unreadable
//	   or badly signed anchor, another receiver's anchor, a recovery
//	   admission that does not verify or match; verify-chain reporting any
//	   problem. It takes precedence over every other code. When no file
//	   exists at --anchor, the message says so (a mistyped path is the
//	   usual cause).
//	5  storage busy (the database lock was not obtained in --lock-timeout)
//	6  verify-chain only: the chain verifies, but a slot of the anchor file
//	   is damaged (a crash during an anchor write, or tampering)
//	8  contain only: the containment is partial or none (the record was
//	   written and printed); a successor may not be activated
//
// Any command that opens a receiver with its anchor prints a damaged anchor
// slot as "Warning: ..." on stderr; status and verify-chain also report it
// in their output (anchor_damage).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvfence/kvfence/lab"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// Main is the program with its environment injected, so that tests run it
// in-process with captured output and a fake environment.
type Main struct {
	// Stdin is read by "--value-file -" and "--envelope -". Nil means empty.
	Stdin io.Reader
	// Stdout receives the command's output. Nil discards it.
	Stdout io.Writer
	// Stderr receives usage text and diagnostics. Nil discards them.
	Stderr io.Writer
	// Getenv looks up the environment fallbacks (KVFENCE_DB, ...). Nil
	// means an empty environment.
	Getenv func(string) string
	// Hangup, when set, stands in for SIGHUP for serve: each value
	// received reloads its certificates. Nil means SIGHUP itself.
	Hangup <-chan os.Signal
	// Now is the clock that admission new signs by and recover checks an
	// admission's expiry against. Nil means time.Now.
	Now func() time.Time
}

// warn prints a warning that does not stop the command, such as a damaged
// anchor slot that a receiver found when it opened.
func (m *Main) warn(msg string) { fmt.Fprintf(m.Stderr, "Warning: %s\n", msg) }

// command is one subcommand: it parses its own arguments and writes its own
// usage text.
type command interface {
	Run(ctx context.Context, args []string) error
	Usage()
}

// Run runs the command named by args[0] and returns the process exit code.
// It prints any error to Stderr.
func (m Main) Run(ctx context.Context, args []string) int {
	if m.Stdin == nil {
		m.Stdin = strings.NewReader("")
	}
	if m.Stdout == nil {
		m.Stdout = io.Discard
	}
	if m.Stderr == nil {
		m.Stderr = io.Discard
	}
	if m.Getenv == nil {
		m.Getenv = func(string) string { return "" }
	}
	stdout := &countingWriter{w: m.Stdout}
	out := m.Stdout
	m.Stdout = stdout
	err := m.run(ctx, args)
	if err != nil {
		err = explainAnchorPath(err, anchorArg(args, m.Getenv))
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		m.printError(err)
		// With --json a failure is one JSON object on stdout too, unless
		// the command already began its own JSON document there (a
		// submit's denial, verify-chain's report), which then is the one.
		if wantsJSON(args) && stdout.n == 0 {
			writeJSON(out, errorJSON{Error: errorBodyJSON{Code: errorCode(err), Message: err.Error(), Hint: hint(err)}})
		}
	}
	return exitCode(err)
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// wantsJSON reports whether a command line asks for --json (or -json,
// --json=true, ...) anywhere before a "--" that ends the flags. The last
// one counts, as it does for the flag package, so that the error object
// goes to stdout exactly when the command wrote JSON.
func wantsJSON(args []string) bool {
	want := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "json" || strings.HasPrefix(a, "---") {
			continue
		}
		if !hasValue {
			want = true
			continue
		}
		on, err := strconv.ParseBool(value)
		want = err == nil && on
	}
	return want
}

// isJSONFlag reports whether arg is --json in any of the flag package's
// spellings (-json, --json, --json=BOOL).
func isJSONFlag(arg string) bool {
	if !strings.HasPrefix(arg, "-") || strings.HasPrefix(arg, "---") {
		return false
	}
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return name == "json"
}

// anchorArg returns the anchor path a command line used: its last
// --anchor, or else the environment's (KVFENCE_LEDGER_ANCHOR for ledger
// commands, KVFENCE_ANCHOR for the others), as the flag package and
// commonFlags.resolve would find it.
func anchorArg(args []string, getenv func(string) string) string {
	path, set := "", false
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "anchor" {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				break
			}
			i++
			value = args[i]
		}
		path, set = value, true
	}
	switch {
	case set:
		return path
	case len(args) > 0 && (args[0] == "ledger" || args[0] == "contain"):
		return getenv(envLedgerAnchor)
	}
	return getenv(envAnchor)
}

func (m *Main) run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		m.usage(m.Stderr)
		return usageErrorf("no command given")
	}
	// A --json before the command ("kvfence --json status") is the
	// command's: it moves after the command's words, where the command
	// parses it. wantsJSON has seen it wherever it was.
	var lead []string
	for len(args) > 0 && isJSONFlag(args[0]) {
		lead, args = append(lead, args[0]), args[1:]
	}
	if len(args) == 0 {
		m.usage(m.Stderr)
		return usageErrorf("no command given")
	}
	name, rest := args[0], args[1:]
	if name == "help" || isHelpFlag(name) {
		return m.help(rest)
	}
	if name == "--version" || name == "-version" {
		name = "version"
	}
	if groupCommands[name] {
		rest = subcommandFirst(rest)
	}
	if len(lead) > 0 {
		// Before a "--", after which every word is an argument; the
		// commands take flags after their positional arguments.
		at := len(rest)
		if i := slices.Index(rest, "--"); i >= 0 {
			at = i
		}
		rest = slices.Concat(rest[:at], lead, rest[at:])
	}
	cmd, rest, err := m.lookup(name, rest, false)
	if err != nil {
		return err
	}
	return cmd.Run(ctx, rest)
}

// groupCommands are the commands whose first argument is a subcommand
// (or, for cert, a kind).
var groupCommands = map[string]bool{"scope": true, "target": true, "request": true, "envelope": true,
	"admission": true, "observe": true, "ledger": true, "cert": true, "grant": true, "witness": true}

// boolFlags are the flags of subcommands that take no value, so that
// subcommandFirst does not read the word after one as its value. A value
// flag listed here by mistake, or a boolean missing from it, only makes a
// subcommand after it go unfound ("missing subcommand"), never another
// subcommand run.
var boolFlags = map[string]bool{"json": true, "lost-anchor": true, "follow": true, "all": true, "proof": true}

// subcommandFirst moves a group's subcommand to the front of args when
// flags come before it, as in "kvfence observe --json target K": the
// subcommand is the first argument that is neither a flag nor a flag's
// value. The flags then follow it, where the subcommand parses them.
// Help flags and "--" leave args as they are.
func subcommandFirst(args []string) []string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || isHelpFlag(a):
			return args
		case !strings.HasPrefix(a, "-") || a == "-":
			if i == 0 {
				return args
			}
			out := append([]string{a}, args[:i]...)
			return append(out, args[i+1:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasValue && !boolFlags[name] {
			i++ // the flag's value
		}
	}
	return args
}

// lookup finds the command for name and, for a group such as "scope", its
// subcommand, returning the arguments left for the command. For help, a
// group without its subcommand means all of its subcommands, so that
// "kvfence help request" shows "request build" and "request show".
func (m *Main) lookup(name string, args []string, forHelp bool) (command, []string, error) {
	group := func(subs ...subcommand) (command, []string, error) {
		return (&commandGroup{m, name, subs}).lookup(args, forHelp)
	}
	switch name {
	case "keygen":
		return &KeygenCommand{m}, args, nil
	case "init":
		return &InitCommand{m}, args, nil
	case "scope":
		return group(subcommand{"create", &ScopeCreateCommand{m}}, subcommand{"list", &ScopeListCommand{m}})
	case "target":
		return group(subcommand{"create", &TargetCreateCommand{m}}, subcommand{"list", &TargetListCommand{m}})
	case "request":
		return group(subcommand{"build", &RequestBuildCommand{m}}, subcommand{"show", &RequestShowCommand{m}})
	case "activate":
		return &ActivateCommand{m}, args, nil
	case "envelope":
		return group(subcommand{"build", &EnvelopeBuildCommand{m}}, subcommand{"show", &EnvelopeShowCommand{m}})
	case "submit":
		return &SubmitCommand{m}, args, nil
	case "hold":
		return &HoldCommand{m}, args, nil
	case "grant":
		return group(subcommand{"extend", &GrantExtendCommand{m}})
	case "status":
		return &StatusCommand{m}, args, nil
	case "observe":
		return &ObserveCommand{m}, args, nil
	case "verify-chain":
		return &VerifyChainCommand{m}, args, nil
	case "verify-receipt":
		return &VerifyReceiptCommand{m}, args, nil
	case "audit":
		return group(subcommand{"archive", &AuditArchiveCommand{m}})
	case "admission":
		return group(subcommand{"new", &AdmissionNewCommand{m}})
	case "recover":
		return &RecoverCommand{m}, args, nil
	case "backup":
		return &BackupCommand{m}, args, nil
	case "restore":
		return &RestoreCommand{m}, args, nil
	case "ledger":
		return &LedgerCommand{m}, args, nil
	case "contain":
		return &ContainCommand{m}, args, nil
	case "lab":
		return &LabCommand{m}, args, nil
	case "serve":
		return &ServeCommand{m}, args, nil
	case "cert":
		return &CertCommand{m}, args, nil
	case "witness":
		return group(subcommand{"init", &WitnessInitCommand{m}}, subcommand{"trust", &WitnessTrustCommand{m}},
			subcommand{"serve", &WitnessServeCommand{m}})
	case "bench":
		return &BenchCommand{m}, args, nil
	case "version":
		return &VersionCommand{m}, args, nil
	case "completion":
		return &CompletionCommand{m}, args, nil
	case lab.WorkerCommand:
		return &labWorkerCommand{m}, args, nil
	case lab.ServedWorkerCommand:
		return &labServedWorkerCommand{m}, args, nil
	}
	msg := fmt.Sprintf("kvfence %s: unknown command", name)
	if near := closest(name, commandNames); near != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", near)
	}
	return nil, nil, &usageError{msg: msg, hint: "kvfence help"}
}

// commandNames are the commands "kvfence help" lists, for suggestions.
var commandNames = []string{"keygen", "init", "scope", "target", "request", "activate", "envelope", "submit", "hold",
	"grant", "status", "observe", "verify-chain", "verify-receipt", "audit", "admission", "recover", "backup", "restore", "ledger", "contain", "serve", "cert", "witness", "lab", "bench", "version", "completion"}

// isHelpFlag reports whether arg asks for help, as the flag package
// understands it.
func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "--h"
}

// help prints the overview, or one command's usage, to Stdout.
func (m *Main) help(args []string) error {
	if len(args) == 0 {
		m.usage(m.Stdout)
		return nil
	}
	if args[0] == "etcd" && len(args) == 1 {
		m.helpEtcd()
		return nil
	}
	out := *m
	out.Stderr = m.Stdout
	cmd, _, err := out.lookup(args[0], args[1:], true)
	if err != nil {
		return err
	}
	cmd.Usage()
	return nil
}

func (m *Main) usage(w io.Writer) {
	fmt.Fprint(w, `kvfence fences stale workers at the receiving system.

Usage:

	kvfence <command> [arguments]

The commands are:

	keygen          create an Ed25519 key pair (FILE and FILE.pub)
	init            create a receiver database and its anchor
	scope create    create a protected scope (privileged)
	scope list      list the scopes
	target create   create a target; names are unique across the receiver (privileged)
	target list     list the targets, of every scope or of one
	request build   encode an approved request
	request show    decode a request: every field and its SHA-256
	activate        mint a grant and open a scope (privileged)
	envelope build  wrap a request with a worker's claimed authority
	envelope show   decode an envelope and the request it carries
	submit          submit an envelope as a worker
	hold            hold scopes at a new epoch; --all holds every open one (privileged)
	grant extend    move an active grant's end later, within its scope's maximum (privileged)
	status          show the control state of scopes
	observe         show a target, a receipt, a grant or the audit events
	verify-chain    check the audit chain against the anchor
	verify-receipt  check a receipt's proof offline with the receiver's public key
	audit archive   move old audit entries to a signed archive (privileged)
	admission new   sign a recovery admission (recovery key holder)
	recover         re-admit a questioned database with an admission
	backup          write a verified backup of a running or stopped receiver
	restore         put a backup's database in place for a stopped receiver
	ledger          approvals and claims in the execution ledger
	contain         hold an action at every boundary; activate its successor
	serve           run a receiver as a service (mTLS, admin socket)
	cert            make test certificates for serve
	witness init    make a witness: its key and its database
	witness trust   make a witness accept a receiver's checkpoints
	witness serve   run a witness (C2SP tlog-witness over TLS)
	lab             run the fencing lab in real processes (lab build only)
	bench           measure durable fenced writes against fsync, bbolt, SQLite
	version         the module version and VCS revision (also --version)
	completion      a completion script for bash, zsh or fish

Commands that write need --anchor and --key (or KVFENCE_ANCHOR and
KVFENCE_KEY); status and observe check the anchor when it is given.

Use "kvfence help <command>" or "kvfence <command> -h" for more
information about a command, "kvfence help etcd" for the flags that keep
the receiver or its anchor on etcd, and "kvfence completion bash|zsh|fish"
for a shell completion script.

Exit codes: 0 success (also already_applied), 1 operational error,
2 usage error (also a malformed request, envelope or patch file),
3 denied by the fence or refused by the receiver's rules (scope not
held, epoch mismatch, exists already, unknown, ...), 4 integrity problem
(rollback, fork, missing, damaged or badly signed anchor, ...), 5 storage
busy, 6 verify-chain found the chain sound but an anchor slot damaged.
`)
}

// printError writes err as "Error: ..." (or "Warning: ..." for a
// warningError) and, when one is known, a hint as "Try: ...".
func (m *Main) printError(err error) {
	label := "Error"
	if we := (*warningError)(nil); errors.As(err, &we) {
		label = "Warning"
	}
	fmt.Fprintf(m.Stderr, "%s: %s\n", label, err)
	if h := hint(err); h != "" {
		fmt.Fprintf(m.Stderr, "Try: %s\n", h)
	}
}
