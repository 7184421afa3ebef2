package boltengine

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvfence/kvfence/engine"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Options configure an Engine. The zero value has no limits and bbolt's
// default fill percent.
type Options struct {
	// Limits bound one Update; zero fields mean no bound.
	Limits engine.Limits
	// FillPercent sets how full the pages of the named buckets are before
	// they split. A bucket whose keys are only ever appended in order (an
	// audit chain) wastes half its pages at bbolt's default of 0.5.
	FillPercent map[string]float64
}

// Engine runs the seam's transactions on a bbolt database.
type Engine struct {
	db   *bolt.DB
	lim  engine.Limits
	fill map[string]float64
}

var _ engine.Engine = (*Engine)(nil)

// New returns an engine over db, which it then owns: Close closes db.
// opts may be nil.
func New(db *bolt.DB, opts *Options) *Engine {
	e := &Engine{db: db}
	if opts != nil {
		e.lim = opts.Limits
		if len(opts.FillPercent) > 0 {
			e.fill = make(map[string]float64, len(opts.FillPercent))
			for k, v := range opts.FillPercent {
				e.fill[k] = v
			}
		}
	}
	return e
}

// DB returns the bbolt database, for what is not part of the seam (its
// path, its statistics).
func (e *Engine) DB() *bolt.DB { return e.db }

// FreeSpace returns the bytes the database file can still grow by: the
// free space of its volume available to this process, no more than the
// process's file-size limit leaves (see freeSpace). A caller keeps a
// reserve against it; on a platform without statfs it is unbounded.
func (e *Engine) FreeSpace() (int64, error) { return freeSpace(e.db.Path()) }

// Limits returns the limits given in Options.
func (e *Engine) Limits() engine.Limits { return e.lim }

// Close closes the database.
func (e *Engine) Close() error { return e.db.Close() }

// Update runs fn once in a bbolt write transaction. bbolt syncs the commit
// to disk before Update returns (unless the database was opened NoSync).
func (e *Engine) Update(ctx context.Context, fn func(engine.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := e.db.Update(func(btx *bolt.Tx) error {
		t := newTx(e, btx, true)
		err := fn(t)
		if t.tooLarge != nil {
			return t.tooLarge
		}
		return err
	})
	return mapErr(err)
}

// View runs fn once in a bbolt read transaction.
func (e *Engine) View(ctx context.Context, fn func(engine.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return mapErr(e.db.View(func(btx *bolt.Tx) error { return fn(newTx(e, btx, false)) }))
}

// mapErr turns bbolt's closed-database error into the seam's.
func mapErr(err error) error {
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w: %w", engine.ErrClosed, err)
	}
	return err
}

// InTx runs fn through the seam inside btx, a bbolt write transaction that
// the caller runs and commits (a file's first transaction, made before any
// engine exists over it). opts may be nil; its limits apply.
func InTx(btx *bolt.Tx, opts *Options, fn func(engine.Tx) error) error {
	t := newTx(New(nil, opts), btx, btx.Writable())
	err := fn(t)
	if t.tooLarge != nil {
		return t.tooLarge
	}
	return err
}
