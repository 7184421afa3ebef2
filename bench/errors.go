package bench

import "errors"

// Errors returned by Run and Scale before they measure anything.
var (
	// ErrUnknownRow means Options.Rows named a row that does not exist.
	ErrUnknownRow = errors.New("bench: unknown row")
	// ErrInvalidOptions means the options hold a value that cannot be used.
	ErrInvalidOptions = errors.New("bench: invalid options")
)

// errSQLiteDenied means the SQLite fenced transaction refused an operation
// that should have applied: a fault of the harness, not a result.
var errSQLiteDenied = errors.New("bench: sqlite fenced write denied")
