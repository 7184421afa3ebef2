package audit

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
)

// archivePrefix domain-separates an archive statement's signature from a
// checkpoint's and an admission's: the receiver's key signs both
// checkpoints and archive statements, and neither may pass for the other.
const archivePrefix = "kvfence/archive/v1\n"

// archiveMagic is an archive file's first line.
const archiveMagic = "kvfence archive v1\n"

// maxStatementSize bounds an encoded signed archive statement.
const maxStatementSize = 2 << 10

// ArchiveStatement is a receiver's signed statement that an archive holds
// exactly the entries From.Seq+1 to To.Seq of its chain: the first links to
// the hash FromHash, the last hashes to ToHash, and the fence state replayed
// from the base record whose digest is FromFence up to To.Seq is the one
// whose base record has digest ToFence.
type ArchiveStatement struct {
	// Receiver is the receiver id.
	Receiver string
	// FromSeq is the base the archive continues: 0 for the start of the
	// chain.
	FromSeq uint64
	// FromHash is the entry hash at FromSeq; zero at the start.
	FromHash Hash
	// FromFence is the BaseDigest of the base record at FromSeq.
	FromFence Hash
	// ToSeq is the newest archived entry, above FromSeq.
	ToSeq uint64
	// ToHash is entry ToSeq's hash.
	ToHash Hash
	// ToFence is the BaseDigest of the base record at ToSeq.
	ToFence Hash
	// At is when the statement was signed: Unix nanoseconds, receiver
	// clock.
	At int64
}

// statementWire is the statement's encoding, keys in canonical order.
type statementWire struct {
	At        int64  `cbor:"at"`
	To        uint64 `cbor:"to_seq"`
	ToHash    []byte `cbor:"to_hash"`
	From      uint64 `cbor:"from_seq"`
	Receiver  string `cbor:"receiver"`
	ToFence   []byte `cbor:"to_fence"`
	FromHash  []byte `cbor:"from_hash"`
	FromFence []byte `cbor:"from_fence"`
}

func (s *ArchiveStatement) check() error {
	if err := checkReceiver(s.Receiver); err != nil {
		return fmt.Errorf("%w: statement: %w", ErrBadArchive, err)
	}
	if s.ToSeq <= s.FromSeq {
		return fmt.Errorf("%w: statement: to_seq %d is not above from_seq %d", ErrBadArchive, s.ToSeq, s.FromSeq)
	}
	if s.FromSeq == 0 && s.FromHash != (Hash{}) {
		return fmt.Errorf("%w: statement: from_seq 0 with a non-zero from_hash", ErrBadArchive)
	}
	return nil
}

func (s *ArchiveStatement) marshal() ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return baseEnc.Marshal(statementWire{At: s.At, To: s.ToSeq, From: s.FromSeq, ToHash: s.ToHash[:],
		Receiver: s.Receiver, ToFence: s.ToFence[:], FromHash: s.FromHash[:], FromFence: s.FromFence[:]})
}

func parseStatement(raw []byte) (ArchiveStatement, error) {
	var w statementWire
	if err := decMode.Unmarshal(raw, &w); err != nil {
		return ArchiveStatement{}, fmt.Errorf("%w: statement: %w", ErrBadArchive, err)
	}
	for _, h := range [][]byte{w.ToHash, w.ToFence, w.FromHash, w.FromFence} {
		if len(h) != HashSize {
			return ArchiveStatement{}, fmt.Errorf("%w: statement: a hash is %d bytes, want %d", ErrBadArchive, len(h), HashSize)
		}
	}
	s := ArchiveStatement{Receiver: w.Receiver, FromSeq: w.From, FromHash: Hash(w.FromHash), FromFence: Hash(w.FromFence),
		ToSeq: w.To, ToHash: Hash(w.ToHash), ToFence: Hash(w.ToFence), At: w.At}
	again, err := s.marshal()
	if err != nil {
		return ArchiveStatement{}, err
	}
	if !bytes.Equal(again, raw) {
		return ArchiveStatement{}, fmt.Errorf("%w: statement not in canonical form", ErrBadArchive)
	}
	return s, nil
}

