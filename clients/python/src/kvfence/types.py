"""Typed results of the served receiver's API (docs/design.md §12), read
strictly from its JSON answers. Digests are bytes, times are
:class:`~kvfence._json.Timestamp` (exact to the nanosecond) or None for a
time that never happened, durations are :class:`datetime.timedelta`."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Optional, Union

import cbor2

from ._json import Obj, Timestamp, parse_duration

__all__ = [
    "OUTCOMES",
    "SubmitResult",
    "ScopeCreated",
    "Target",
    "LiveObject",
    "TARGET_KINDS",
    "Grant",
    "ScopeStatus",
    "Status",
    "Checkpoint",
    "HoldAck",
    "HeldScope",
    "HoldResult",
    "HoldAllResult",
    "Receipt",
    "Event",
    "Timestamp",
]

#: Submit's outcomes.
OUTCOMES = ("applied", "already_applied", "denied")

_SUBMIT = ("outcome", "reason", "detail", "scope", "epoch", "grant", "action", "target", "revision", "audit_seq",
           "receipt_seq")


@dataclass(frozen=True)
class SubmitResult:
    """The receiver's decision on an envelope (api.Submit)."""

    outcome: str
    reason: str
    detail: str
    scope: str
    epoch: int
    grant: str
    action: str
    target: str
    revision: int
    audit_seq: int
    receipt_seq: int = 0

    @staticmethod
    def from_json(v: Any, where: str = "submit answer") -> "SubmitResult":
        """Read a submit answer; raises ValueError."""
        o = Obj(v, where, _SUBMIT)
        r = SubmitResult(outcome=o.text("outcome"), reason=o.text("reason"), detail=o.text("detail"),
                         scope=o.text("scope"), epoch=o.uint("epoch"), grant=o.text("grant"), action=o.text("action"),
                         target=o.text("target"), revision=o.uint("revision"), audit_seq=o.uint("audit_seq"),
                         receipt_seq=o.uint("receipt_seq", optional=True))
        if r.outcome not in OUTCOMES:
            raise ValueError(f"{where}: unknown outcome {r.outcome!r}")
        if (r.outcome == "denied") != (r.reason != ""):
            raise ValueError(f"{where}: outcome {r.outcome!r} with reason {r.reason!r}")
        return r


@dataclass(frozen=True)
class ScopeCreated:
    """A scope as created: epoch 1, held."""

    scope: str
    epoch: int
    mode: str
    created_at: Optional[Timestamp]
    max_grant_ttl: Optional[timedelta]

    @staticmethod
    def from_json(v: Any, where: str = "scope answer") -> "ScopeCreated":
        """Read a POST /v1/scopes answer; raises ValueError."""
        o = Obj(v, where, ("scope", "epoch", "mode", "created_at", "max_grant_ttl"))
        ttl = o.text("max_grant_ttl", optional=True)
        return ScopeCreated(scope=o.text("scope"), epoch=o.uint("epoch"), mode=o.text("mode"),
                            created_at=o.time("created_at"),
                            max_grant_ttl=parse_duration(ttl, f"{where}: max_grant_ttl") if ttl else None)


#: The kinds of target a receiver reports; a served receiver creates the
#: first three (a func target is an embedder's).
TARGET_KINDS = ("internal", "etcd", "kubernetes", "func")


@dataclass(frozen=True)
class LiveObject:
    """A kubernetes target's object as the receiver read it for GET /v1/target."""

    resource_version: str
    uid: str
    last_dispatch: str

    @staticmethod
    def from_obj(o: Obj) -> "LiveObject":
        """Read the ``live`` member of a target."""
        return LiveObject(resource_version=o.text("resource_version"), uid=o.text("uid"),
                          last_dispatch=o.text("last_dispatch"))


