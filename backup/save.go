package backup

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/internal/dirsync"
	"github.com/kvfence/kvfence/kvfence"
)

// SaveOptions configures Save.
type SaveOptions struct {
	// Out is the backup file to write.
	Out string
	// PublicKey is the operator's copy of the receiver's public key, which
	// the checkpoint must verify under. Required.
	PublicKey ed25519.PublicKey
	// Overwrite replaces an existing Out; without it Save refuses to
	// (ErrExists).
	Overwrite bool
	// MaxSize, if positive, bounds the backup file's length: a stream
	// longer than that is refused (ErrTooLarge) once it has gone past it,
	// so that a sender cannot fill the disk. Zero means no bound.
	MaxSize int64
}

// Check refuses options that Save would refuse before reading anything: a
// missing key, an existing Out without Overwrite, and an Out that a
// process holds open (ErrInUse: a running receiver's database, named by
// mistake, which would go on being written unlinked). A caller checks them
// before it asks a receiver for a backup; Save checks them again, and the
// final rename once more.
func (o SaveOptions) Check() error {
	if err := checkKey(o.PublicKey); err != nil {
		return err
	}
	if err := refuseExisting(o.Out, o.Overwrite); err != nil {
		return err
	}
	return refuseInUse(o.Out)
}

// RestoreOptions configures Restore.
type RestoreOptions struct {
	// DB is the database file to write, the path the receiver opens.
	DB string
	// PublicKey is as in SaveOptions.
	PublicKey ed25519.PublicKey
	// Overwrite replaces an existing DB; without it Restore refuses to
	// (ErrExists).
	Overwrite bool
}

// Result describes a backup that verified.
type Result struct {
	// Checkpoint is the backup's signed checkpoint: the head and state of
	// the database in it.
	Checkpoint audit.SignedCheckpoint
	// Report is kvfence.VerifyChain's report on the database against the
	// checkpoint.
	Report audit.Report
	// Size is the backup file's length in bytes (Save), or the database's
	// (Restore).
	Size int64
}

// Save reads a backup stream from src (GET /v1/backup's body, or Write's
// output) into opts.Out. It writes a temporary file in Out's directory,
// and the database it holds to another, fsyncs both, verifies them
// (Check), and only then renames the first to Out and fsyncs the
// directory; on any error both are removed and Out is untouched. A
// truncated or altered stream, a checkpoint not signed by
// opts.PublicKey, or a database that does not verify against the
// checkpoint is refused.
func Save(ctx context.Context, src io.Reader, opts SaveOptions) (Result, error) {
	if err := opts.Check(); err != nil {
		return Result{}, err
	}
	dir, base := filepath.Split(opts.Out)
	tmp, err := createTemp(dir, base)
	if err != nil {
		return Result{}, err
	}
	defer removeTemp(tmp)
	db, err := createTemp(dir, base+".db")
	if err != nil {
		return Result{}, err
	}
	defer removeTemp(db)
	cw := &countWriter{w: tmp}
	var in io.Reader = &ctxReader{ctx: ctx, r: src}
	if opts.MaxSize > 0 {
		in = &maxReader{r: in, left: opts.MaxSize}
	}
	sc, err := Unpack(io.TeeReader(in, cw), db)
	if err != nil {
		return Result{}, err
	}
	if err := syncClose(tmp); err != nil {
		return Result{}, err
	}
	if err := syncClose(db); err != nil {
		return Result{}, err
	}
	rep, err := checkPublish(db.Name(), tmp.Name(), opts.Out, sc, opts.PublicKey, opts.Overwrite)
	if err != nil {
		return Result{}, err
	}
	return Result{Checkpoint: sc, Report: rep, Size: cw.n}, nil
}

// Restore writes the database of the backup file in to opts.DB, for a
// stopped receiver to open (a DB that a process holds open is refused,
// ErrInUse, where the platform tells): a temporary file beside DB, verified as Save
// verifies, fsynced, renamed to DB, the directory fsynced. The receiver
// then finds its anchor ahead of the restored database (a rollback), and
// is re-admitted with a recovery admission (kvfence.Recover).
func Restore(ctx context.Context, in string, opts RestoreOptions) (Result, error) {
	if err := checkKey(opts.PublicKey); err != nil {
		return Result{}, err
	}
	if err := refuseExisting(opts.DB, opts.Overwrite); err != nil {
		return Result{}, err
	}
	if err := refuseInUse(opts.DB); err != nil {
		return Result{}, err
	}
	f, err := os.Open(in)
	if err != nil {
		return Result{}, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return Result{}, fmt.Errorf("%w: %s is not a regular file", ErrBadFormat, in)
	}
	dir, base := filepath.Split(opts.DB)
	db, err := createTemp(dir, base)
	if err != nil {
		return Result{}, err
	}
	defer removeTemp(db)
	cw := &countWriter{w: db}
	sc, err := Unpack(&ctxReader{ctx: ctx, r: f}, cw)
	if err != nil {
		return Result{}, err
	}
	if err := syncClose(db); err != nil {
		return Result{}, err
	}
	rep, err := checkPublish(db.Name(), db.Name(), opts.DB, sc, opts.PublicKey, opts.Overwrite)
	if err != nil {
		return Result{}, err
	}
	return Result{Checkpoint: sc, Report: rep, Size: cw.n}, nil
}

