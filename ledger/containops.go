package ledger

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/internal/ident"
)

// Bounds of boundaries and containment records.
const (
	// MaxBoundaries bounds the boundaries of one approval; it keeps the
	// approval's audit entry, which lists them, well under
	// audit.MaxEntrySize.
	MaxBoundaries = 16
	// MaxOutstanding bounds the outstanding effects recorded at one
	// boundary, so that a containment record stays one store value.
	MaxOutstanding = 256
)

// String formats the boundary as "receiver":"scope", quoted, so that a
// name holding a colon reads unambiguously.
func (b Boundary) String() string { return strconv.Quote(b.Receiver) + ":" + strconv.Quote(b.Scope) }

// ContainmentID returns the id of the containment of action after its
// claim supersededClaim was superseded, in the ledger ledgerID: a
// domain-separated SHA-256 of the three, so that every rerun of a
// containment finds the same record and the same hold ids, and no two
// containments share one.
func ContainmentID(ledgerID, action, supersededClaim string) string {
	return "ct-" + idHash("kvfence/containment-id/v1\n", ledgerID, action, supersededClaim)
}

// HoldID returns the hold id that containment containmentID uses at the
// scope of a receiver on every attempt: a receiver that committed the hold
// once returns that hold again instead of issuing a new generation. It is
// 66 bytes, within audit.MaxHoldIDLen, and a valid name.
func HoldID(containmentID, receiver, scope string) string {
	return "h-" + idHash("kvfence/hold-id/v1\n", containmentID, receiver, scope)
}

// idHash hashes length-prefixed parts under a domain: no two lists of
// parts hash alike however their text is split.
func idHash(domain string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(domain))
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// receiverRecord is a Receiver as stored under its name.
type receiverRecord struct {
	// Name is Receiver.Name.
	Name string `cbor:"name"`
	// Server is Receiver.Server.
	Server string `cbor:"server,omitempty"`
	// DB is Receiver.DB.
	DB string `cbor:"db,omitempty"`
	// Anchor is Receiver.Anchor.
	Anchor string `cbor:"anchor,omitempty"`
	// ReceiverID is Receiver.ReceiverID.
	ReceiverID string `cbor:"receiver_id"`
	// PublicKey is Receiver.PublicKey (32 bytes).
	PublicKey []byte `cbor:"public_key"`
	// AddedBy is Receiver.AddedBy.
	AddedBy string `cbor:"added_by"`
	// AddedAt is Receiver.AddedAt.
	AddedAt int64 `cbor:"added_at"`
	// AuditSeq is Receiver.AuditSeq.
	AuditSeq uint64 `cbor:"audit_seq"`
}

func (r *receiverRecord) public() Receiver {
	return Receiver{Name: r.Name, Server: r.Server, DB: r.DB, Anchor: r.Anchor, ReceiverID: r.ReceiverID,
		PublicKey: append(ed25519.PublicKey(nil), r.PublicKey...), AddedBy: r.AddedBy, AddedAt: unixTime(r.AddedAt), AuditSeq: r.AuditSeq}
}

// checkServerURL accepts the addresses the client dials: https://HOST:PORT
// and unix:///PATH.
func checkServerURL(s string) error {
	if err := ident.Check("server", s); err != nil {
		return err
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("server %q: %v", s, err)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return fmt.Errorf("server %q: a receiver address has no user, query or fragment", s)
	}
	switch u.Scheme {
	case "https":
		if u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("server %q: want https://HOST:PORT", s)
		}
	case "unix":
		if u.Host != "" || u.Path == "" {
			return fmt.Errorf("server %q: want unix:///PATH", s)
		}
	default:
		return fmt.Errorf("server %q: the scheme must be https or unix", s)
	}
	return nil
}