@dataclass(frozen=True)
class Target:
    """A target: its scope, revision and value, and its kind with what the
    kind names: ``target_key`` and ``writes`` (etcd), ``object`` and
    ``uid`` (kubernetes, whose ``live`` is the object as read by GET
    /v1/target, or ``live_error`` says why it was not), ``effect`` (func)."""

    name: str
    scope: str
    revision: int
    value: bytes
    kind: str = "internal"
    target_key: str = ""
    writes: int = 0
    object: str = ""
    uid: str = ""
    effect: str = ""
    live: Optional[LiveObject] = None
    live_error: str = ""
    live_error_code: str = ""

    @staticmethod
    def from_json(v: Any, where: str = "target") -> "Target":
        """Read a target (GET /v1/target, /v1/target-list); raises
        ValueError if its text and base64 values disagree, or its kind
        names what it does not have."""
        o = Obj(v, where, ("target", "scope", "revision", "value", "value_b64", "kind", "target_key", "writes",
                           "object", "uid", "effect", "live", "live_error", "live_error_code"))
        value = o.b64("value_b64")
        text = o.v.get("value")
        if text is not None and (not isinstance(text, str) or text.encode("utf-8") != value):
            raise ValueError(f"{where}: value and value_b64 differ")
        # A receiver from before kinds gave none: every target was internal.
        kind = o.text("kind", optional=True) or "internal"
        if kind not in TARGET_KINDS:
            raise ValueError(f"{where}: kind {kind!r} is not one of {TARGET_KINDS}")
        key, obj = o.text("target_key", optional=True), o.text("object", optional=True)
        if bool(key) != (kind == "etcd") or bool(obj) != (kind == "kubernetes"):
            raise ValueError(f"{where}: a target of kind {kind} with target_key {key!r} and object {obj!r}")
        live = None
        if o.has("live"):
            lo = o.obj("live", ("resource_version", "uid", "last_dispatch"))
            assert lo is not None
            if kind != "kubernetes":
                raise ValueError(f"{where}: a target of kind {kind} with a live object")
            live = LiveObject.from_obj(lo)
        return Target(name=o.text("target"), scope=o.text("scope"), revision=o.uint("revision"), value=value,
                      kind=kind, target_key=key, writes=o.uint("writes", optional=True), object=obj,
                      uid=o.text("uid", optional=True), effect=o.text("effect", optional=True), live=live,
                      live_error=o.text("live_error", optional=True),
                      live_error_code=o.text("live_error_code", optional=True))


_ACTIVATE = ("grant", "scope", "epoch", "executor", "claim", "action", "request_sha256", "not_before", "not_after",
             "decision", "audit_seq")


@dataclass(frozen=True)
class Grant:
    """A grant: a reviewed authorisation for exactly one logical action.
    ``created_at``, ``revoked_seq`` and ``expired`` are known only for a
    stored grant (status, GET /v1/grant), not for activate's answer."""

    id: str
    scope: str
    epoch: int
    executor: str
    claim: str
    action: str
    request_sha256: bytes
    not_before: Optional[Timestamp]
    not_after: Optional[Timestamp]
    decision: str
    audit_seq: int
    created_at: Optional[Timestamp] = None
    revoked_seq: int = 0
    expired: bool = False

    @staticmethod
    def from_json(v: Any, where: str = "grant", *, stored: bool = False, extended: bool = False) -> "Grant":
        """Read an activate answer, a stored grant with stored, or a grant
        extension's answer (activate's shape and created_at) with extended;
        raises ValueError."""
        known = _ACTIVATE + (("created_at", "revoked_seq", "expired") if stored else ("created_at",) if extended else ())
        o = Obj(v, where, known)
        g = Grant(id=o.text("grant"), scope=o.text("scope"), epoch=o.uint("epoch"), executor=o.text("executor"),
                  claim=o.text("claim"), action=o.text("action"), request_sha256=o.hex32("request_sha256"),
                  not_before=o.time("not_before"), not_after=o.time("not_after"), decision=o.text("decision"),
                  audit_seq=o.uint("audit_seq"))
        if stored:
            g = dataclasses.replace(g, created_at=o.time("created_at"), revoked_seq=o.uint("revoked_seq"),
                                    expired=o.flag("expired"))
        elif extended:
            g = dataclasses.replace(g, created_at=o.time("created_at"))
        return g


_SCOPE_STATUS = ("scope", "epoch", "mode", "active_grant", "created_at", "activated_at", "hold_requested_at",
                 "hold_committed_at", "last_stale_rejection_at", "stale_rejections", "denials", "grant",
                 "max_grant_ttl")


