// SQLite is by far the slowest dependency to compile (modernc.org/sqlite,
// SQLite's C translated to Go: 90 s on 2 cores, most of it one package
// that no other can share), and a build under the race detector or of the
// lab has no use for its rows: their timings mean nothing under the
// detector, and the lab measures nothing. So only a plain build has them;
// kvfence_nosqlite leaves them out of others (the test builds of the
// command, internal/testbin).

//go:build !race && !kvfencelab && !kvfence_nosqlite

package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
	"modernc.org/sqlite"
)

// sqliteRows are the SQLite rows of the table.
var sqliteRows = []row{
	{RowSQLite, true, func(ctx context.Context, dir string, _ int) (cell, error) {
		return openSQLite(ctx, dir, sqliteWAL)
	}, nil, false},
	{RowSQLiteRollback, true, func(ctx context.Context, dir string, _ int) (cell, error) {
		return openSQLite(ctx, dir, sqliteRollback)
	}, nil, false},
}

// sqliteJournal is how a SQLite row journals its commits.
type sqliteJournal int

const (
	sqliteWAL      sqliteJournal = iota // journal_mode=WAL, synchronous=FULL
	sqliteRollback                      // journal_mode=DELETE, synchronous=FULL
)

// sqliteSchema mirrors the receiver's buckets as tables.
const sqliteSchema = `
CREATE TABLE control (scope TEXT PRIMARY KEY, epoch INTEGER NOT NULL, mode TEXT NOT NULL,
	active_grant TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE grants (id TEXT PRIMARY KEY, scope TEXT NOT NULL, epoch INTEGER NOT NULL,
	executor TEXT NOT NULL, claim TEXT NOT NULL, action TEXT NOT NULL, request_sha256 BLOB NOT NULL,
	not_before INTEGER NOT NULL, not_after INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE targets (name TEXT PRIMARY KEY, scope TEXT NOT NULL, revision INTEGER NOT NULL,
	value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE receipts (scope TEXT NOT NULL, action TEXT NOT NULL, grant_id TEXT NOT NULL,
	request_sha256 BLOB NOT NULL, target TEXT NOT NULL, rev_before INTEGER NOT NULL,
	rev_after INTEGER NOT NULL, audit_seq INTEGER NOT NULL, at INTEGER NOT NULL,
	PRIMARY KEY (scope, action)) WITHOUT ROWID;
CREATE TABLE events (seq INTEGER PRIMARY KEY, hash BLOB NOT NULL, entry BLOB NOT NULL);
`

// sqliteCell runs the fenced transaction of Submit on SQLite: decode the
// envelope and request strictly, then in one transaction read the control
// record, the grant, the receipt and the target, check them in the
// receiver's order, update the target, insert the receipt and append an
// audit entry chained to the previous one with the audit package's
// encoding and hash. Every operation applies, as in kvfence_submit.
//
// SQLite admits one writer at a time; the database has one connection, so
// concurrent writers queue in database/sql rather than in SQLite's
// busy-wait, which sleeps in steps of milliseconds.
type sqliteCell struct {
	db      *sql.DB
	path    string
	journal sqliteJournal
	stmts   map[string]*sql.Stmt
	base    int64
	envs    [][]byte
	scopes  int
	commits atomic.Int64
	// walCkpt0 is the WAL header's checkpoint sequence number at open.
	walCkpt0 uint32
}

