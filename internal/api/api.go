// Package api holds the JSON bodies of the served receiver's HTTP API
// (DESIGN §12), shared by the server and the client so that both spell
// every key the same way. The shapes are the CLI's --json shapes (DESIGN
// §9): binary fields as "_b64" in padded standard base64, digests in
// lowercase hex, times as RFC 3339 with nanoseconds in UTC or null for a
// time that never happened.
package api

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// Paths of the endpoints.
const (
	PathSubmit   = "/v1/submit"
	PathScopes   = "/v1/scopes"
	PathTargets  = "/v1/targets"
	PathActivate = "/v1/activate"
	PathHold     = "/v1/hold"
	PathStatus   = "/v1/status"
	PathTarget   = "/v1/target"
	PathReceipt  = "/v1/receipt"
	PathEvents   = "/v1/events"
	PathHealthz  = "/healthz"
)

// Media types of request and response bodies.
const (
	ContentCBOR = "application/cbor"
	ContentJSON = "application/json"
)

// Submit is the submit response: the decision.
type Submit struct {
	Outcome  string `json:"outcome"`
	Reason   string `json:"reason"`
	Detail   string `json:"detail"`
	Scope    string `json:"scope"`
	Epoch    uint64 `json:"epoch"`
	Grant    string `json:"grant"`
	Action   string `json:"action"`
	Target   string `json:"target"`
	Revision uint64 `json:"revision"`
	AuditSeq uint64 `json:"audit_seq"`
}

// SubmitOf returns the response for a decision.
func SubmitOf(r kvfence.Result) Submit {
	return Submit{Outcome: string(r.Outcome), Reason: string(r.Reason), Detail: r.Detail, Scope: r.Scope,
		Epoch: r.Epoch, Grant: r.Grant, Action: r.Action, Target: r.Target, Revision: r.Revision, AuditSeq: r.AuditSeq}
}

// Result returns the decision a response carries.
func (s Submit) Result() (kvfence.Result, error) {
	switch kvfence.Outcome(s.Outcome) {
	case kvfence.Applied, kvfence.AlreadyApplied, kvfence.Denied:
	default:
		return kvfence.Result{}, fmt.Errorf("unknown outcome %q", s.Outcome)
	}
	return kvfence.Result{Outcome: kvfence.Outcome(s.Outcome), Reason: kvfence.Reason(s.Reason), Detail: s.Detail,
		Scope: s.Scope, Epoch: s.Epoch, Grant: s.Grant, Action: s.Action, Target: s.Target, Revision: s.Revision,
		AuditSeq: s.AuditSeq}, nil
}

// ScopeCreateRequest is the body of POST /v1/scopes.
type ScopeCreateRequest struct {
	Scope string `json:"scope"`
}

// ScopeCreate is the response of POST /v1/scopes.
type ScopeCreate struct {
	Scope     string  `json:"scope"`
	Epoch     uint64  `json:"epoch"`
	Mode      string  `json:"mode"`
	CreatedAt *string `json:"created_at"`
}

// TargetCreateRequest is the body of POST /v1/targets.
type TargetCreateRequest struct {
	Scope    string `json:"scope"`
	Target   string `json:"target"`
	ValueB64 []byte `json:"value_b64"`
}

// TargetCreate is the response of POST /v1/targets.
type TargetCreate struct {
	Target      string `json:"target"`
	Scope       string `json:"scope"`
	Revision    uint64 `json:"revision"`
	ValueSHA256 string `json:"value_sha256"`
}

// ActivateRequest is the body of POST /v1/activate. TTL is a Go duration
// ("15m"); empty means the receiver's default. Epoch, when not zero, must be
// the scope's current epoch.
type ActivateRequest struct {
	Scope      string `json:"scope"`
	Executor   string `json:"executor"`
	Claim      string `json:"claim"`
	RequestB64 []byte `json:"request_b64"`
	TTL        string `json:"ttl,omitempty"`
	Decision   string `json:"decision,omitempty"`
	Epoch      uint64 `json:"epoch,omitempty"`
}

