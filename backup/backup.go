package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// Magic opens every backup file; its last byte is the format version.
const Magic = "kvfence-backup\n\x01"

// MaxCheckpointSize bounds a backup's checkpoint: a signed checkpoint is a
// few hundred bytes.
const MaxCheckpointSize = 64 << 10

// maxDatabaseSize bounds the database length a frame may declare, so that
// the file's total length fits an int64.
const maxDatabaseSize = 1 << 62

// ContentType is the media type of a backup stream.
const ContentType = api.ContentBackup

// Errors of reading a backup.
var (
	// ErrBadFormat means the bytes are not a backup file of this format.
	ErrBadFormat = errors.New("backup: not a kvfence backup file of a supported format")
	// ErrTruncated means the backup ends before the length its frame declares.
	ErrTruncated = errors.New("backup: truncated")
	// ErrSumMismatch means the backup's bytes do not hash to the sum at its end.
	ErrSumMismatch = errors.New("backup: the bytes do not match the backup's SHA-256")
	// ErrTrailingData means bytes follow the backup's sum.
	ErrTrailingData = errors.New("backup: data after the end of the backup")
	// ErrMismatch means the database does not verify against the checkpoint sent with it.
	ErrMismatch = errors.New("backup: the database does not match its checkpoint")
	// ErrExists means the output file exists and replacing it was not asked for.
	ErrExists = errors.New("backup: the output file exists")
	// ErrInUse means Restore, or Save with Overwrite, was asked to replace
	// a file that a process holds open (a running receiver's database).
	ErrInUse = errors.New("backup: the database is in use")
	// ErrTooLarge means the stream went past SaveOptions.MaxSize.
	ErrTooLarge = errors.New("backup: the backup is larger than the bound set for it")
)

// Length returns the number of bytes Write writes for s.
func Length(s kvfence.Snapshot) (int64, error) {
	cp, err := s.Checkpoint.Marshal()
	if err != nil {
		return 0, err
	}
	return headerLen(len(cp)) + s.Size + sha256.Size, nil
}

func headerLen(cpLen int) int64 { return int64(len(Magic) + 4 + cpLen + 8) }

// Write writes s to w as a backup file and returns the bytes written.
func Write(w io.Writer, s kvfence.Snapshot) (int64, error) {
	cp, err := s.Checkpoint.Marshal()
	if err != nil {
		return 0, err
	}
	if len(cp) == 0 || len(cp) > MaxCheckpointSize || s.Size <= 0 || s.Size > maxDatabaseSize {
		return 0, fmt.Errorf("%w: a checkpoint of %d bytes, a database of %d", ErrBadFormat, len(cp), s.Size)
	}
	sum := sha256.New()
	hw := &countWriter{w: io.MultiWriter(w, sum)}
	hdr := make([]byte, 0, headerLen(len(cp)))
	hdr = append(hdr, Magic...)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(cp)))
	hdr = append(hdr, cp...)
	hdr = binary.BigEndian.AppendUint64(hdr, uint64(s.Size))
	if _, err := hw.Write(hdr); err != nil {
		return hw.n, err
	}
	n, err := s.WriteTo(hw)
	if err != nil {
		return hw.n, err
	}
	if n != s.Size {
		// The frame declared Size: a reader would take what follows for
		// the sum.
		return hw.n, fmt.Errorf("backup: the database copy wrote %d bytes, not the %d declared", n, s.Size)
	}
	k, err := w.Write(sum.Sum(nil))
	return hw.n + int64(k), err
}

// countWriter counts what it passes on.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Unpack reads one backup file from r, writes its database to db and
// returns its checkpoint, decoded but not verified. It reads no further
// than the lengths the frame declares, then one more byte to refuse
// trailing data. Whatever it wrote to db before an error is not a
// database; the caller discards it.
func Unpack(r io.Reader, db io.Writer) (audit.SignedCheckpoint, error) {
	sum := sha256.New()
	br := bufio.NewReader(r)
	tr := io.TeeReader(br, sum)
	var magic [len(Magic)]byte
	if err := readFull(tr, magic[:], "the magic"); err != nil {
		return audit.SignedCheckpoint{}, err
	}
	if string(magic[:]) != Magic {
		return audit.SignedCheckpoint{}, fmt.Errorf("%w: the file does not begin with the backup magic", ErrBadFormat)
	}
	var n4 [4]byte
	if err := readFull(tr, n4[:], "the checkpoint's length"); err != nil {
		return audit.SignedCheckpoint{}, err
	}
	cpLen := binary.BigEndian.Uint32(n4[:])
	if cpLen == 0 || cpLen > MaxCheckpointSize {
		return audit.SignedCheckpoint{}, fmt.Errorf("%w: a checkpoint of %d bytes (1 to %d)", ErrBadFormat, cpLen, MaxCheckpointSize)
	}
	raw := make([]byte, cpLen)
	if err := readFull(tr, raw, "the checkpoint"); err != nil {
		return audit.SignedCheckpoint{}, err
	}
	sc, err := audit.ParseSignedCheckpoint(raw)
	if err != nil {
		return audit.SignedCheckpoint{}, fmt.Errorf("%w: the checkpoint: %w", ErrBadFormat, err)
	}
	var n8 [8]byte
	if err := readFull(tr, n8[:], "the database's length"); err != nil {
		return audit.SignedCheckpoint{}, err
	}
	dbLen := binary.BigEndian.Uint64(n8[:])
	if dbLen == 0 || dbLen > maxDatabaseSize {
		return audit.SignedCheckpoint{}, fmt.Errorf("%w: a database of %d bytes", ErrBadFormat, dbLen)
	}
	got, err := io.Copy(db, io.LimitReader(tr, int64(dbLen)))
	if errors.Is(err, io.ErrUnexpectedEOF) {
		// A stream whose declared length the sender did not keep to.
		return audit.SignedCheckpoint{}, fmt.Errorf("%w: the database ends after %d of its %d bytes: %w", ErrTruncated, got, dbLen, err)
	}
	if err != nil {
		return audit.SignedCheckpoint{}, fmt.Errorf("backup: copying the database: %w", err)
	}
	if uint64(got) != dbLen {
		return audit.SignedCheckpoint{}, fmt.Errorf("%w: the database ends after %d of its %d bytes", ErrTruncated, got, dbLen)
	}
	want := sum.Sum(nil)
	var have [sha256.Size]byte
	if err := readFull(br, have[:], "the SHA-256"); err != nil {
		return audit.SignedCheckpoint{}, err
	}
	if !bytes.Equal(have[:], want) {
		return audit.SignedCheckpoint{}, fmt.Errorf("%w: the file says %x, its bytes hash to %x", ErrSumMismatch, have[:], want)
	}
	if _, err := br.ReadByte(); err == nil {
		return audit.SignedCheckpoint{}, ErrTrailingData
	} else if !errors.Is(err, io.EOF) {
		return audit.SignedCheckpoint{}, fmt.Errorf("backup: reading past the sum: %w", err)
	}
	return sc, nil
}

// readFull reads len(b) bytes; a short read is ErrTruncated, naming what.
func readFull(r io.Reader, b []byte, what string) error {
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: the file ends in %s", ErrTruncated, what)
		}
		return fmt.Errorf("backup: reading %s: %w", what, err)
	}
	return nil
}