var sqliteStatements = map[string]string{
	"control":    `SELECT epoch, mode, active_grant FROM control WHERE scope = ?`,
	"grant":      `SELECT scope, epoch, executor, claim, action, request_sha256, not_before, not_after FROM grants WHERE id = ?`,
	"receipt":    `SELECT request_sha256 FROM receipts WHERE scope = ? AND action = ?`,
	"target":     `SELECT scope, revision, value FROM targets WHERE name = ?`,
	"update":     `UPDATE targets SET revision = ?, value = ? WHERE name = ?`,
	"insReceipt": `INSERT INTO receipts (scope, action, grant_id, request_sha256, target, rev_before, rev_after, audit_seq, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	"head":       `SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1`,
	"insEvent":   `INSERT INTO events (seq, hash, entry) VALUES (?, ?, ?)`,
}

func openSQLite(ctx context.Context, dir string, journal sqliteJournal) (cell, error) {
	// SQLite's Linux builds commit with fdatasync; this translation
	// defaults to fsync. The switch is process-wide and harmless here.
	if _, err := sqlite.Fdatasync(true); err != nil && !errors.Is(err, sqlite.ErrFdatasyncUnavailable) {
		return nil, err
	}
	mode := "WAL"
	if journal == sqliteRollback {
		mode = "DELETE"
	}
	path := filepath.Join(dir, "fenced.sqlite")
	dsn := "file:" + path + "?_pragma=journal_mode(" + mode + ")&_pragma=synchronous(FULL)" +
		"&_pragma=busy_timeout(10000)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	c := &sqliteCell{db: db, path: path, journal: journal, stmts: map[string]*sql.Stmt{}}
	if err := c.init(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return c, nil
}

func (c *sqliteCell) init(ctx context.Context) error {
	if _, err := c.db.ExecContext(ctx, sqliteSchema); err != nil {
		return err
	}
	for name, q := range sqliteStatements {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		c.stmts[name] = st
	}
	// The chain starts as a receiver's does, with an entry of its own.
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	ch := audit.NewChain(audit.Head{})
	raw, h, err := ch.Append(&audit.Entry{Kind: kvfence.KindInit, At: time.Now().UnixNano(), Note: "receiver bench"})
	if err != nil {
		return err
	}
	if _, err := tx.StmtContext(ctx, c.stmts["insEvent"]).ExecContext(ctx, 1, h[:], raw); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	c.walCkpt0, err = c.walCheckpoints()
	return err
}

// prepare inserts, in one transaction, a scope with an active grant and a
// target for each operation, as an administrator's activation would leave
// them, and encodes the envelopes. Scopes of the previous round are
// reused: their control records are moved to a new epoch and grant.
func (c *sqliteCell) prepare(ctx context.Context, from, n int64) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := time.Now()
	envs := make([][]byte, n)
	for k := range envs {
		op := from + int64(k)
		scope, target := scopeName(k), targetName(k)
		epoch := op + 1
		value := record(op)
		req, err := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: fmt.Sprintf("op-%d", op),
			Target: target, Set: &value})
		if err != nil {
			return err
		}
		var id [16]byte
		if _, err := io.ReadFull(rand.Reader, id[:]); err != nil {
			return err
		}
		grant := hex.EncodeToString(id[:])
		sum := sha256.Sum256(req)
		if k >= c.scopes {
			if _, err := tx.ExecContext(ctx, `INSERT INTO targets (name, scope, revision, value) VALUES (?, ?, 1, ?)`,
				target, scope, record(2)); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO control (scope, epoch, mode, active_grant) VALUES (?, ?, 'open', ?)`,
			scope, epoch, grant); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO grants (id, scope, epoch, executor, claim, action, request_sha256, not_before, not_after) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			grant, scope, epoch, benchExecutor, benchClaim, fmt.Sprintf("op-%d", op), sum[:],
			now.Add(-time.Minute).UnixNano(), now.Add(grantTTL).UnixNano()); err != nil {
			return err
		}
		if envs[k], err = kvfence.EncodeEnvelope(&kvfence.Envelope{V: kvfence.WireVersion, Scope: scope, Epoch: uint64(epoch),
			Grant: grant, Executor: benchExecutor, Claim: benchClaim, Request: req}); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	c.scopes = max(c.scopes, int(n))
	c.base, c.envs = from, envs
	return nil
}