// Activate is the response of POST /v1/activate: the grant.
type Activate struct {
	Grant         string  `json:"grant"`
	Scope         string  `json:"scope"`
	Epoch         uint64  `json:"epoch"`
	Executor      string  `json:"executor"`
	Claim         string  `json:"claim"`
	Action        string  `json:"action"`
	RequestSHA256 string  `json:"request_sha256"`
	NotBefore     *string `json:"not_before"`
	NotAfter      *string `json:"not_after"`
	Decision      string  `json:"decision"`
	AuditSeq      uint64  `json:"audit_seq"`
}

// ActivateOf returns the response for a grant.
func ActivateOf(g kvfence.Grant) Activate {
	return Activate{Grant: g.ID, Scope: g.Scope, Epoch: g.Epoch, Executor: g.Executor, Claim: g.Claim,
		Action: g.Action, RequestSHA256: g.RequestSHA256Hex(), NotBefore: Time(g.NotBefore),
		NotAfter: Time(g.NotAfter), Decision: g.Decision, AuditSeq: g.AuditSeq}
}

// ToGrant returns the grant a response describes. CreatedAt is not
// carried and stays zero.
func (a Activate) ToGrant() (kvfence.Grant, error) {
	g := kvfence.Grant{ID: a.Grant, Scope: a.Scope, Epoch: a.Epoch, Executor: a.Executor, Claim: a.Claim,
		Action: a.Action, Decision: a.Decision, AuditSeq: a.AuditSeq}
	if err := hexDigest(a.RequestSHA256, &g.RequestSHA256); err != nil {
		return g, err
	}
	var err error
	if g.NotBefore, err = ParseTime(a.NotBefore); err != nil {
		return g, err
	}
	g.NotAfter, err = ParseTime(a.NotAfter)
	return g, err
}

// HoldRequest is the body of POST /v1/hold.
type HoldRequest struct {
	Scopes []string `json:"scopes"`
	Reason string   `json:"reason"`
}

// Hold is the response of POST /v1/hold.
type Hold struct {
	Scopes          []HoldScope `json:"scopes"`
	HoldRequestedAt *string     `json:"hold_requested_at"`
	HoldCommittedAt *string     `json:"hold_committed_at"`
	AuditSeq        uint64      `json:"audit_seq"`
}

// HoldScope is one scope's part of a hold.
type HoldScope struct {
	Scope         string `json:"scope"`
	PreviousEpoch uint64 `json:"previous_epoch"`
	Epoch         uint64 `json:"epoch"`
	Mode          string `json:"mode"`
}

// HoldOf returns the response for a committed hold.
func HoldOf(res kvfence.HoldResult) Hold {
	out := Hold{Scopes: []HoldScope{}, HoldRequestedAt: Time(res.HoldRequestedAt),
		HoldCommittedAt: Time(res.HoldCommittedAt), AuditSeq: res.AuditSeq}
	for _, s := range res.Scopes {
		out.Scopes = append(out.Scopes, HoldScope{Scope: s.Scope, PreviousEpoch: s.PreviousEpoch, Epoch: s.Epoch,
			Mode: string(kvfence.ModeHeld)})
	}
	return out
}

// Result returns the hold a response describes.
func (h Hold) Result() (kvfence.HoldResult, error) {
	out := kvfence.HoldResult{AuditSeq: h.AuditSeq}
	for _, s := range h.Scopes {
		out.Scopes = append(out.Scopes, kvfence.HeldScope{Scope: s.Scope, PreviousEpoch: s.PreviousEpoch, Epoch: s.Epoch})
	}
	var err error
	if out.HoldRequestedAt, err = ParseTime(h.HoldRequestedAt); err != nil {
		return out, err
	}
	out.HoldCommittedAt, err = ParseTime(h.HoldCommittedAt)
	return out, err
}

