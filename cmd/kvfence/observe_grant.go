package main

import (
	"context"
	"fmt"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// observeGrantJSON is the --json shape of observe grant: activate's shape
// with created_at, revoked_seq (0 if not revoked) and expired.
type observeGrantJSON = api.Grant

// grantSeen is a grant and whether it had expired by the receiver's clock.
type grantSeen struct {
	g       kvfence.Grant
	expired bool
}

func (c *ObserveCommand) grant(ctx context.Context, args []string) (err error) {
	fs := newFlagSet("observe grant")
	cf := commonFlags{name: "observe grant"}
	cf.register(fs, withDB)
	var rf remoteFlags
	rf.register(fs)
	// The grant id is positional and flags may come before or after it.
	var ids []string
	if err := parseInterspersed(fs, c.Usage, args, func(a string) error { ids = append(ids, a); return nil }); err != nil {
		return err
	}
	if len(ids) != 1 || ids[0] == "" {
		return &usageError{msg: "kvfence observe grant: exactly one grant id is required", hint: "kvfence status, to see each scope's active grant"}
	}
	cf.resolve(fs, c.m.Getenv)
	if err := rf.check(fs, "observe grant"); err != nil {
		return err
	}
	seen, err := either(&cf, &rf, false, c.m.warn,
		func(r *kvfence.Receiver) (grantSeen, error) {
			g, err := r.Grant(ids[0])
			return grantSeen{g, g.Expired(r.Now())}, err
		},
		func(cl *client.Client) (grantSeen, error) {
			g, expired, err := cl.Grant(ctx, ids[0])
			return grantSeen{g, expired}, err
		})
	if err != nil {
		return err
	}
	out := observeGrantJSON(api.GrantOf(seen.g, seen.expired))
	if cf.json {
		return writeJSON(c.m.Stdout, out)
	}
	tw := newTable(c.m.Stdout)
	fmt.Fprintf(tw, "grant\t%s\n", out.Grant)
	fmt.Fprintf(tw, "scope\t%s\n", out.Scope)
	fmt.Fprintf(tw, "epoch\t%d\n", out.Epoch)
	fmt.Fprintf(tw, "executor\t%s\n", out.Executor)
	fmt.Fprintf(tw, "claim\t%s\n", out.Claim)
	fmt.Fprintf(tw, "action\t%s\n", out.Action)
	fmt.Fprintf(tw, "request sha256\t%s\n", out.RequestSHA256)
	fmt.Fprintf(tw, "not before\t%s\n", humanTime(seen.g.NotBefore))
	fmt.Fprintf(tw, "not after\t%s\n", expiryText(seen.g, seen.expired))
	fmt.Fprintf(tw, "decision\t%s\n", orDash(out.Decision))
	fmt.Fprintf(tw, "created at\t%s\n", humanTime(seen.g.CreatedAt))
	fmt.Fprintf(tw, "audit seq\t%s\n", seqText(out.AuditSeq))
	fmt.Fprintf(tw, "revoked by recovery at seq\t%s\n", seqText(out.RevokedSeq))
	return tw.Flush()
}

// expiryText is a grant's end, marked "(expired)" when the receiver's
// clock is past it.
func expiryText(g kvfence.Grant, expired bool) string {
	if expired {
		return humanTime(g.NotAfter) + " (expired)"
	}
	return humanTime(g.NotAfter)
}

// seqText is an audit seq, "-" for none.
func seqText(seq uint64) string {
	if seq == 0 {
		return "-"
	}
	return fmt.Sprint(seq)
}