// SignedArchiveStatement is an archive statement with the Ed25519 signature
// of the key whose fingerprint is Key.
type SignedArchiveStatement struct {
	// ArchiveStatement is the signed statement.
	ArchiveStatement
	// Key is the signing key's fingerprint; it is not signed itself.
	Key Fingerprint
	// Signature is Ed25519 over "kvfence/archive/v1\n" || statement.
	Signature [ed25519.SignatureSize]byte
}

// SignArchive signs st with priv.
func SignArchive(priv ed25519.PrivateKey, st ArchiveStatement) (SignedArchiveStatement, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return SignedArchiveStatement{}, fmt.Errorf("%w: private key is %d bytes, want %d", ErrBadKey, len(priv), ed25519.PrivateKeySize)
	}
	body, err := st.marshal()
	if err != nil {
		return SignedArchiveStatement{}, err
	}
	s := SignedArchiveStatement{ArchiveStatement: st, Key: KeyFingerprint(ed25519.PublicKey(priv[ed25519.SeedSize:]))}
	copy(s.Signature[:], ed25519.Sign(priv, append([]byte(archivePrefix), body...)))
	return s, nil
}

// Verify checks that s is signed by pub; the error wraps ErrBadSignature or
// ErrBadKey.
func (s SignedArchiveStatement) Verify(pub ed25519.PublicKey) error {
	body, err := s.marshal()
	if err != nil {
		return err
	}
	return verifySig(pub, s.Key, append([]byte(archivePrefix), body...), &s.Signature, "archive statement")
}

const keyArchive = "\x67archive"

func (s SignedArchiveStatement) marshalSigned() ([]byte, error) {
	body, err := s.marshal()
	if err != nil {
		return nil, err
	}
	return appendSigned(nil, keyArchive, s.Key, &s.Signature, body), nil
}

func parseSignedStatement(raw []byte) (SignedArchiveStatement, error) {
	var w struct {
		Key  []byte `cbor:"key"`
		Sig  []byte `cbor:"sig"`
		Body []byte `cbor:"archive"`
	}
	if err := decMode.Unmarshal(raw, &w); err != nil {
		return SignedArchiveStatement{}, fmt.Errorf("%w: signed statement: %w", ErrBadArchive, err)
	}
	var s SignedArchiveStatement
	if err := unpackSigned(&s.Key, &s.Signature, w.Key, w.Sig); err != nil {
		return SignedArchiveStatement{}, fmt.Errorf("%w: signed statement: %w", ErrBadArchive, err)
	}
	st, err := parseStatement(w.Body)
	if err != nil {
		return SignedArchiveStatement{}, err
	}
	s.ArchiveStatement = st
	if !bytes.Equal(appendSigned(nil, keyArchive, s.Key, &s.Signature, w.Body), raw) {
		return SignedArchiveStatement{}, fmt.Errorf("%w: signed statement not in canonical form", ErrBadArchive)
	}
	return s, nil
}

// ArchiveWriter writes an archive file (see Archive Format in the package
// documentation). Entries are checked as they are added, so that a writer
// never produces an archive its reader refuses.
type ArchiveWriter struct {
	w      *bufio.Writer
	st     SignedArchiveStatement
	walker *walker
	n      uint64
	err    error
}