func (c *sqliteCell) op(ctx context.Context, _ int, i int64) (err error) {
	k := i - c.base
	raw := c.envs[k]
	c.envs[k] = nil
	env, err := kvfence.DecodeEnvelope(raw, 0)
	if err != nil {
		return err
	}
	req, err := kvfence.DecodeRequest(env.Request, 0)
	if err != nil {
		return err
	}
	digest := sha256.Sum256(env.Request)
	now := time.Now().UnixNano()
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	st := func(name string) *sql.Stmt { return tx.StmtContext(ctx, c.stmts[name]) }
	deny := func(check string) error { return fmt.Errorf("%w: operation %d: %s", errSQLiteDenied, i, check) }

	var epoch uint64
	var mode, active string
	if err := st("control").QueryRowContext(ctx, env.Scope).Scan(&epoch, &mode, &active); err != nil {
		return deny("unknown scope: " + err.Error())
	}
	if mode != "open" || epoch != env.Epoch || active != env.Grant {
		return deny("stale authority")
	}
	var g struct {
		scope, executor, claim, action string
		epoch                          uint64
		sum                            []byte
		notBefore, notAfter            int64
	}
	if err := st("grant").QueryRowContext(ctx, env.Grant).Scan(&g.scope, &g.epoch, &g.executor, &g.claim, &g.action,
		&g.sum, &g.notBefore, &g.notAfter); err != nil {
		return deny("unknown grant: " + err.Error())
	}
	switch {
	case g.scope != env.Scope || g.epoch != env.Epoch:
		return deny("unknown grant")
	case benchExecutor != env.Executor || env.Executor != g.executor:
		return deny("executor mismatch")
	case env.Claim != g.claim:
		return deny("claim mismatch")
	case !bytes.Equal(digest[:], g.sum) || req.Action != g.action:
		return deny("request mismatch")
	case now < g.notBefore || now >= g.notAfter:
		return deny("outside the grant's window")
	}
	var prior []byte
	switch err := st("receipt").QueryRowContext(ctx, env.Scope, req.Action).Scan(&prior); {
	case err == nil:
		return deny("action already applied")
	case !errors.Is(err, sql.ErrNoRows):
		return err
	}
	var tscope string
	var rev uint64
	var value []byte
	if err := st("target").QueryRowContext(ctx, req.Target).Scan(&tscope, &rev, &value); err != nil || tscope != env.Scope {
		return deny("unknown target")
	}
	if req.Set == nil {
		return deny("not a set request")
	}
	if _, err := st("update").ExecContext(ctx, rev+1, *req.Set, req.Target); err != nil {
		return err
	}
	var head audit.Head
	var hash []byte
	if err := st("head").QueryRowContext(ctx).Scan(&head.Seq, &hash); err != nil {
		return err
	}
	copy(head.Hash[:], hash)
	vsum := sha256.Sum256(*req.Set)
	ch := audit.NewChain(head)
	entry, h, err := ch.Append(&audit.Entry{At: now, Kind: kvfence.KindSubmit, Scope: env.Scope, Epoch: env.Epoch,
		Grant: env.Grant, Executor: benchExecutor, Action: req.Action, Outcome: string(kvfence.Applied),
		RequestSHA256: digest[:], Target: req.Target, RevBefore: rev, RevAfter: rev + 1, ValueSHA256: vsum[:]})
	if err != nil {
		return err
	}
	if _, err := st("insReceipt").ExecContext(ctx, env.Scope, req.Action, env.Grant, digest[:], req.Target, rev, rev+1,
		head.Seq+1, now); err != nil {
		return err
	}
	if _, err := st("insEvent").ExecContext(ctx, head.Seq+1, h[:], entry); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	c.commits.Add(1)
	return nil
}

// syncs computes SQLite's calls from the commits counted and, in WAL mode,
// the checkpoint cycles counted by the WAL header (see the package
// documentation).
func (c *sqliteCell) syncs() (float64, error) {
	commits := float64(c.commits.Load())
	if c.journal == sqliteRollback {
		return 4 * commits, nil
	}
	ckpt, err := c.walCheckpoints()
	if err != nil {
		return 0, err
	}
	return commits + 3*float64(ckpt-c.walCkpt0), nil
}

// walCheckpoints reads the checkpoint sequence number from the WAL file's
// header (bytes 12 to 15, big-endian), which SQLite increments each time
// the log restarts after a checkpoint. A missing WAL reads as 0.
func (c *sqliteCell) walCheckpoints() (uint32, error) {
	if c.journal != sqliteWAL {
		return 0, nil
	}
	f, err := os.Open(c.path + "-wal")
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var hdr [16]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil
		}
		return 0, err
	}
	return binary.BigEndian.Uint32(hdr[12:]), nil
}

func (c *sqliteCell) close() error {
	for _, st := range c.stmts {
		st.Close()
	}
	return c.db.Close()
}
