package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/kvfence/kvfence/internal/api"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/kvfence"
)

// AdmissionNewCommand is the recovery key holder's half of a recovery: it
// reads a questioned database's head and its anchor, shows them, and signs
// an admission for exactly those with the separately held recovery key.
// With --lost-anchor it signs the other kind, for a database whose anchor
// is missing or damaged: it reads only the database, and the admission
// carries the operator's epoch floor. It changes neither the database nor
// the anchor; kvfence recover applies the admission.
type AdmissionNewCommand struct{ m *Main }

// admissionJSON is the --json shape of admission new. Hashes are lowercase
// hex. For a lost anchor, anchor_seq is 0, anchor_head "" and
// epoch_high_water null, since there is no anchor to read them from; for
// an ordinary admission, epoch_floor is null.
type admissionJSON struct {
	Out                    string  `json:"out"`
	Receiver               string  `json:"receiver"`
	LostAnchor             bool    `json:"lost_anchor"`
	AnchorState            string  `json:"anchor_state"`
	AnchorSeq              uint64  `json:"anchor_seq"`
	AnchorHead             string  `json:"anchor_head"`
	HeadSeq                uint64  `json:"head_seq"`
	Head                   string  `json:"head"`
	State                  string  `json:"state"`
	EpochHighWater         *uint64 `json:"epoch_high_water"`
	DatabaseEpochHighWater uint64  `json:"database_epoch_high_water"`
	EpochFloor             *uint64 `json:"epoch_floor"`
	Reason                 string  `json:"reason"`
	At                     *string `json:"at"`
	Expires                *string `json:"expires"`
	RecoveryKey            string  `json:"recovery_key"`
	// AnchorDamage describes a damaged slot of the anchor file, or is
	// null; recover overwrites it.
	AnchorDamage *anchorDamageJSON `json:"anchor_damage"`
	// Witnessed are the witnesses' checkpoints the admission names
	// (--witnessed), sorted by witness; empty for none.
	Witnessed []witnessedJSON `json:"witnessed"`
	// AdmittedRoot is, with witnesses, the root of the database's audit
	// tree at head_seq in base64, from which the witnesses accept the
	// recovered tree; "" without.
	AdmittedRoot string `json:"admitted_root"`
}

// witnessedJSON is one --witnessed checkpoint; the root in base64, as the
// witness's note writes it.
type witnessedJSON struct {
	Witness string `json:"witness"`
	Size    uint64 `json:"size"`
	Root    string `json:"root"`
}

// What admission new found where the anchor should be (anchor_state).
const (
	anchorPresent   = "present"   // an ordinary admission's anchor, verified
	anchorMissing   = "missing"   // no file at --anchor
	anchorDamaged   = "damaged"   // a file at --anchor without a valid slot
	anchorUnchecked = "unchecked" // --lost-anchor without --anchor
)