@dataclass(frozen=True)
class ScopeStatus:
    """A scope's control state; its timestamps are different events."""

    scope: str
    epoch: int
    mode: str
    active_grant: str
    created_at: Optional[Timestamp]
    activated_at: Optional[Timestamp]
    hold_requested_at: Optional[Timestamp]
    hold_committed_at: Optional[Timestamp]
    last_stale_rejection_at: Optional[Timestamp]
    stale_rejections: int
    denials: dict[str, int]
    grant: Optional[Grant]
    max_grant_ttl: Optional[timedelta]

    @staticmethod
    def from_json(v: Any, where: str = "scope status") -> "ScopeStatus":
        """Read one scope of a status answer; raises ValueError."""
        o = Obj(v, where, _SCOPE_STATUS)
        den = o.v.get("denials")
        if not isinstance(den, dict):
            raise ValueError(f"{where}: denials is not an object")
        denials = {k: Obj({"n": n}, f"{where}.denials", ("n",)).uint("n") for k, n in den.items()}
        g = o.v.get("grant", ...)
        if g is ...:
            raise ValueError(f"{where} has no 'grant'")
        ttl = o.text("max_grant_ttl", optional=True)
        st = ScopeStatus(
            scope=o.text("scope"), epoch=o.uint("epoch"), mode=o.text("mode"), active_grant=o.text("active_grant"),
            created_at=o.time("created_at"), activated_at=o.time("activated_at"),
            hold_requested_at=o.time("hold_requested_at"), hold_committed_at=o.time("hold_committed_at"),
            last_stale_rejection_at=o.time("last_stale_rejection_at"), stale_rejections=o.uint("stale_rejections"),
            denials=denials, grant=None if g is None else Grant.from_json(g, f"{where}.grant", stored=True),
            max_grant_ttl=parse_duration(ttl, f"{where}: max_grant_ttl") if ttl else None)
        if st.mode not in ("held", "open"):
            raise ValueError(f"{where}: mode {st.mode!r} is neither held nor open")
        if (st.mode == "open") != (st.grant is not None) or (st.grant is not None and st.grant.id != st.active_grant):
            raise ValueError(f"{where}: mode {st.mode!r} disagrees with its grant")
        return st


@dataclass(frozen=True)
class Status:
    """The control state of scopes, and the audit head's seq read before
    them."""

    scopes: list[ScopeStatus]
    audit_seq: int
    anchor_checked: bool

    @staticmethod
    def from_json(v: Any, where: str = "status answer") -> "Status":
        """Read a GET /v1/status answer; raises ValueError."""
        o = Obj(v, where, ("scopes", "audit_seq", "anchor_checked"))
        return Status(scopes=o.array("scopes", ScopeStatus.from_json), audit_seq=o.uint("audit_seq"),
                      anchor_checked=o.flag("anchor_checked"))


def _signed(raw: bytes, body_key: str, body_keys: tuple[frozenset[str], ...], where: str
            ) -> tuple[bytes, bytes, dict[str, Any]]:
    """Parse a signed statement as audit writes it: the canonical CBOR map
    {key, sig, body_key: canonical CBOR of the body}, with exactly the body
    keys of one of body_keys. Returns the key fingerprint, the signature
    and the body. The signature is not checked: that needs the receiver's
    public key."""
    def canonical(b: bytes, what: str) -> dict[str, Any]:
        try:
            m = cbor2.loads(b)
        except Exception as e:  # any decoding failure of the receiver's bytes
            raise ValueError(f"{where}: {what} is not CBOR: {e}") from None
        if not isinstance(m, dict) or cbor2.dumps(m, canonical=True) != b:
            raise ValueError(f"{where}: {what} is not a canonical CBOR map")
        return m

    outer = canonical(raw, "signed_b64")
    if set(outer) != {"key", "sig", body_key}:
        raise ValueError(f"{where}: signed_b64 has keys {sorted(map(str, outer))}")
    key, sig, body = outer["key"], outer["sig"], outer[body_key]
    if not (isinstance(key, bytes) and len(key) == 32 and isinstance(sig, bytes) and len(sig) == 64
            and isinstance(body, bytes)):
        raise ValueError(f"{where}: signed_b64 is not a key fingerprint, a signature and a body")
    inner = canonical(body, body_key)
    if frozenset(inner) not in body_keys:
        raise ValueError(f"{where}: the signed {body_key} has keys {sorted(map(str, inner))}")
    return key, sig, inner


def _same(where: str, pairs: tuple[tuple[str, Any, Any], ...]) -> None:
    for name, json_value, signed_value in pairs:
        if json_value != signed_value or type(json_value) is not type(signed_value):
            raise ValueError(f"{where}: {name} is not what its signed_b64 says")


def _ns(t: Optional[Timestamp]) -> Optional[int]:
    return None if t is None else t.unix_nano


_CHECKPOINT_BODY = (frozenset({"at", "seq", "head", "root", "state", "receiver", "epoch_high_water"}),
                    frozenset({"at", "seq", "head", "root", "state", "receiver", "epoch_high_water", "admission_at",
                               "admission_sha256"}))