// NewArchiveWriter writes the header of an archive of the entries after
// from up to st.ToSeq: the magic line, the signed statement and the encoded
// base record fromRaw, whose digest must be st.FromFence.
func NewArchiveWriter(w io.Writer, st SignedArchiveStatement, fromRaw []byte) (*ArchiveWriter, error) {
	from, err := ParseBase(fromRaw)
	if err != nil {
		return nil, err
	}
	if from.Seq != st.FromSeq || from.Hash != st.FromHash || BaseDigest(fromRaw) != st.FromFence {
		return nil, fmt.Errorf("%w: the base record is not the one the statement names", ErrBaseMismatch)
	}
	signed, err := st.marshalSigned()
	if err != nil {
		return nil, err
	}
	aw := &ArchiveWriter{w: bufio.NewWriterSize(w, 64<<10), st: st,
		walker: newBaseWalker(&from, fromRaw)}
	aw.w.WriteString(archiveMagic)
	aw.frame(signed)
	aw.frame(fromRaw)
	return aw, aw.err
}

func (aw *ArchiveWriter) frame(p []byte) {
	if aw.err != nil {
		return
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(p)))
	aw.w.Write(n[:])
	_, aw.err = aw.w.Write(p)
}

// Add writes the next entry, which must continue the chain.
func (aw *ArchiveWriter) Add(raw []byte) error {
	if aw.err != nil {
		return aw.err
	}
	seq := aw.walker.head.Seq + 1
	if seq > aw.st.ToSeq {
		return fmt.Errorf("%w: entry %d is past the statement's to_seq %d", ErrBadArchive, seq, aw.st.ToSeq)
	}
	if !aw.walker.step(SeqKey(seq), raw) {
		return aw.walker.err
	}
	aw.frame(raw)
	return aw.err
}

// Close flushes the archive after checking that it holds every entry the
// statement names. It does not close or sync the underlying writer.
func (aw *ArchiveWriter) Close() error {
	if aw.err != nil {
		return aw.err
	}
	if err := aw.walker.checkEnd(&aw.st.ArchiveStatement); err != nil {
		return err
	}
	return aw.w.Flush()
}

// ArchiveInfo describes an archive that verified.
type ArchiveInfo struct {
	// Statement is the archive's signed statement.
	Statement SignedArchiveStatement
	// From is the base record the archive continues.
	From Base
	// Entries is how many entries the archive holds.
	Entries uint64
}

// ArchiveError reports a problem found in an archive: Problem is the code
// Verify reports for it, Err the cause, wrapping the problem's sentinel.
type ArchiveError struct {
	// Name is the archive, as the caller named it.
	Name string
	// Problem is the code Verify reports, e.g. ProblemBadArchive,
	// ProblemBrokenLink or ProblemFenceViolation.
	Problem Problem
	// Err is the cause; it wraps the problem's sentinel.
	Err error
}

// Error names the archive and the problem.
func (e *ArchiveError) Error() string { return fmt.Sprintf("archive %s: %v", e.Name, e.Err) }

// Unwrap returns the cause.
func (e *ArchiveError) Unwrap() error { return e.Err }

// ReadArchive reads and verifies a whole archive, streaming: the magic
// line; the statement, which must be signed by pub for receiver; the base
// record, which must be the statement's FromFence; every entry, which must
// decode canonically and link to the one before it from FromHash on, with
// the fence replayed from the base record; exactly ToSeq-FromSeq entries,
// the last hashing to ToHash; the replayed fence state's base record
// hashing to ToFence; and nothing after. Each entry is also passed to
// visit, if it is not nil, after it verified. Errors are *ArchiveError,
// except faults reading r.
func ReadArchive(name string, r io.Reader, pub ed25519.PublicKey, receiver string, visit func(e *Entry, hash Hash)) (ArchiveInfo, error) {
	ar := archiveReader{name: name, r: bufio.NewReaderSize(r, 64<<10)}
	return ar.read(pub, receiver, visit)
}

type archiveReader struct {
	name string
	r    *bufio.Reader
	buf  []byte
}

func (ar *archiveReader) fail(p Problem, err error) error {
	return &ArchiveError{Name: ar.name, Problem: p, Err: err}
}