// Run runs the command.
func (c *AdmissionNewCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("admission new")
	cf := commonFlags{name: "admission new"}
	cf.register(fs, withDB|withoutLock|withoutPub|withoutWitnesses)
	recoveryKey := fs.String("recovery-key", "", "")
	reason := fs.String("reason", "", "")
	out := fs.String("out", "", "")
	lostAnchor := fs.Bool("lost-anchor", false, "")
	epochFloor := fs.Uint64("epoch-floor", 0, "")
	validFor := fs.Duration("valid-for", defaultValidFor, "")
	var witnessedArgs stringList
	fs.Var(&witnessedArgs, "witnessed", "")
	if err := parseFlags(fs, c.Usage, args, 0); err != nil {
		return err
	}
	witnessed, err := parseWitnessed(witnessedArgs)
	if err != nil {
		return err
	}
	if *validFor <= 0 || *validFor > audit.MaxAdmissionValidity {
		return &usageError{msg: fmt.Sprintf("kvfence admission new: --valid-for %v is not between 0 and %v: an admission "+
			"re-admits the state it names for as long as it is valid, so it is meant to be applied soon after it is signed",
			*validFor, audit.MaxAdmissionValidity), hint: "kvfence admission new -h"}
	}
	cf.resolve(fs, c.m.Getenv)
	if cf.db == "" && !cf.etcd.on() {
		return missingFlag(cf.name, "db", envDB)
	}
	if cf.anchor == "" && !*lostAnchor {
		return missingFlag(cf.name, "anchor", envAnchor)
	}
	if isSet(fs, "epoch-floor") && !*lostAnchor {
		return &usageError{msg: "kvfence admission new: --epoch-floor is only for a lost-anchor admission; " +
			"an ordinary admission takes its floor from the anchor it supersedes", hint: "kvfence admission new -h"}
	}
	if err := require(cf.name, [2]string{"recovery-key", *recoveryKey}, [2]string{"reason", *reason},
		[2]string{"out", *out}); err != nil {
		return err
	}
	if err := checkOut(cf.name, *out, cf.json); err != nil {
		return err
	}
	if err := cf.checkAnchorPath(); err != nil {
		return err
	}
	if *lostAnchor && cf.etcd.on() {
		return &usageError{msg: "kvfence admission new: --lost-anchor is not available with --etcd: it reads the database without an anchor, which only a --db file offers",
			hint: "sign an ordinary admission against the anchor"}
	}
	if len(*reason) > audit.MaxReasonLen || !utf8.ValidString(*reason) {
		return &usageError{msg: fmt.Sprintf("kvfence admission new: --reason must be UTF-8 text of at most %d bytes",
			audit.MaxReasonLen), hint: "kvfence admission new -h"}
	}
	priv, err := loadPrivate(*recoveryKey)
	if err != nil {
		return err
	}
	if err := checkRecoveryKey(&cf, ed25519PublicOf(priv)); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var q kvfence.Questioned
	state := anchorPresent
	if *lostAnchor {
		if state, err = lostAnchorState(&cf); err != nil {
			return err
		}
		q, err = kvfence.InspectDatabase(cf.db)
	} else {
		anchor, aerr := cf.anchorStore()
		if aerr != nil {
			return aerr
		}
		if cf.etcd.on() {
			e, eerr := cf.openEngine()
			if eerr != nil {
				return eerr
			}
			q, err = kvfence.InspectEngine(e, anchor) // closes e
		} else {
			q, err = kvfence.Inspect(cf.db, anchor)
		}
	}
	if err != nil {
		return err
	}
	at := c.m.now().UTC()
	expires := at.Add(*validFor)
	a := audit.Admission{Receiver: q.Receiver, AdmittedHead: q.Head, AdmittedState: q.State, At: at.UnixNano(),
		Expires: expires.UnixNano(), Reason: *reason, Witnessed: witnessed}
	if len(witnessed) > 0 {
		a.AdmittedRoot = q.Root
	}
	if *lostAnchor {
		a.LostAnchor, a.EpochFloor = true, *epochFloor
	} else {
		a.SupersededAnchor = q.Anchor
	}
	sa, err := audit.SignAdmission(priv, a)
	if err != nil {
		return err
	}
	b, err := sa.Marshal()
	if err != nil {
		return err
	}
	summary, err := c.m.writeOut(*out, b, 0o600)
	if err != nil {
		return err
	}
	res := admissionJSON{Out: *out, Receiver: q.Receiver, LostAnchor: *lostAnchor, AnchorState: state,
		AnchorSeq: q.Anchor.Seq, AnchorHead: headHex(q.Anchor), HeadSeq: q.Head.Seq, Head: headHex(q.Head), State: hex.EncodeToString(q.State[:]),
		DatabaseEpochHighWater: q.DatabaseEpochHighWater, Reason: *reason, At: api.Time(at), Expires: api.Time(expires),
		RecoveryKey:  sa.Key.String(),
		AnchorDamage: anchorDamageOf(q.AnchorDamage), Witnessed: []witnessedJSON{}}
	for _, w := range witnessed {
		res.Witnessed = append(res.Witnessed, witnessedJSON{Witness: w.Witness, Size: w.Size, Root: tlog.Hash(w.Root).String()})
	}
	if len(witnessed) > 0 {
		res.AdmittedRoot = tlog.Hash(a.AdmittedRoot).String()
	}
	if *lostAnchor {
		res.EpochFloor = epochFloor
		if *epochFloor <= q.DatabaseEpochHighWater {
			// Not an error: the operator may know nothing better. But the
			// new epochs then rest on the database's word alone.
			fmt.Fprintf(c.m.Stderr, "Warning: --epoch-floor %d is not above the database's own epoch high-water %d, "+
				"which nothing vouches for without its anchor; if a higher epoch was ever used (monitoring, the lost "+
				"anchor's last known epoch_high_water), sign again with that --epoch-floor\n", *epochFloor, q.DatabaseEpochHighWater)
		}
	} else {
		res.EpochHighWater = &q.EpochHighWater
	}
	if cf.json {
		return writeJSON(c.m.Stdout, res)
	}
	tw := newTable(summary)
	fmt.Fprintf(tw, "receiver\t%s\n", res.Receiver)
	if *lostAnchor {
		fmt.Fprintf(tw, "anchor\t%s (lost: nothing to supersede)\n", state)
		fmt.Fprintf(tw, "database head (admitted)\t%s\n", headText(q.Head))
		fmt.Fprintf(tw, "database epoch high-water\t%d (the database's own word)\n", q.DatabaseEpochHighWater)
		fmt.Fprintf(tw, "epoch floor\t%d\n", *epochFloor)
		fmt.Fprintf(tw, "scopes will be held above\t%d\n", max(*epochFloor, q.DatabaseEpochHighWater))
	} else {
		fmt.Fprintf(tw, "anchor (superseded)\t%s\n", headText(q.Anchor))
		fmt.Fprintf(tw, "database head (admitted)\t%s\n", headText(q.Head))
		fmt.Fprintf(tw, "database vs anchor\t%s\n", compareHeads(q.Head, q.Anchor, q.AnchorDamage))
		if q.AnchorDamage != nil {
			fmt.Fprintf(tw, "anchor damage\t%v\n", q.AnchorDamage)
		}
		fmt.Fprintf(tw, "epoch high-water\t%d\n", q.EpochHighWater)
	}
	for _, w := range res.Witnessed {
		fmt.Fprintf(tw, "witness %s\tsize %d, root %s\n", w.Witness, w.Size, w.Root)
	}
	if res.AdmittedRoot != "" {
		fmt.Fprintf(tw, "admitted tree root\t%s\n", res.AdmittedRoot)
	}
	fmt.Fprintf(tw, "reason\t%s\n", res.Reason)
	fmt.Fprintf(tw, "signed at\t%s\n", humanTime(at))
	fmt.Fprintf(tw, "valid until\t%s (apply it with kvfence recover before then)\n", humanTime(expires))
	fmt.Fprintf(tw, "recovery key\t%s\n", res.RecoveryKey)
	fmt.Fprintf(tw, "admission\t%s (mode 0600)\n", res.Out)
	return tw.Flush()
}