// Status is the response of GET /v1/status. AnchorChecked is always true
// for a served receiver: it checked its anchor when it opened.
type Status struct {
	Scopes        []ScopeStatus `json:"scopes"`
	AuditSeq      uint64        `json:"audit_seq"`
	AnchorChecked bool          `json:"anchor_checked"`
}

// ScopeStatus is one scope's control state.
type ScopeStatus struct {
	Scope                string            `json:"scope"`
	Epoch                uint64            `json:"epoch"`
	Mode                 string            `json:"mode"`
	ActiveGrant          string            `json:"active_grant"`
	CreatedAt            *string           `json:"created_at"`
	ActivatedAt          *string           `json:"activated_at"`
	HoldRequestedAt      *string           `json:"hold_requested_at"`
	HoldCommittedAt      *string           `json:"hold_committed_at"`
	LastStaleRejectionAt *string           `json:"last_stale_rejection_at"`
	StaleRejections      uint64            `json:"stale_rejections"`
	Denials              map[string]uint64 `json:"denials"`
}

// ScopeStatusOf returns the JSON form of a scope's status.
func ScopeStatusOf(st kvfence.ScopeStatus) ScopeStatus {
	out := ScopeStatus{Scope: st.Scope, Epoch: st.Epoch, Mode: string(st.Mode), ActiveGrant: st.ActiveGrant,
		CreatedAt: Time(st.CreatedAt), ActivatedAt: Time(st.ActivatedAt),
		HoldRequestedAt: Time(st.HoldRequestedAt), HoldCommittedAt: Time(st.HoldCommittedAt),
		LastStaleRejectionAt: Time(st.LastStaleRejectionAt), StaleRejections: st.StaleRejections,
		Denials: make(map[string]uint64, len(st.Denials))}
	for k, v := range st.Denials {
		out.Denials[string(k)] = v
	}
	return out
}

// Status returns the scope status a response describes.
func (s ScopeStatus) Status() (kvfence.ScopeStatus, error) {
	out := kvfence.ScopeStatus{Scope: s.Scope, Epoch: s.Epoch, Mode: kvfence.Mode(s.Mode), ActiveGrant: s.ActiveGrant,
		StaleRejections: s.StaleRejections}
	for _, t := range []struct {
		dst *time.Time
		src *string
	}{{&out.CreatedAt, s.CreatedAt}, {&out.ActivatedAt, s.ActivatedAt}, {&out.HoldRequestedAt, s.HoldRequestedAt},
		{&out.HoldCommittedAt, s.HoldCommittedAt}, {&out.LastStaleRejectionAt, s.LastStaleRejectionAt}} {
		var err error
		if *t.dst, err = ParseTime(t.src); err != nil {
			return out, err
		}
	}
	if len(s.Denials) > 0 {
		out.Denials = make(map[kvfence.Reason]uint64, len(s.Denials))
		for k, v := range s.Denials {
			out.Denials[kvfence.Reason(k)] = v
		}
	}
	return out, nil
}

// Target is the response of GET /v1/target. Value is the value as text
// when it is valid UTF-8, else null; ValueB64 is always the value.
type Target struct {
	Target   string  `json:"target"`
	Scope    string  `json:"scope"`
	Revision uint64  `json:"revision"`
	Value    *string `json:"value"`
	ValueB64 []byte  `json:"value_b64"`
}

// Receipt is the response of GET /v1/receipt.
type Receipt struct {
	Scope         string  `json:"scope"`
	Action        string  `json:"action"`
	Grant         string  `json:"grant"`
	RequestSHA256 string  `json:"request_sha256"`
	Target        string  `json:"target"`
	RevBefore     uint64  `json:"rev_before"`
	RevAfter      uint64  `json:"rev_after"`
	AuditSeq      uint64  `json:"audit_seq"`
	At            *string `json:"at"`
}

