// Package backup reads and writes kvfence backup files: a consistent copy
// of a receiver's bbolt database together with the signed checkpoint of
// its newest entry (kvfence.Receiver.Snapshot), in one framed file.
//
// A backup file is, in order (docs/design.md §7.9):
//
//	magic       16 bytes  "kvfence-backup\n\x01" (the last byte is the version)
//	cp_len      4 bytes   big-endian length of the checkpoint, 1 to MaxCheckpointSize
//	checkpoint  cp_len    the signed checkpoint (audit.SignedCheckpoint.Marshal)
//	db_len      8 bytes   big-endian length of the database, 1 to 2^62
//	database    db_len    the bbolt database file, as bbolt's Tx.WriteTo writes it
//	sum         32 bytes  SHA-256 of every byte before it
//
// and nothing after. GET /v1/backup answers with exactly these bytes.
//
// Save writes a stream to a file and Restore writes a backup's database
// to the path a receiver opens. Both trust nothing they read: the frame's
// lengths and sum, the checkpoint's signature under the operator's copy
// of the receiver's public key, and then kvfence.VerifyChain on the
// database against that checkpoint (chain, state digest, epoch
// high-water) must all pass before a file appears under its final name;
// they write to a temporary file beside it, fsync it, rename it into
// place and fsync the directory, and refuse to replace an existing file
// unless told to.
package backup
