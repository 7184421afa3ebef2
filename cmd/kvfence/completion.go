package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

// CompletionCommand prints a shell completion script for the commands and
// subcommands of this binary.
type CompletionCommand struct{ m *Main }

// Run runs the command.
func (c *CompletionCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("completion")
	var shells []string
	if err := parseInterspersed(fs, c.Usage, args, func(a string) error { shells = append(shells, a); return nil }); err != nil {
		return err
	}
	if len(shells) != 1 {
		return &usageError{msg: "kvfence completion: name one shell: bash, zsh or fish", hint: "kvfence completion -h"}
	}
	tree := c.m.commandTree()
	switch shells[0] {
	case "bash":
		return writeBash(c.m.Stdout, tree)
	case "zsh":
		return writeZsh(c.m.Stdout, tree)
	case "fish":
		return writeFish(c.m.Stdout, tree)
	}
	return &usageError{msg: fmt.Sprintf("kvfence completion: unknown shell %q (want bash, zsh or fish)", shells[0]),
		hint: "kvfence completion -h"}
}

// Usage prints the command's help.
func (c *CompletionCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence completion bash|zsh|fish

Prints a completion script for the shell, for commands and subcommands;
after them the shell completes file names. To use it:

	bash:  source <(kvfence completion bash)
	zsh:   source <(kvfence completion zsh)
	fish:  kvfence completion fish | source
`)
}

// commandEntry is one command and its subcommands, for completion.
type commandEntry struct {
	name string
	subs []string
}

// ownSubcommands are the subcommands of the commands that parse their own
// (not commandGroups): lookup cannot list them.
func (m *Main) ownSubcommands(name string) []string {
	switch name {
	case "observe":
		return []string{"target", "receipt", "receipts", "grant", "events"}
	case "contain":
		return []string{"alternate", "show", "verify", "activate"}
	case "cert":
		return []string{"ca", "server", "client"}
	case "ledger":
		subs := []string{"init", "verify-chain", "events"}
		for s := range ledgerSubs(m) {
			// "receiver add" and "receiver list" complete as "receiver".
			s, _, _ = strings.Cut(s, " ")
			subs = append(subs, s)
		}
		slices.Sort(subs)
		return slices.Compact(subs)
	}
	return nil
}

// commandTree is every command that "kvfence help" lists, with its
// subcommands: a commandGroup's from lookup itself,
// the others' from ownSubcommands.
func (m *Main) commandTree() []commandEntry {
	var out []commandEntry
	for _, name := range commandNames {
		e := commandEntry{name: name}
		if cmd, _, err := m.lookup(name, nil, true); err == nil {
			if g, ok := cmd.(*commandGroup); ok {
				for _, s := range g.subs {
					e.subs = append(e.subs, s.name)
				}
			}
		}
		if e.subs == nil {
			e.subs = m.ownSubcommands(name)
		}
		if name == "completion" {
			e.subs = []string{"bash", "zsh", "fish"}
		}
		out = append(out, e)
	}
	return out
}

// commandNamesOf returns the commands' names.
func commandNamesOf(tree []commandEntry) []string {
	var out []string
	for _, e := range tree {
		out = append(out, e.name)
	}
	return out
}

// writeBash writes the bash script: the first word that is not a flag is
// the command, the next one its subcommand; anything later is a file.
func writeBash(w io.Writer, tree []commandEntry) error {
	var b strings.Builder
	b.WriteString(`# bash completion for kvfence: source <(kvfence completion bash)
_kvfence() {
	local cur="${COMP_WORDS[COMP_CWORD]}" cmd="" pos=0 i w
	for ((i = 1; i < COMP_CWORD; i++)); do
		w="${COMP_WORDS[i]}"
		case "$w" in
		-*) ;;
		*)
			if [[ -z "$cmd" ]]; then
				cmd="$w"
				pos=$i
			fi
			;;
		esac
	done
	if [[ -z "$cmd" ]]; then
		COMPREPLY=($(compgen -W "help --json --version `)
	b.WriteString(strings.Join(commandNamesOf(tree), " "))
	b.WriteString(`" -- "$cur"))
		return
	fi
	local subs=""
	case "$cmd" in
`)
	for _, e := range tree {
		if len(e.subs) > 0 {
			fmt.Fprintf(&b, "\t%s) subs=%q ;;\n", e.name, strings.Join(e.subs, " "))
		}
	}
	fmt.Fprintf(&b, "\thelp) subs=%q ;;\n", strings.Join(append(commandNamesOf(tree), "etcd"), " "))
	b.WriteString(`	esac
	if [[ -n "$subs" && $COMP_CWORD -eq $((pos + 1)) && "$cur" != -* ]]; then
		COMPREPLY=($(compgen -W "$subs" -- "$cur"))
		return
	fi
	COMPREPLY=($(compgen -f -- "$cur"))
}
complete -o default -F _kvfence kvfence
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeZsh writes the zsh script, which uses bash's through bashcompinit,
// so that both shells complete exactly the same words.
func writeZsh(w io.Writer, tree []commandEntry) error {
	if _, err := io.WriteString(w, "#compdef kvfence\n# zsh completion for kvfence: source <(kvfence completion zsh)\n"+
		"autoload -U +X bashcompinit && bashcompinit\n"); err != nil {
		return err
	}
	return writeBash(w, tree)
}

// writeFish writes the fish script.
func writeFish(w io.Writer, tree []commandEntry) error {
	var b strings.Builder
	b.WriteString("# fish completion for kvfence: kvfence completion fish | source\n")
	all := strings.Join(commandNamesOf(tree), " ")
	fmt.Fprintf(&b, "complete -c kvfence -n 'not __fish_seen_subcommand_from %s help' -a %q\n", all, all+" help")
	for _, e := range tree {
		if len(e.subs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "complete -c kvfence -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from %s' -a %q\n",
			e.name, strings.Join(e.subs, " "), strings.Join(e.subs, " "))
	}
	fmt.Fprintf(&b, "complete -c kvfence -n '__fish_seen_subcommand_from help' -a %q\n", all+" etcd")
	b.WriteString("complete -c kvfence -l json -d 'one JSON document on stdout'\n")
	_, err := io.WriteString(w, b.String())
	return err
}