// checkPublish checks the database at db against sc (Check), then moves
// the file from into place at to. to is checked for a process holding it
// open again just before the move: one may have opened it since the
// first check.
func checkPublish(db, from, to string, sc audit.SignedCheckpoint, pub ed25519.PublicKey, overwrite bool) (audit.Report, error) {
	rep, err := Check(db, sc, pub)
	if err != nil {
		return audit.Report{}, err
	}
	if err := refuseInUse(to); err != nil {
		return audit.Report{}, err
	}
	if err := publish(from, to, overwrite); err != nil {
		return audit.Report{}, err
	}
	return rep, nil
}

// Check verifies the database file at db against sc: sc's signature under
// pub, then kvfence.VerifyChain with sc as the anchor, which must find
// the chain whole, ending exactly at sc's head, and the state records
// hashing to what sc commits to. It changes nothing.
func Check(db string, sc audit.SignedCheckpoint, pub ed25519.PublicKey) (audit.Report, error) {
	if err := checkKey(pub); err != nil {
		return audit.Report{}, err
	}
	if err := sc.Verify(pub); err != nil {
		return audit.Report{}, fmt.Errorf("backup: the checkpoint: %w", err)
	}
	anchor := &audit.MemAnchor{}
	if err := anchor.Store(nil, sc); err != nil {
		return audit.Report{}, fmt.Errorf("backup: the checkpoint: %w", err)
	}
	// The checkpoint is the backup's own, wherever the receiver keeps its
	// live anchor (a file, or a key on an etcd cluster that the database
	// records).
	rep, err := kvfence.VerifyChain(db, kvfence.VerifyOptions{Anchor: anchor, PublicKey: pub, AnchorIsCheckpoint: true})
	if err != nil {
		return rep, fmt.Errorf("%w: %w", ErrMismatch, err)
	}
	if !rep.OK() {
		return rep, fmt.Errorf("%w: %s: %w", ErrMismatch, rep.Problem, rep.Err())
	}
	if rep.Head != (audit.Head{Seq: sc.Seq, Hash: sc.Head}) {
		// The checkpoint is the database's newest: a chain past it is a
		// database other than the one it was sent with.
		return rep, fmt.Errorf("%w: the chain ends at seq %d, the checkpoint covers seq %d", ErrMismatch, rep.Head.Seq, sc.Seq)
	}
	return rep, nil
}

func checkKey(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: the receiver's public key is required", kvfence.ErrInvalidArgument)
	}
	return nil
}

// refuseExisting refuses path if it exists (a dangling symbolic link
// included) and overwrite is false. publish checks again at the rename;
// this check only spares a download that would be refused at the end.
func refuseExisting(path string, overwrite bool) error {
	if path == "" {
		return fmt.Errorf("%w: no output file", kvfence.ErrInvalidArgument)
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("backup: %w", err)
	case !overwrite:
		return fmt.Errorf("%w: %s", ErrExists, path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file, and is not replaced", ErrExists, path)
	}
	return nil
}

func createTemp(dir, base string) (*os.File, error) {
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return f, nil
}

// removeTemp closes and removes a temporary file; after a publish its name
// is gone and the removal finds nothing.
func removeTemp(f *os.File) {
	f.Close()
	os.Remove(f.Name())
}

func syncClose(f *os.File) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

// publish gives the verified temporary file tmp its final name and fsyncs
// the directory. Without overwrite it links, which fails if the name was
// taken meanwhile, where a rename would replace it.
func publish(tmp, final string, overwrite bool) error {
	if overwrite {
		if err := os.Rename(tmp, final); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
	} else {
		if err := os.Link(tmp, final); err != nil {
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%w: %s", ErrExists, final)
			}
			return fmt.Errorf("backup: %w", err)
		}
		if err := os.Remove(tmp); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
	}
	dir := filepath.Dir(final)
	if err := dirsync.Sync(dir); err != nil {
		return fmt.Errorf("backup: syncing %s: %w", dir, err)
	}
	return nil
}

// ctxReader fails a read once ctx is done, so that a stalled stream can be
// given up.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// maxReader fails with ErrTooLarge once more than its bound was asked of
// it and there is more to read.
type maxReader struct {
	r    io.Reader
	left int64
}

func (m *maxReader) Read(p []byte) (int, error) {
	if m.left <= 0 {
		var one [1]byte
		if n, _ := m.r.Read(one[:]); n > 0 {
			return 0, ErrTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > m.left {
		p = p[:m.left]
	}
	n, err := m.r.Read(p)
	m.left -= int64(n)
	return n, err
}