_HOLD_ACK_BODY = (frozenset({"at", "epoch", "scope", "hold_id", "receiver", "audit_seq", "requested_at",
                             "checkpoint_seq", "previous_epoch", "checkpoint_head"}),)


@dataclass(frozen=True)
class Checkpoint:
    """A signed checkpoint: its fields, and ``signed``, the canonical
    signed bytes a verifier checks with the receiver's public key."""

    receiver: str
    seq: int
    head: bytes
    state: bytes
    epoch_high_water: int
    at: Optional[Timestamp]
    key_fingerprint: str
    signature: bytes
    signed: bytes
    #: The signing key's fingerprint (SHA-256 of its public key), as signed.
    key: bytes = b""
    #: The RFC 6962 root of the audit entries 1..seq, as signed.
    root: bytes = b""

    @staticmethod
    def from_json(v: Any, where: str = "checkpoint") -> "Checkpoint":
        """Read a checkpoint and check that every field says what its signed
        bytes say (the signature itself is not checked); raises
        ValueError."""
        o = Obj(v, where, ("receiver", "seq", "head", "root", "state", "epoch_high_water", "at", "key_fingerprint",
                           "signature_b64", "signed_b64"))
        c = Checkpoint(receiver=o.text("receiver"), seq=o.uint("seq"), head=o.hex32("head"), root=o.hex32("root"),
                       state=o.hex32("state"),
                       epoch_high_water=o.uint("epoch_high_water"), at=o.time("at"),
                       key_fingerprint=o.text("key_fingerprint"), signature=o.b64("signature_b64"),
                       signed=o.b64("signed_b64"))
        key, sig, body = _signed(c.signed, "checkpoint", _CHECKPOINT_BODY, where)
        fp = "SHA256:" + base64.b64encode(key).decode("ascii").rstrip("=")
        _same(where, (("receiver", c.receiver, body["receiver"]), ("seq", c.seq, body["seq"]),
                      ("head", c.head, body["head"]), ("root", c.root, body["root"]), ("state", c.state, body["state"]),
                      ("epoch_high_water", c.epoch_high_water, body["epoch_high_water"]),
                      ("at", _ns(c.at), body["at"]), ("key_fingerprint", c.key_fingerprint, fp),
                      ("signature_b64", c.signature, sig)))
        return dataclasses.replace(c, key=key)


@dataclass(frozen=True)
class HoldAck:
    """A scope's signed hold acknowledgment; ``signed`` is the canonical
    signed bytes."""

    hold_id: str
    previous_epoch: int
    epoch: int
    audit_seq: int
    requested_at: Optional[Timestamp]
    committed_at: Optional[Timestamp]
    checkpoint_seq: int
    signed: bytes
    #: The held scope, the receiver, the covering checkpoint's head and the
    #: signing key's fingerprint, as signed.
    scope: str = ""
    receiver: str = ""
    checkpoint_head: bytes = b""
    key: bytes = b""

    @staticmethod
    def from_json(v: Any, where: str = "ack") -> "HoldAck":
        """Read a hold acknowledgment and check that every field says what
        its signed bytes say (the signature itself is not checked); raises
        ValueError."""
        o = Obj(v, where, ("hold_id", "previous_epoch", "epoch", "audit_seq", "requested_at", "committed_at",
                           "checkpoint_seq", "signed_b64"))
        a = HoldAck(hold_id=o.text("hold_id"), previous_epoch=o.uint("previous_epoch"), epoch=o.uint("epoch"),
                    audit_seq=o.uint("audit_seq"), requested_at=o.time("requested_at"),
                    committed_at=o.time("committed_at"), checkpoint_seq=o.uint("checkpoint_seq"),
                    signed=o.b64("signed_b64"))
        key, _sig, body = _signed(a.signed, "hold_ack", _HOLD_ACK_BODY, where)
        _same(where, (("hold_id", a.hold_id, body["hold_id"]), ("previous_epoch", a.previous_epoch, body["previous_epoch"]),
                      ("epoch", a.epoch, body["epoch"]), ("audit_seq", a.audit_seq, body["audit_seq"]),
                      ("requested_at", _ns(a.requested_at), body["requested_at"]),
                      ("committed_at", _ns(a.committed_at), body["at"]),
                      ("checkpoint_seq", a.checkpoint_seq, body["checkpoint_seq"])))
        if not (isinstance(body["scope"], str) and isinstance(body["receiver"], str)
                and isinstance(body["checkpoint_head"], bytes)):
            raise ValueError(f"{where}: the signed scope, receiver or checkpoint head is mistyped")
        return dataclasses.replace(a, scope=body["scope"], receiver=body["receiver"],
                                   checkpoint_head=body["checkpoint_head"], key=key)