// defaultValidFor is how long an admission is valid unless --valid-for
// says otherwise: long enough to carry it to the receiver and apply it,
// short enough that a copy of it is of little use later.
const defaultValidFor = time.Hour

// now is the program's clock.
func (m *Main) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// lostAnchorState says what is at the anchor path, for a lost-anchor
// admission: missing or damaged is what it is for; an anchor that loads
// is refused before anything is signed, since the ordinary admission is
// the way to supersede it. Without a path there is nothing to check: the
// recovery key holder may sign where the anchor is out of reach, and
// kvfence recover checks again.
func lostAnchorState(cf *commonFlags) (string, error) {
	path := cf.anchor
	if path == "" {
		return anchorUnchecked, nil
	}
	anchor, err := cf.anchorStore()
	if err != nil {
		return "", err
	}
	a, err := anchor.Load()
	switch {
	case err == nil:
		return "", withHint(fmt.Errorf("kvfence admission new: --lost-anchor: %w: %s holds seq %d for receiver %q",
			kvfence.ErrAnchorPresent, path, a.Seq, a.Receiver),
			"if the database disagrees with this anchor, sign an ordinary admission (kvfence admission new without "+
				"--lost-anchor); if the file does not belong here, move it aside and keep it as evidence")
	case errors.Is(err, audit.ErrAnchorMissing):
		return anchorMissing, nil
	case errors.Is(err, audit.ErrBadAnchor):
		return anchorDamaged, nil
	}
	return "", err
}