// AddReceiver registers a receiver and pins its key. Exactly one of
// req.Server (an https:// or unix:// address) and req.DB (with req.Anchor)
// locates it; req.ReceiverID is the id its acknowledgments name. A name
// registered already is ErrReceiverExists; a key pinned for another name is
// ErrReceiverKeyPinned, because two boundaries that sign with one key could
// answer for each other. Nothing is written on a refusal.
func (l *Ledger) AddReceiver(ctx context.Context, req AddReceiverRequest) (Receiver, error) {
	if err := checkIdents("receiver name", req.Name, "receiver id", req.ReceiverID, "operator", req.Operator); err != nil {
		return Receiver{}, err
	}
	if strings.Contains(req.Name, ":") {
		// A boundary is named RECEIVER:SCOPE and split at the first colon:
		// a receiver named with one could not be named, and would make
		// another receiver's boundary read as its own.
		return Receiver{}, fmt.Errorf("%w: receiver name %q holds a colon, which separates a boundary's receiver from its scope",
			ErrInvalidArgument, req.Name)
	}
	switch {
	case (req.Server == "") == (req.DB == ""):
		return Receiver{}, fmt.Errorf("%w: give exactly one of a server address and a database", ErrInvalidArgument)
	case req.Server != "":
		if err := checkServerURL(req.Server); err != nil {
			return Receiver{}, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
		if req.Anchor != "" {
			return Receiver{}, fmt.Errorf("%w: an anchor goes with a database, not with a server address", ErrInvalidArgument)
		}
	default:
		if err := checkIdents("database", req.DB, "anchor", req.Anchor); err != nil {
			return Receiver{}, err
		}
	}
	if len(req.PublicKey) != ed25519.PublicKeySize {
		return Receiver{}, fmt.Errorf("%w: the receiver's public key is %d bytes, want %d", ErrInvalidArgument, len(req.PublicKey), ed25519.PublicKeySize)
	}
	if err := ctx.Err(); err != nil {
		return Receiver{}, err
	}
	var out Receiver
	err := l.update(func(w *wtx) error {
		if err := ensureBucket(w.tx, bucketReceivers); err != nil {
			return err
		}
		if raw, err := w.tx.Get(bucketReceivers, []byte(req.Name)); err != nil {
			return err
		} else if raw != nil {
			return fmt.Errorf("%w: %q", ErrReceiverExists, req.Name)
		}
		err := w.tx.Scan(bucketReceivers, nil, func(k, v []byte) error {
			r, err := decodeReceiver(k, v)
			if err != nil {
				return err
			}
			if bytes.Equal(r.PublicKey, req.PublicKey) {
				return fmt.Errorf("%w: the key is pinned for receiver %q; two boundaries signing with one key could answer for each other",
					ErrReceiverKeyPinned, r.Name)
			}
			return nil
		})
		if err != nil {
			return err
		}
		rec := receiverRecord{Name: req.Name, Server: req.Server, DB: req.DB, Anchor: req.Anchor, ReceiverID: req.ReceiverID,
			PublicKey: req.PublicKey, AddedBy: req.Operator, AddedAt: w.now.UnixNano()}
		where := "server " + strconv.Quote(req.Server)
		if req.DB != "" {
			where = "database " + strconv.Quote(req.DB) + " anchor " + strconv.Quote(req.Anchor)
		}
		err = w.putSealed(bucketReceivers, []byte(req.Name), &rec, &rec.AuditSeq, &audit.Entry{Kind: KindReceiver, Target: req.Name,
			Executor: req.Operator, Note: fmt.Sprintf("receiver id %q, key %s, %s", req.ReceiverID,
				audit.KeyFingerprint(req.PublicKey), where)})
		if err != nil {
			return err
		}
		out = rec.public()
		return nil
	})
	return out, err
}

// Receiver returns a registered receiver, or ErrUnknownReceiver. A record
// that does not match its audit entry is ErrContainmentTampered.
func (l *Ledger) Receiver(name string) (Receiver, error) {
	var out Receiver
	err := l.checkedView(func(tx engine.Tx) (err error) {
		out, err = loadReceiver(tx, name)
		return err
	})
	return out, err
}

// Receivers returns every registered receiver, by name, each checked
// against its audit entry.
func (l *Ledger) Receivers() ([]Receiver, error) {
	var out []Receiver
	err := l.view(func(tx engine.Tx) error {
		out = out[:0]
		if ok, err := tx.HasBucket(bucketReceivers); err != nil || !ok {
			return err
		}
		var names []string
		if err := tx.Scan(bucketReceivers, nil, func(k, _ []byte) error {
			names = append(names, string(k))
			return nil
		}); err != nil {
			return err
		}
		for _, n := range names {
			r, err := loadReceiver(tx, n)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// decodeReceiver decodes the receiver record stored under key.
func decodeReceiver(key, raw []byte) (receiverRecord, error) {
	var r receiverRecord
	if err := recordDec.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("%w: record %s/%q: %v", ErrBadFormat, bucketReceivers, key, err)
	}
	if r.Name != string(key) || len(r.PublicKey) != ed25519.PublicKeySize || r.ReceiverID == "" {
		return r, fmt.Errorf("%w: record %s/%q is not a receiver", ErrBadFormat, bucketReceivers, key)
	}
	return r, nil
}

// loadReceiver reads a receiver and checks it against its audit entry.
func loadReceiver(tx engine.Tx, name string) (Receiver, error) {
	raw, err := getOptional(tx, bucketReceivers, []byte(name))
	if err != nil {
		return Receiver{}, err
	}
	if raw == nil {
		return Receiver{}, fmt.Errorf("%w: %q", ErrUnknownReceiver, name)
	}
	r, err := decodeReceiver([]byte(name), raw)
	if err != nil {
		return Receiver{}, err
	}
	if err := checkSealed(tx, "receiver "+strconv.Quote(name), raw, r.AuditSeq, name, KindReceiver); err != nil {
		return Receiver{}, err
	}
	return r.public(), nil
}

func (w *wtx) receiver(name string) (Receiver, error) { return loadReceiver(w.tx, name) }

// getOptional reads key from a bucket that old files lack: no bucket is
// no record.
func getOptional(tx engine.Tx, bucket, key []byte) ([]byte, error) {
	if ok, err := tx.HasBucket(bucket); err != nil || !ok {
		return nil, err
	}
	return tx.Get(bucket, key)
}

// ensureBucket creates a bucket that a file written before it existed lacks.
func ensureBucket(tx engine.Tx, bucket []byte) error {
	ok, err := tx.HasBucket(bucket)
	if err != nil || ok {
		return err
	}
	return tx.CreateBucket(bucket)
}

// putSealed stores rec under key with the audit entry e that records it.
// The entry carries the SHA-256 of the record's bytes (in RequestSHA256)
// and the record the entry's seq (through seq, a field of rec), so that a
// read can tell the record the entry wrote from one edited or put back.
func (w *wtx) putSealed(bucket, key []byte, rec any, seq *uint64, e *audit.Entry) error {
	next := w.chain.Head().Seq + 1
	*seq = next
	raw, err := recordEnc.Marshal(rec)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(raw)
	e.RequestSHA256 = sum[:]
	got, err := w.appendAudit(e)
	if err != nil {
		return err
	}
	if got != next {
		return fmt.Errorf("%w: audit entry %d appended where %d was expected", ErrBadFormat, got, next)
	}
	if err := ensureBucket(w.tx, bucket); err != nil {
		return err
	}
	return w.tx.Put(bucket, key, raw)
}

// checkSealed checks that raw is the record that the audit entry at seq
// wrote for target, one of kinds, and that no later entry changed that
// record since: an older copy of a record matches its own, older, entry,
// and only a later entry naming the same target shows it was put back.
// The later entries are scanned as bytes first and decoded only if they
// hold the target's text, so the scan costs a memory pass over the chain
// after seq.
func checkSealed(tx engine.Tx, what string, raw []byte, seq uint64, target string, kinds ...string) error {
	v, err := tx.Get(bucketAudit, audit.SeqKey(seq))
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("%w: %s names audit entry %d, which does not exist", ErrContainmentTampered, what, seq)
	}
	e, err := audit.DecodeEntry(v)
	if err != nil {
		return fmt.Errorf("%w: audit entry %d: %v", ErrBadFormat, seq, err)
	}
	sum := sha256.Sum256(raw)
	if e.Seq != seq || !slices.Contains(kinds, e.Kind) || e.Target != target || !bytes.Equal(e.RequestSHA256, sum[:]) {
		return fmt.Errorf("%w: %s is not the record that audit entry %d wrote", ErrContainmentTampered, what, seq)
	}
	needle := []byte(target)
	link := linker(seq, v)
	return tx.Scan(bucketAudit, audit.SeqKey(seq+1), func(k, v []byte) error {
		if err := link(v); err != nil {
			return err
		}
		if !bytes.Contains(v, needle) {
			return nil
		}
		e, err := audit.DecodeEntry(v)
		if err != nil {
			return fmt.Errorf("%w: audit entry %x: %v", ErrBadFormat, k, err)
		}
		if e.Target == target && slices.Contains(kinds, e.Kind) {
			return fmt.Errorf("%w: %s is an older copy: audit entry %d changed it after entry %d", ErrContainmentTampered, what, e.Seq, seq)
		}
		return nil
	})
}

// linker returns a function to call with every entry after seq, whose
// bytes are raw, in order: it fails with ErrContainmentTampered unless
// each holds the hash of the one before it. An entry edited in the file,
// with the record it seals, then no longer links to the chain after it,
// which the anchor covers up to its head: to hide the edit, every later
// entry up to the anchored one would have to change too. The check is a
// byte search for the 32-byte hash, which only an entry that names it as
// its prev holds.
func linker(seq uint64, raw []byte) func(v []byte) error {
	prev, at := audit.HashEntry(raw), seq
	return func(v []byte) error {
		at++
		if !bytes.Contains(v, prev[:]) {
			return fmt.Errorf("%w: audit entry %d does not link to entry %d: the chain was edited after it", ErrContainmentTampered, at, at-1)
		}
		prev = audit.HashEntry(v)
		return nil
	}
}

// checkLinked checks that the entry at seq, whose bytes are raw, links to
// every later entry up to the head (linker).
func checkLinked(tx engine.Tx, seq uint64, raw []byte) error {
	link := linker(seq, raw)
	return tx.Scan(bucketAudit, audit.SeqKey(seq+1), func(_, v []byte) error { return link(v) })
}

// checkBoundaries checks an approval's boundaries: each a receiver and a
// scope that are names, none twice, at most MaxBoundaries.
func checkBoundaries(bs []Boundary) ([]boundaryRecord, error) {
	if len(bs) > MaxBoundaries {
		return nil, fmt.Errorf("%w: %d boundaries, over the limit of %d", ErrInvalidArgument, len(bs), MaxBoundaries)
	}
	var out []boundaryRecord
	for _, b := range bs {
		if err := checkIdents("boundary receiver", b.Receiver, "boundary scope", b.Scope); err != nil {
			return nil, err
		}
		r := boundaryRecord{Receiver: b.Receiver, Scope: b.Scope}
		if slices.Contains(out, r) {
			return nil, fmt.Errorf("%w: boundary %s is named twice", ErrInvalidArgument, b)
		}
		out = append(out, r)
	}
	return out, nil
}

// boundariesNote is how an approval's audit entry lists its boundaries;
// empty for none, as in entries written before boundaries existed.
func boundariesNote(bs []boundaryRecord) string {
	if len(bs) == 0 {
		return ""
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = Boundary{Receiver: b.Receiver, Scope: b.Scope}.String()
	}
	return "boundaries " + strings.Join(parts, " ")
}

// checkApprovalBoundaries checks the boundaries stored in an approval
// against its audit entry: a boundary dropped from the file would
// otherwise let a containment read full without holding it.
func checkApprovalBoundaries(tx engine.Tx, a *approvalRecord) error {
	v, err := tx.Get(bucketAudit, audit.SeqKey(a.AuditSeq))
	if err != nil {
		return err
	}
	var e audit.Entry
	if v != nil {
		if e, err = audit.DecodeEntry(v); err != nil {
			return fmt.Errorf("%w: audit entry %d: %v", ErrBadFormat, a.AuditSeq, err)
		}
	}
	if v == nil || e.Kind != KindApprove || e.Action != a.Action || e.Note != boundariesNote(a.Boundaries) ||
		!bytes.Equal(e.RequestSHA256, a.RequestSHA256) {
		return fmt.Errorf("%w: the boundaries or request of %q's approval are not those its audit entry %d recorded",
			ErrContainmentTampered, a.Action, a.AuditSeq)
	}
	return checkLinked(tx, a.AuditSeq, v)
}

// ApprovedRequest returns the SHA-256 of the request approved for action,
// checked against the approval's audit entry: a digest edited in the file
// is ErrContainmentTampered, so that a successor is never activated with
// a request the approval did not name. No approval is ErrNotApproved.
func (l *Ledger) ApprovedRequest(action string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	if err := checkIdents("action", action); err != nil {
		return sum, err
	}
	err := l.checkedView(func(tx engine.Tx) error {
		var a approvalRecord
		if ok, err := get(tx, bucketApprovals, []byte(action), &a); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: %q", ErrNotApproved, action)
		}
		if err := checkApprovalBoundaries(tx, &a); err != nil {
			return err
		}
		if len(a.RequestSHA256) != sha256.Size {
			return fmt.Errorf("%w: %q's approval has no request digest", ErrBadFormat, action)
		}
		copy(sum[:], a.RequestSHA256)
		return nil
	})
	return sum, err
}

// CheckLiveClaim returns nil if the ledger's audit chain gives action's
// live claim to worker as claim ref: the chain's newest claim or takeover
// entry of the action names ref and worker, no later finish entry settles
// ref, and that entry links to every later one up to the head. Claim and
// action records are not sealed; the chain, which the anchor covers, is
// what says who holds an action. A chain that says otherwise than a
// caller who read the records is ErrContainmentTampered.
func (l *Ledger) CheckLiveClaim(action, ref, worker string) error {
	if err := checkIdents("action", action, "claim", ref, "worker", worker); err != nil {
		return err
	}
	return l.checkedView(func(tx engine.Tx) error {
		var last audit.Entry
		var lastSeq uint64
		var lastRaw []byte
		settled := false
		needle := []byte(action)
		err := tx.Scan(bucketAudit, nil, func(k, v []byte) error {
			if !bytes.Contains(v, needle) {
				return nil
			}
			e, err := audit.DecodeEntry(v)
			if err != nil {
				return fmt.Errorf("%w: audit entry: %v", ErrBadFormat, err)
			}
			if e.Action != action {
				return nil
			}
			switch e.Kind {
			case KindClaim, KindTakeover:
				last, lastSeq, lastRaw, settled = e, binary.BigEndian.Uint64(k), append([]byte(nil), v...), false
			case KindFinish:
				settled = settled || e.Decision == last.Decision
			}
			return nil
		})
		if err != nil {
			return err
		}
		switch {
		case lastRaw == nil:
			return fmt.Errorf("%w: no claim of %q is in the audit chain", ErrContainmentTampered, action)
		case last.Decision != ref || last.Executor != worker:
			return fmt.Errorf("%w: the audit chain gives %q's live claim to %q as %s, not to %q as %s", ErrContainmentTampered,
				action, last.Executor, last.Decision, worker, ref)
		case settled:
			return fmt.Errorf("%w: the audit chain says claim %s of %q was finished", ErrContainmentTampered, ref, action)
		}
		return checkLinked(tx, lastSeq, lastRaw)
	})
}