@dataclass(frozen=True)
class HeldScope:
    """One scope's part of a hold."""

    scope: str
    previous_epoch: int
    epoch: int
    mode: str
    ack: Optional[HoldAck]

    @staticmethod
    def from_json(v: Any, where: str = "held scope") -> "HeldScope":
        """Read one scope of a hold answer; raises ValueError."""
        o = Obj(v, where, ("scope", "previous_epoch", "epoch", "mode", "ack"))
        ack = o.v.get("ack")
        return HeldScope(scope=o.text("scope"), previous_epoch=o.uint("previous_epoch"), epoch=o.uint("epoch"),
                         mode=o.text("mode"), ack=None if ack is None else HoldAck.from_json(ack, f"{where}.ack"))


_HOLD = ("scopes", "hold_requested_at", "hold_committed_at", "audit_seq", "repeated", "checkpoint", "outstanding")

_OBJECT = ("group", "version", "resource", "namespace", "name")


@dataclass(frozen=True)
class OutstandingDispatch:
    """A write to a remote target, decided before a hold, whose outcome is
    unknown: it may or may not have reached its object, and was fenced off
    before the hold was acknowledged."""

    scope: str
    action: str
    grant: str
    target: str
    object: dict[str, str]
    dispatch_id: str
    precondition: str
    version: str
    audit_seq: int

    @staticmethod
    def from_json(v: Any, where: str) -> "OutstandingDispatch":
        """Read one element of a hold answer's outstanding; raises ValueError."""
        o = Obj(v, where, ("scope", "action", "grant", "target", "object", "dispatch_id", "precondition",
                           "version", "audit_seq"))
        ob = o.obj("object", _OBJECT)
        assert ob is not None
        return OutstandingDispatch(scope=o.text("scope"), action=o.text("action"), grant=o.text("grant"),
                                   target=o.text("target"), object={k: ob.text(k) for k in _OBJECT},
                                   dispatch_id=o.text("dispatch_id"), precondition=o.text("precondition"),
                                   version=o.text("version"), audit_seq=o.uint("audit_seq"))


@dataclass(frozen=True)
class HoldResult:
    """A committed hold (or, with ``repeated``, the first hold with the
    same hold id)."""

    scopes: list[HeldScope]
    hold_requested_at: Optional[Timestamp]
    hold_committed_at: Optional[Timestamp]
    audit_seq: int
    repeated: bool
    checkpoint: Optional[Checkpoint]
    # Writes to remote targets whose outcome is unknown (receivers that
    # predate them send none).
    outstanding: list[OutstandingDispatch] = field(default_factory=list)

    @staticmethod
    def from_json(v: Any, where: str = "hold answer", extra: tuple[str, ...] = ()) -> "HoldResult":
        """Read a POST /v1/hold answer; raises ValueError."""
        o = Obj(v, where, _HOLD + extra)
        cp = o.v.get("checkpoint")
        res = HoldResult(scopes=o.array("scopes", HeldScope.from_json), hold_requested_at=o.time("hold_requested_at"),
                         hold_committed_at=o.time("hold_committed_at"), audit_seq=o.uint("audit_seq"),
                         repeated=o.flag("repeated"),
                         checkpoint=None if cp is None else Checkpoint.from_json(cp, f"{where}.checkpoint"),
                         outstanding=o.array("outstanding", OutstandingDispatch.from_json) if o.has("outstanding") else [])
        last = 0
        for s in res.scopes:
            if s.mode != "held" or s.epoch <= s.previous_epoch:
                raise ValueError(f"{where}: scope {s.scope!r} is {s.mode} at epoch {s.previous_epoch} to {s.epoch}")
            if s.ack is None:
                continue
            a = s.ack
            if (a.previous_epoch, a.epoch) != (s.previous_epoch, s.epoch):
                raise ValueError(f"{where}: scope {s.scope!r}'s ack says epoch {a.previous_epoch} to {a.epoch}")
            if a.requested_at != res.hold_requested_at or a.committed_at != res.hold_committed_at:
                raise ValueError(f"{where}: scope {s.scope!r}'s ack times are not the hold's")
            if a.scope != s.scope:
                raise ValueError(f"{where}: scope {s.scope!r}'s ack is signed for scope {a.scope!r}")
            cp = res.checkpoint
            if (cp is None or a.checkpoint_seq != cp.seq or a.audit_seq > cp.seq or a.checkpoint_head != cp.head
                    or a.receiver != cp.receiver or a.key != cp.key):
                raise ValueError(f"{where}: scope {s.scope!r}'s ack is not covered by the answer's checkpoint")
            last = max(last, a.audit_seq)
        if res.checkpoint is not None and res.checkpoint.seq < res.audit_seq:
            raise ValueError(f"{where}: checkpoint {res.checkpoint.seq} does not cover the hold's entry {res.audit_seq}")
        if last and last != res.audit_seq:
            raise ValueError(f"{where}: audit seq {res.audit_seq}, its last acknowledged entry {last}")
        return res


