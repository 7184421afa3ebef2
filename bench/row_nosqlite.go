//go:build race || kvfencelab || kvfence_nosqlite

package bench

// sqliteRows is empty in a build without SQLite (row_sqlite.go says why):
// the table has no SQLite rows, and naming one is ErrUnknownRow.
var sqliteRows []row