// ReceiptOf returns the JSON form of a receipt.
func ReceiptOf(rc kvfence.Receipt) Receipt {
	return Receipt{Scope: rc.Scope, Action: rc.Action, Grant: rc.Grant,
		RequestSHA256: hex.EncodeToString(rc.RequestSHA256[:]), Target: rc.Target, RevBefore: rc.RevBefore,
		RevAfter: rc.RevAfter, AuditSeq: rc.AuditSeq, At: Time(rc.At)}
}

// ToReceipt returns the receipt a response describes.
func (r Receipt) ToReceipt() (kvfence.Receipt, error) {
	out := kvfence.Receipt{Scope: r.Scope, Action: r.Action, Grant: r.Grant, Target: r.Target,
		RevBefore: r.RevBefore, RevAfter: r.RevAfter, AuditSeq: r.AuditSeq}
	if err := hexDigest(r.RequestSHA256, &out.RequestSHA256); err != nil {
		return out, err
	}
	var err error
	out.At, err = ParseTime(r.At)
	return out, err
}

// Events is the response of GET /v1/events: entries in chain order, at
// most the page size the request asked for.
type Events struct {
	Events []audit.EntryJSON `json:"events"`
}

// Event returns the entry that e describes, checked against its hash: the
// entry is re-encoded canonically and must hash to e.Hash, so that a
// client holds exactly the bytes the receiver chained, not a lookalike.
func Event(e audit.EntryJSON) (kvfence.Event, error) {
	ent := audit.Entry{Seq: e.Seq, Kind: e.Kind, Scope: e.Scope, Epoch: e.Epoch, Grant: e.Grant, Executor: e.Executor,
		Action: e.Action, Outcome: e.Outcome, Reason: e.Reason, Target: e.Target, RevBefore: e.RevBefore,
		RevAfter: e.RevAfter, Decision: e.Decision, Note: e.Note, Actor: e.Actor, BaseSeq: e.BaseSeq}
	var err error
	if ent.Prev, err = hex.DecodeString(e.Prev); err != nil {
		return kvfence.Event{}, fmt.Errorf("entry %d: prev: %w", e.Seq, err)
	}
	if e.At != nil {
		at, err := time.Parse(time.RFC3339Nano, *e.At)
		if err != nil {
			return kvfence.Event{}, fmt.Errorf("entry %d: at: %w", e.Seq, err)
		}
		ent.At = at.UnixNano()
	}
	for _, d := range []struct {
		dst *[]byte
		src string
	}{{&ent.RequestSHA256, e.RequestSHA256}, {&ent.ValueSHA256, e.ValueSHA256},
		{&ent.BaseHash, e.BaseHash}, {&ent.BaseFence, e.BaseFence}} {
		if d.src != "" {
			if *d.dst, err = hex.DecodeString(d.src); err != nil {
				return kvfence.Event{}, fmt.Errorf("entry %d: %w", e.Seq, err)
			}
		}
	}
	raw, err := audit.EncodeEntry(&ent)
	if err != nil {
		return kvfence.Event{}, fmt.Errorf("entry %d: %w", e.Seq, err)
	}
	h := audit.HashEntry(raw)
	if hex.EncodeToString(h[:]) != e.Hash {
		return kvfence.Event{}, fmt.Errorf("entry %d: %w: its fields hash to %x, the receiver sent %s",
			e.Seq, audit.ErrBrokenLink, h, e.Hash)
	}
	return kvfence.Event{Entry: ent, Hash: h}, nil
}

// Time formats t for JSON, or nil for the zero time.
func Time(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// ParseTime parses what Time wrote.
func ParseTime(s *string) (time.Time, error) {
	if s == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

func hexDigest(s string, dst *[32]byte) error {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(dst) {
		return fmt.Errorf("digest %q is not 64 hex digits", s)
	}
	copy(dst[:], b)
	return nil
}
