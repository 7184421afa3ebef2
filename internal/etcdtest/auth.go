package etcdtest

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ApplyEtcdctl runs the etcdctl auth commands of script, one per line, through
// etcd's auth API, so that a document's commands are what a test sets up:
// user add, user grant-role, role add, role grant-permission and auth
// enable. Each line is
//
//	etcdctl --endpoints "$VAR" SUBCOMMAND ...
//
// and runs on clients[VAR]. A user's password is given on etcdctl's
// standard input, --interactive=false < FILE, and taken from
// passwords[FILE]. Lines
// that do not begin with "etcdctl" are skipped; any other command, flag or
// form is an error, so that a document cannot hold a command the test
// does not run.
func ApplyEtcdctl(ctx context.Context, script string, clients map[string]*clientv3.Client, passwords map[string]string) (int, error) {
	n := 0
	for line := range strings.SplitSeq(script, "\n") {
		f, err := shellFields(strings.TrimSpace(line))
		if err != nil {
			return n, fmt.Errorf("%q: %w", line, err)
		}
		if len(f) == 0 || f[0] != "etcdctl" {
			continue
		}
		if len(f) < 5 || f[1] != "--endpoints" || !strings.HasPrefix(f[2], "$") {
			return n, fmt.Errorf("%q: want etcdctl --endpoints \"$VAR\" SUBCOMMAND", line)
		}
		cli := clients[f[2][1:]]
		if cli == nil {
			return n, fmt.Errorf("%q: no cluster for %s", line, f[2])
		}
		if err := applyOne(ctx, cli, f[3:], passwords); err != nil {
			return n, fmt.Errorf("%q: %w", line, err)
		}
		n++
	}
	return n, nil
}

func applyOne(ctx context.Context, cli *clientv3.Client, a []string, passwords map[string]string) error {
	switch {
	case len(a) == 6 && a[0] == "user" && a[1] == "add" && a[3] == "--interactive=false" && a[4] == "<":
		pw := passwords[a[5]]
		if pw == "" {
			return fmt.Errorf("password file %q: not one the test knows", a[5])
		}
		_, err := cli.UserAdd(ctx, a[2], pw)
		return err
	case len(a) == 4 && a[0] == "user" && a[1] == "grant-role":
		_, err := cli.UserGrantRole(ctx, a[2], a[3])
		return err
	case len(a) == 3 && a[0] == "role" && a[1] == "add":
		_, err := cli.RoleAdd(ctx, a[2])
		return err
	case (len(a) == 5 || len(a) == 6) && a[0] == "role" && a[1] == "grant-permission":
		perm, ok := map[string]clientv3.PermissionType{"read": clientv3.PermissionType(clientv3.PermRead),
			"write": clientv3.PermissionType(clientv3.PermWrite), "readwrite": clientv3.PermissionType(clientv3.PermReadWrite)}[a[3]]
		if !ok {
			return fmt.Errorf("permission %q: want read, write or readwrite", a[3])
		}
		key, end := a[4], ""
		if len(a) == 6 {
			if a[5] != "--prefix=true" {
				return fmt.Errorf("flag %q: only --prefix=true is known", a[5])
			}
			end = clientv3.GetPrefixRangeEnd(key)
		}
		_, err := cli.RoleGrantPermission(ctx, a[2], key, end, perm)
		return err
	case len(a) == 2 && a[0] == "auth" && a[1] == "enable":
		_, err := cli.AuthEnable(ctx)
		return err
	}
	return fmt.Errorf("unknown command %q", strings.Join(a, " "))
}

// shellFields splits a command line into words as a shell would for the
// forms ApplyEtcdctl knows: blanks separate words, double quotes group, and
// a '#' outside quotes starts a comment.
func shellFields(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			in, have = !in, true
		case !in && (r == ' ' || r == '\t'):
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		case !in && r == '#' && !have:
			return out, nil
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if in {
		return nil, fmt.Errorf("unterminated quote")
	}
	if have {
		out = append(out, cur.String())
	}
	return out, nil
}