// checkRecoveryKey refuses, before anything is signed, a recovery key that
// the receiver at db would not accept: one that is not the recovery key
// recorded at init, or a receiver initialised without one. The database is
// only asked, not trusted: recover checks the admission again against the
// operator's copy of the recovery public key.
func checkRecoveryKey(cf *commonFlags, pub ed25519.PublicKey) error {
	r, err := cf.openReceiver(&kvfence.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer r.Close()
	switch rk := r.RecoveryKey(); {
	case rk == nil:
		return withHint(errors.New("kvfence admission new: this receiver was initialised without a recovery key, "+
			"so no admission can re-admit it"),
			"a receiver needs kvfence init --recovery-pub to be recoverable; restore a database that verifies instead")
	case r.PublicKey().Equal(pub):
		return withHint(tagged(kvfence.ErrRecoveryKeyIsReceiverKey, "kvfence admission new: --recovery-key is the receiver's own key, not its recovery key"),
			"sign with the separately held recovery key whose public half was given to kvfence init --recovery-pub")
	case !rk.Equal(pub):
		return withHint(fmt.Errorf("kvfence admission new: --recovery-key (%v) is not the recovery key recorded at init (%v)",
			audit.KeyFingerprint(pub), audit.KeyFingerprint(rk)),
			"sign with the recovery key whose public half was given to kvfence init --recovery-pub")
	}
	return nil
}

// compareHeads describes how a database head stands to its anchor, as far
// as the two positions tell.
func compareHeads(head, anchor audit.Head, damage *audit.SlotDamage) string {
	switch {
	case head.Seq < anchor.Seq:
		return "the database is older than its anchor (rollback)"
	case head == anchor && damage != nil && damage.Next():
		return "the database ends at the anchor, but the anchor file's newest slot, damaged, was written after it " +
			"(suspected rollback)"
	case head == anchor:
		return "the database and its anchor agree"
	case head.Seq == anchor.Seq:
		return "the database has another entry at the anchored seq (fork)"
	default:
		return "the database is ahead of its anchor (kvfence verify-chain compares their history)"
	}
}

// Usage prints the command's help.
func (c *AdmissionNewCommand) Usage() {
	fmt.Fprint(c.m.Stderr, `Usage: kvfence admission new --recovery-key FILE --db FILE --anchor FILE --reason R
                             [--valid-for D] [--witnessed NAME=SIZE:ROOT]... --out ADM [--json]
       kvfence admission new --lost-anchor --recovery-key FILE --db FILE --reason R
                             [--epoch-floor N] [--anchor FILE] [--valid-for D] --out ADM [--json]

For the holder of the recovery key. Reads the receiver's database head and
its anchor without comparing or changing them, prints both, and signs an
admission for exactly this receiver, this anchor and this database head,
written to ADM (mode 0600; never overwritten). The admission is useless
against any other state: if the database or the anchor changes before
"kvfence recover" applies it, recover refuses it (exit code 4). It is
valid for --valid-for (default 1h) from now: recover refuses it after
that, by its own machine's clock, and refuses one signed more than 5
minutes ahead of that clock. Once applied, the new anchor names it, and
recover refuses it, or any admission signed before it, while that anchor
or a later one exists.

Sign only after you have seen the evidence (kvfence verify-chain) and
decided that this copy of the database is the one to keep. Recovery holds
every scope at an epoch above any the anchor vouches for, and revokes
every grant, so no grant minted before it can be used again.

With --lost-anchor, for a receiver whose anchor is gone or damaged as a
whole (every command refuses it with "anchor missing" or "bad anchor
file", exit code 4), it signs the other kind of admission: one that names
this receiver and this database head, says that there is no anchor to
supersede, and carries --epoch-floor. It reads only the database. Recovery
then holds every scope above the database's own epoch high-water and the
floor, revokes every grant, and creates a new anchor. If --anchor (or
$KVFENCE_ANCHOR) is set, an anchor that still loads is refused: the
ordinary admission is the way to supersede it. Without the anchor nothing
vouches for the database: sign only for a copy you have decided to keep.

Arguments:

	--recovery-key FILE
	    The recovery private key (OpenSSH Ed25519, not readable by group
	    or others): the one whose public half was given to
	    kvfence init --recovery-pub. Never the receiver's key.
	--reason R
	    Why this database is admitted; recorded in the admission and in
	    the audit chain (at most 1024 bytes).
	--out ADM
	    Where to write the signed admission ("-": stdout, with the summary
	    on stderr).
	--lost-anchor
	    Sign a lost-anchor admission (see above).
	--valid-for D
	    How long the admission may be applied, from now: a Go duration
	    such as 30m or 2h, above 0 and at most 24h (default 1h). Until it
	    expires, whoever holds the admission and a copy of the state it
	    names, and can delete the anchor, can re-admit that copy (see
	    SECURITY.md); keep it short.
	--witnessed NAME=SIZE:ROOT
	    Repeatable. For a receiver with witnesses: the latest checkpoint
	    the witness NAME (its own name, the key name of its
	    cosignatures) holds of this receiver, its tree size and its
	    base64 root, as the witness shows it. recover refuses the
	    admission unless every witness that answers is named at exactly
	    what it holds then, and each witness accepts the recovered chain
	    over its own only with an admission naming it so.
	--epoch-floor N
	    With --lost-anchor: the highest epoch this receiver is known to
	    have used, from monitoring or the lost anchor's last known
	    epoch_high_water (default 0). Every scope is held above it. The
	    database's own high-water cannot be trusted without its anchor: a
	    restored copy shows an older one.
	--db FILE
	    Receiver database. Defaults to $KVFENCE_DB.
	--anchor FILE
	    The receiver's anchor file. Defaults to $KVFENCE_ANCHOR. Required
	    without --lost-anchor.
`+usageEtcdSee+usageJSON)
}

// parseWitnessed reads --witnessed NAME=SIZE:ROOT values into the sorted
// list an admission carries; a name given twice is refused.
func parseWitnessed(args []string) ([]audit.WitnessedCheckpoint, error) {
	var out []audit.WitnessedCheckpoint
	for _, arg := range args {
		name, rest, ok1 := strings.Cut(arg, "=")
		size, root, ok2 := strings.Cut(rest, ":")
		n, serr := checkpoint.ParseSize(size)
		h, rerr := checkpoint.ParseHash(root)
		if !ok1 || !ok2 || serr != nil || rerr != nil || checkpoint.CheckName(name) != nil {
			return nil, &usageError{msg: fmt.Sprintf("kvfence admission new: --witnessed %q is not NAME=SIZE:ROOT (a witness name, a decimal size, a base64 root)", arg),
				hint: "kvfence admission new -h"}
		}
		out = append(out, audit.WitnessedCheckpoint{Witness: name, Size: n, Root: audit.Hash(h)})
	}
	slices.SortFunc(out, func(a, b audit.WitnessedCheckpoint) int { return strings.Compare(a.Witness, b.Witness) })
	for i := 1; i < len(out); i++ {
		if out[i].Witness == out[i-1].Witness {
			return nil, &usageError{msg: fmt.Sprintf("kvfence admission new: --witnessed names %s twice", out[i].Witness), hint: "one checkpoint per witness"}
		}
	}
	return out, nil
}
