package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// etcdOnlyFlags are flags that only "kvfence help etcd" documents.
var etcdOnlyFlags = []string{"--etcd-cert", "--etcd-max-txn-ops", "--etcd-prefix", "--anchor-etcd-cert", "--anchor-etcd-cluster-id"}

// Ensure that a command's -h shows its own flags and points at "kvfence
// help etcd" instead of listing the etcd flags, and that "kvfence help
// etcd" documents every one of them.
func TestHelp_EtcdFlagsApart(t *testing.T) {
	c := newCLI(t)
	for _, cmd := range []string{"init", "scope create", "scope list", "target create", "target list", "activate",
		"submit", "hold", "grant extend", "status", "observe", "verify-chain", "admission new", "recover", "audit archive", "serve"} {
		r := c.must(0, append(strings.Fields(cmd), "-h")...)
		for _, f := range etcdOnlyFlags {
			if strings.Contains(r.stderr, f+" ") || strings.Contains(r.stderr, f+",") || strings.Contains(r.stderr, f+"\n") {
				t.Errorf("%s -h lists %s", cmd, f)
			}
		}
		if !strings.Contains(r.stderr, "--etcd-* flags: see kvfence help etcd") {
			t.Errorf("%s -h does not point at kvfence help etcd:\n%s", cmd, r.stderr)
		}
	}
	r := c.must(0, "help", "etcd")
	for _, f := range append(etcdOnlyFlags, "--etcd URL", "--etcd-key", "--etcd-ca", "--anchor etcd://", "--anchor-etcd-key", "--anchor-etcd-ca") {
		if !strings.Contains(r.stdout, f) {
			t.Errorf("help etcd does not document %s", f)
		}
	}
	if !strings.Contains(c.must(0, "help").stdout, "kvfence help etcd") {
		t.Error("kvfence help does not name kvfence help etcd")
	}
}

// Ensure that activate -h and submit -h say what changes with --server.
func TestHelp_ServerDifferences(t *testing.T) {
	c := newCLI(t)
	for cmd, want := range map[string][]string{
		"activate": {"With --server", "receiver's clock", "actor", "--assignment-out is\nstill written here"},
		"submit":   {"With --server", "SPIFFE ID", "--as is refused", "not taken"},
	} {
		r := c.must(0, cmd, "-h")
		for _, w := range want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s -h does not say %q:\n%s", cmd, w, r.stderr)
			}
		}
	}
}

// Ensure that --json before the command works as README says, also before
// a group's subcommand and before a "--", and that the error object of a
// failing command goes to stdout then too.
func TestJSONBeforeCommand(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	for _, args := range [][]string{
		{"--json", "status"},
		{"-json", "status"},
		{"--json=true", "status"},
		{"--json", "scope", "list"},
		{"--json", "observe", "events", "--since", "1"},
		{"--json", "version"},
	} {
		r := c.must(0, args...)
		if !strings.HasPrefix(strings.TrimSpace(r.stdout), "{") {
			t.Errorf("kvfence %s: not JSON:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
	if r := c.must(0, "--json=false", "version"); strings.HasPrefix(r.stdout, "{") {
		t.Errorf("--json=false version printed JSON:\n%s", r.stdout)
	}
	r := c.must(ExitDenied, "--json", "hold", "--scope", "nope", "--reason", "r")
	if !strings.Contains(r.stdout, `"code": "unknown_scope"`) {
		t.Errorf("--json hold of an unknown scope:\n%s", r)
	}
	r = c.must(ExitUsage, "--json")
	if !strings.Contains(r.stderr, "no command given") {
		t.Errorf("kvfence --json alone:\n%s", r)
	}
}

// Ensure that "kvfence completion bash" is valid bash that names every
// command and every subcommand, completes them when sourced, and that the
// zsh and fish scripts name every command too.
func TestCompletion(t *testing.T) {
	c := newCLI(t)
	m := &Main{}
	tree := m.commandTree()
	bash := c.must(0, "completion", "bash").stdout
	script := filepath.Join(c.dir, "kvfence.bash")
	if err := os.WriteFile(script, []byte(bash), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	for _, sh := range []string{"zsh", "fish"} {
		out := c.must(0, "completion", sh).stdout
		for _, e := range tree {
			if !strings.Contains(out, e.name) {
				t.Errorf("the %s script does not name %s", sh, e.name)
			}
		}
	}
	// Every command, and each command's subcommands, as bash completes
	// them after sourcing the script.
	complete := func(words ...string) []string {
		t.Helper()
		line := "source " + script + "; COMP_WORDS=(kvfence"
		for _, w := range words {
			line += " '" + w + "'"
		}
		line += fmt.Sprintf("); COMP_CWORD=%d; _kvfence; printf '%%s\\n' \"${COMPREPLY[@]}\"", len(words))
		out, err := exec.Command("bash", "-c", line).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	top := complete("")
	for _, name := range commandNames {
		if !slices.Contains(top, name) {
			t.Errorf("bash completes %v at the top, without %s", top, name)
		}
	}
	if got := complete("--json", "gr"); !slices.Equal(got, []string{"grant"}) {
		t.Errorf("kvfence --json gr<TAB> = %v", got)
	}
	for _, e := range tree {
		if len(e.subs) == 0 {
			continue
		}
		got := complete(e.name, "")
		for _, s := range e.subs {
			if !slices.Contains(got, s) {
				t.Errorf("kvfence %s <TAB> = %v, without %s", e.name, got, s)
			}
		}
	}
	if got := complete("help", "et"); !slices.Equal(got, []string{"etcd"}) {
		t.Errorf("kvfence help et<TAB> = %v", got)
	}
	c.must(ExitUsage, "completion")
	c.must(ExitUsage, "completion", "tcsh")
}

// Ensure that the command table behind completion is the one the program
// runs: every command and subcommand it lists has help of its own, and
// every command the overview lists is in it.
func TestCompletion_TableIsTheCommands(t *testing.T) {
	c := newCLI(t)
	overview := c.must(0, "help").stdout
	for _, e := range (&Main{}).commandTree() {
		if e.name == "lab" {
			continue // present only in the lab build
		}
		if !strings.Contains(overview, "\t"+e.name+" ") {
			t.Errorf("kvfence help does not list %s", e.name)
		}
		c.must(0, "help", e.name)
		for _, s := range e.subs {
			if e.name == "completion" {
				continue
			}
			if r := c.run(e.name, s, "-h"); r.code != 0 || !strings.Contains(r.stderr+r.stdout, "Usage") {
				t.Errorf("kvfence %s %s -h: %s", e.name, s, r)
			}
		}
	}
}