@dataclass(frozen=True)
class HoldAllResult(HoldResult):
    """A hold of every open scope, and the scopes found held already."""

    already_held: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Receipt:
    """The record of an applied action."""

    scope: str
    action: str
    grant: str
    request_sha256: bytes
    target: str
    rev_before: int
    rev_after: int
    audit_seq: int
    at: Optional[Timestamp]

    @staticmethod
    def from_json(v: Any, where: str = "receipt") -> "Receipt":
        """Read a receipt; raises ValueError."""
        o = Obj(v, where, ("scope", "action", "grant", "request_sha256", "target", "rev_before", "rev_after",
                           "audit_seq", "at"))
        return Receipt(scope=o.text("scope"), action=o.text("action"), grant=o.text("grant"),
                       request_sha256=o.hex32("request_sha256"), target=o.text("target"),
                       rev_before=o.uint("rev_before"), rev_after=o.uint("rev_after"), audit_seq=o.uint("audit_seq"),
                       at=o.time("at"))


_HASH_PREFIX = b"kvfence/audit/v1\n"
_EVENT_TEXT = ("scope", "grant", "executor", "action", "outcome", "reason", "target", "decision", "note", "actor")
_EVENT_UINT = ("epoch", "rev_before", "rev_after", "base_seq")
_EVENT_HEX = ("request_sha256", "value_sha256", "base_hash", "base_fence")


@dataclass(frozen=True)
class Event:
    """One audit chain entry, checked against its link hash: its fields
    re-encode (audit.EncodeEntry) to bytes whose hash is ``hash``."""

    seq: int
    hash: bytes
    prev: bytes
    at: Optional[Timestamp]
    kind: str
    fields: dict[str, Union[str, int, bytes]]

    def encode(self) -> bytes:
        """The entry's canonical CBOR, the bytes its hash covers."""
        m: dict[str, Union[str, int, bytes]] = {"seq": self.seq, "prev": self.prev, "kind": self.kind,
                                                "at": self.at.unix_nano if self.at else 0}
        m.update({k: v for k, v in self.fields.items() if v})
        out: bytes = cbor2.dumps(m, canonical=True)
        return out

    @staticmethod
    def from_json(v: Any, where: str = "event") -> "Event":
        """Read an event and check it against its hash; raises ValueError."""
        known = ("seq", "hash", "prev", "at", "kind") + _EVENT_TEXT + _EVENT_UINT + _EVENT_HEX
        o = Obj(v, where, known)
        prev_hex = o.text("prev")
        fields: dict[str, Union[str, int, bytes]] = {}
        for k in _EVENT_TEXT:
            fields[k] = o.text(k, optional=True)
        for k in _EVENT_UINT:
            fields[k] = o.uint(k, optional=True)
        for k in _EVENT_HEX:
            fields[k] = o.hex32(k) if o.has(k) else b""
        ev = Event(seq=o.uint("seq"), hash=o.hex32("hash"), prev=o.hex32("prev") if prev_hex else b"",
                   at=o.time("at"), kind=o.text("kind"), fields=fields)
        if ev.seq == 0 or not ev.kind:
            raise ValueError(f"{where}: seq 0 or no kind")
        got = hashlib.sha256(_HASH_PREFIX + ev.encode()).digest()
        if got != ev.hash:
            raise ValueError(f"{where}: entry {ev.seq}'s fields hash to {got.hex()}, the receiver sent {ev.hash.hex()}")
        return ev

    def __getitem__(self, name: str) -> Union[str, int, bytes]:
        return self.fields[name]