// next reads one frame of at most limit bytes; what says what it is for
// the error of a file cut short.
func (ar *archiveReader) next(limit int, what string) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(ar.r, n[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ar.fail(ProblemBadArchive, fmt.Errorf("%w: the file ends before %s (truncated)", ErrBadArchive, what))
		}
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if uint64(size) > uint64(limit) {
		return nil, ar.fail(ProblemBadArchive, fmt.Errorf("%w: %s is %d bytes, over the %d-byte limit", ErrBadArchive, what, size, limit))
	}
	if cap(ar.buf) < int(size) {
		ar.buf = make([]byte, size)
	}
	ar.buf = ar.buf[:size]
	if _, err := io.ReadFull(ar.r, ar.buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ar.fail(ProblemBadArchive, fmt.Errorf("%w: the file ends inside %s (truncated)", ErrBadArchive, what))
		}
		return nil, err
	}
	return ar.buf, nil
}

func (ar *archiveReader) read(pub ed25519.PublicKey, receiver string, visit func(*Entry, Hash)) (ArchiveInfo, error) {
	magic := make([]byte, len(archiveMagic))
	if _, err := io.ReadFull(ar.r, magic); err != nil || string(magic) != archiveMagic {
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return ArchiveInfo{}, err
		}
		return ArchiveInfo{}, ar.fail(ProblemBadArchive, fmt.Errorf("%w: not a kvfence archive (the first line is not %q)", ErrBadArchive, archiveMagic[:len(archiveMagic)-1]))
	}
	raw, err := ar.next(maxStatementSize, "the signed statement")
	if err != nil {
		return ArchiveInfo{}, err
	}
	st, err := parseSignedStatement(raw)
	if err != nil {
		return ArchiveInfo{}, ar.fail(ProblemBadArchive, err)
	}
	if err := st.Verify(pub); err != nil {
		return ArchiveInfo{}, ar.fail(ProblemBadSignature, err)
	}
	if st.Receiver != receiver {
		return ArchiveInfo{}, ar.fail(ProblemReceiverMismatch, fmt.Errorf("%w: the archive is of receiver %q, not %q", ErrReceiverMismatch, st.Receiver, receiver))
	}
	if raw, err = ar.next(MaxBaseSize, "the base record"); err != nil {
		return ArchiveInfo{}, err
	}
	from, err := ParseBase(raw)
	if err != nil {
		return ArchiveInfo{}, ar.fail(ProblemBadArchive, err)
	}
	if from.Seq != st.FromSeq || from.Hash != st.FromHash || BaseDigest(raw) != st.FromFence {
		return ArchiveInfo{}, ar.fail(ProblemBaseMismatch, fmt.Errorf("%w: the base record (seq %d) is not the one the signed statement names (seq %d)",
			ErrBaseMismatch, from.Seq, st.FromSeq))
	}
	w := newBaseWalker(&from, raw)
	for seq := st.FromSeq + 1; seq <= st.ToSeq; seq++ {
		raw, err := ar.next(MaxEntrySize, fmt.Sprintf("entry %d (the statement says the archive holds entries %d to %d)", seq, st.FromSeq+1, st.ToSeq))
		if err != nil {
			return ArchiveInfo{}, err
		}
		if !w.step(SeqKey(seq), raw) {
			return ArchiveInfo{}, ar.fail(w.problem, w.err)
		}
		if visit != nil {
			visit(&w.e, w.head.Hash)
		}
	}
	if _, err := ar.r.ReadByte(); err == nil {
		return ArchiveInfo{}, ar.fail(ProblemBadArchive, fmt.Errorf("%w: bytes after entry %d, the last one the signed statement names", ErrBadArchive, st.ToSeq))
	} else if !errors.Is(err, io.EOF) {
		return ArchiveInfo{}, err
	}
	if err := w.checkEnd(&st.ArchiveStatement); err != nil {
		var ae *ArchiveError
		if errors.As(err, &ae) {
			ae.Name = ar.name
		}
		return ArchiveInfo{}, err
	}
	return ArchiveInfo{Statement: st, From: from, Entries: st.ToSeq - st.FromSeq}, nil
}

// checkEnd checks that a walk over an archive's entries ended where its
// statement says, with the fence state it says, and without a violation.
func (w *walker) checkEnd(st *ArchiveStatement) error {
	if w.head.Seq != st.ToSeq {
		return &ArchiveError{Problem: ProblemBadArchive, Err: fmt.Errorf("%w: the archive ends at entry %d, the statement says %d", ErrBadArchive, w.head.Seq, st.ToSeq)}
	}
	if w.head.Hash != st.ToHash {
		return &ArchiveError{Problem: ProblemBrokenLink, Err: fmt.Errorf("%w: entry %d hashes to %x, but the signed statement says %x",
			ErrBrokenLink, st.ToSeq, w.head.Hash[:], st.ToHash[:])}
	}
	if w.fence.violation != nil {
		return &ArchiveError{Problem: ProblemFenceViolation, Err: w.fence.violation}
	}
	raw, err := MarshalBase(&Base{Seq: st.ToSeq, Hash: st.ToHash, Scopes: w.fence.snapshot()})
	if err != nil {
		return &ArchiveError{Problem: ProblemBadArchive, Err: err}
	}
	if BaseDigest(raw) != st.ToFence {
		return &ArchiveError{Problem: ProblemBaseMismatch, Err: fmt.Errorf("%w: the fence state replayed up to entry %d is not the one the signed statement names",
			ErrBaseMismatch, st.ToSeq)}
	}
	return nil
}

// newBaseWalker returns a walker that continues the chain from a base whose
// encoded record is raw, replaying the fence from it.
func newBaseWalker(from *Base, raw []byte) *walker {
	return &walker{head: from.Head(), start: from.Head(), startFence: BaseDigest(raw), fence: newFenceReplayAt(from)}
}

// AdvanceBase checks the whole stored chain after the base record fromRaw
// (nil for the start of the chain) as Verify does: each entry decodes
// canonically, is stored under its own seq and links to the one before;
// an archive entry in it must record exactly that base (see Verify); and it
// replays the fence over it. It returns the encoded base record at seq
// before and the position of the entry there, which is what an archive of
// the entries up to before ends at. Walking past before confirms the base
// record the archive continues, so that a base record edited in the
// database is never carried into a new archive. A fence violation up to
// before is an error: such a chain is evidence to keep whole, not to
// archive.
func AdvanceBase(fromRaw []byte, entries iter.Seq2[[]byte, []byte], before uint64) ([]byte, Head, error) {
	if fromRaw == nil {
		fromRaw = mustMarshalBase(&Base{})
	}
	from, err := ParseBase(fromRaw)
	if err != nil {
		return nil, Head{}, err
	}
	if before <= from.Seq {
		return nil, Head{}, fmt.Errorf("%w: seq %d is not after the base at seq %d", ErrBadArchive, before, from.Seq)
	}
	w := newBaseWalker(&from, fromRaw)
	var toRaw []byte
	var to Head
	for k, v := range entries {
		if !w.step(k, v) {
			return nil, Head{}, w.err
		}
		if w.head.Seq != before {
			continue
		}
		if w.fence.violation != nil {
			return nil, Head{}, w.fence.violation
		}
		to = w.head
		if toRaw, err = MarshalBase(&Base{Seq: to.Seq, Hash: to.Hash, Scopes: w.fence.snapshot()}); err != nil {
			return nil, Head{}, err
		}
	}
	switch {
	case toRaw == nil:
		return nil, Head{}, fmt.Errorf("%w: the stored chain ends at seq %d, before %d", ErrSeqGap, w.head.Seq, before)
	case from.Seq > 0 && !w.sawStart:
		return nil, Head{}, fmt.Errorf("%w: the base record says the entries up to %d were archived, but no archive entry in the chain records it",
			ErrBaseMismatch, from.Seq)
	}
	return toRaw, to, nil
}
