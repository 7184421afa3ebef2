"""Canonical CBOR requests and envelopes, byte for byte as the Go package
``kvfence`` encodes them (docs/design.md §5).

Both are CBOR maps with text keys in core deterministic encoding (RFC 8949
§4.2.1): shortest integers and lengths, definite lengths, keys sorted by
their encoded bytes, no tags and no floats. cbor2's canonical mode encodes
exactly that for the only types used here (text and byte strings and
non-negative integers below 2**64); the cross-language vectors in
``testdata/wire`` hold the two implementations to each other.

Decoding is as strict as Go's: the bytes are decoded, the value is checked
field by field and re-encoded, and the result must be the same bytes, so a
message has one accepted spelling.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Optional, Union

import cbor2

from .errors import MalformedEnvelopeError, MalformedRequestError

__all__ = [
    "WIRE_VERSION",
    "MAX_ENVELOPE_SIZE",
    "MAX_NAME_LEN",
    "Request",
    "Envelope",
    "set_request",
    "patch_request",
    "encode_request",
    "encode_envelope",
    "decode_request",
    "decode_envelope",
    "request_digest",
    "check_name",
    "validate_patch",
]

#: The only envelope and request version.
WIRE_VERSION = 1
#: The receiver's default limit on an envelope, and on the request it carries.
MAX_ENVELOPE_SIZE = 64 << 10
#: The longest identifier (scope, target, action, grant, executor, claim), in
#: UTF-8 bytes.
MAX_NAME_LEN = 512
_MAX_UINT64 = (1 << 64) - 1

# Unicode's Bidi_Control characters, which Go's unicode.Bidi_Control lists.
_BIDI_CONTROL = frozenset(
    [0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069]
)


def check_name(field: str, value: object) -> str:
    """Check an identifier as the receiver does (package ident) and return
    it: a non-empty str of valid UTF-8, at most 512 bytes, with no control
    or bidirectional-control character. Raises ValueError naming field."""
    if not isinstance(value, str):
        raise ValueError(f"{field} is {type(value).__name__}, not str")
    if value == "":
        raise ValueError(f"{field} is empty")
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{field} is not valid UTF-8") from None
    if n > MAX_NAME_LEN:
        raise ValueError(f"{field} is {n} bytes, over the {MAX_NAME_LEN}-byte limit")
    for ch in value:
        c = ord(ch)
        # Go's unicode.IsControl: C0, DEL and C1.
        if c < 0x20 or 0x7F <= c <= 0x9F or c in _BIDI_CONTROL:
            raise ValueError(f"{field} contains a control character")
    return value


def _uint(field: str, value: object) -> int:
    # bool is an int in Python and CBOR's true is not 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{field} is {type(value).__name__}, not an unsigned integer")
    if value < 0 or value > _MAX_UINT64:
        raise ValueError(f"{field} {value} is not an unsigned 64-bit integer")
    return value


def _bytes(field: str, value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ValueError(f"{field} is {type(value).__name__}, not bytes")
    return bytes(value)


_PATCH_MEMBERS = {
    "add": ("value",),
    "remove": (),
    "replace": ("value",),
    "move": ("from",),
    "copy": ("from",),
    "test": ("value",),
}


def _pairs_no_dups(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"member {k!r} is given twice")
        out[k] = v
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_surrogates(v: Any) -> None:
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            x.encode("utf-8")  # a lone surrogate escape raises
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())


def _check_pointer(s: str) -> None:
    if s == "":
        return
    if s[0] != "/":
        raise ValueError(f"JSON Pointer {s!r} is neither empty nor starts with /")
    for i, ch in enumerate(s):
        if ch == "~" and (i + 1 == len(s) or s[i + 1] not in "01"):
            raise ValueError(f"JSON Pointer {s!r} has ~ not followed by 0 or 1")


def validate_patch(patch: bytes) -> None:
    """Check that patch is an RFC 6902 JSON Patch the receiver will carry:
    UTF-8 JSON, an array of operation objects, no member given twice, no
    unpaired surrogate, exactly the members RFC 6902 defines for each
    operation, valid RFC 6901 pointers. Raises ValueError."""
    try:
        text = bytes(patch).decode("utf-8")
        ops = json.loads(text, object_pairs_hook=_pairs_no_dups, parse_constant=_refuse_constant)
        _check_surrogates(ops)
    except (UnicodeError, ValueError, RecursionError) as e:
        raise ValueError(f"malformed patch: {e}") from None
    if not isinstance(ops, list):
        raise ValueError("malformed patch: not a JSON array of operations")
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise ValueError(f"malformed patch: operation {i}: not a JSON object")
        name = op.get("op")
        if not isinstance(name, str):
            raise ValueError(f"malformed patch: operation {i}: no string \"op\" member")
        if name not in _PATCH_MEMBERS:
            raise ValueError(f"malformed patch: operation {i}: op {name!r} is not one of add, remove, replace, move, copy, test")
        want = ("op", "path") + _PATCH_MEMBERS[name]
        for m in want:
            if m not in op:
                raise ValueError(f"malformed patch: operation {i}: {name} operation has no {m!r} member")
        for m in op:
            if m not in want:
                raise ValueError(f"malformed patch: operation {i}: {name} operation has member {m!r}, which RFC 6902 does not define for it")
        for m in ("path", "from"):
            if m in want:
                if not isinstance(op[m], str):
                    raise ValueError(f"malformed patch: operation {i}: member {m!r} is not a string")
                _check_pointer(op[m])


@dataclass(frozen=True)
class Request:
    """The approved change: the logical action, the target, its
    preconditions and exactly one mutation (``set`` or ``patch``).

    ``expect_revision`` and ``expect_value`` are preconditions, None when
    absent; ``set`` is the new value (``b""`` is a value); ``patch`` an RFC
    6902 JSON Patch for a JSON target.
    """

    action: str
    target: str
    set: Optional[bytes] = None
    patch: Optional[bytes] = None
    expect_revision: Optional[int] = None
    expect_value: Optional[bytes] = None
    v: int = WIRE_VERSION

    def check(self) -> None:
        """Check every field as Go's EncodeRequest does; raises
        MalformedRequestError."""
        try:
            if _uint("v", self.v) != WIRE_VERSION:
                raise ValueError(f"version {self.v}, want {WIRE_VERSION}")
            check_name("action", self.action)
            check_name("target", self.target)
            if self.set is not None:
                _bytes("set", self.set)
            if self.expect_value is not None:
                _bytes("expect_value", self.expect_value)
            if self.set is not None and self.patch is not None:
                raise ValueError("set and patch are mutually exclusive")
            if self.set is None and self.patch is None:
                raise ValueError("one of set or patch is required")
            if self.patch is not None:
                validate_patch(_bytes("patch", self.patch))
            if self.expect_revision is not None and _uint("expect_revision", self.expect_revision) == 0:
                raise ValueError("expect_revision 0 never matches (revisions start at 1)")
        except ValueError as e:
            raise MalformedRequestError(f"malformed request: {e}") from None

    def to_map(self) -> dict[str, Union[int, str, bytes]]:
        """The CBOR map of the request, without absent optional fields."""
        m: dict[str, Union[int, str, bytes]] = {"v": self.v, "action": self.action, "target": self.target}
        if self.expect_revision is not None:
            m["expect_revision"] = self.expect_revision
        if self.expect_value is not None:
            m["expect_value"] = bytes(self.expect_value)
        if self.set is not None:
            m["set"] = bytes(self.set)
        if self.patch is not None:
            m["patch"] = bytes(self.patch)
        return m

    def encode(self) -> bytes:
        """The canonical encoding: the bytes an approver reviews and a grant
        binds."""
        return encode_request(self)


@dataclass(frozen=True)
class Envelope:
    """What a worker submits: the authority it claims to hold and the exact
    approved request bytes. The receiver never takes the caller's identity
    from it: ``executor`` must equal the authenticated caller."""

    scope: str
    epoch: int
    grant: str
    executor: str
    claim: str
    request: bytes
    v: int = WIRE_VERSION

    def check(self) -> None:
        """Check every field as Go's EncodeEnvelope does; raises
        MalformedEnvelopeError."""
        try:
            if _uint("v", self.v) != WIRE_VERSION:
                raise ValueError(f"version {self.v}, want {WIRE_VERSION}")
            _uint("epoch", self.epoch)
            for field in ("scope", "grant", "executor", "claim"):
                check_name(field, getattr(self, field))
            if len(_bytes("request", self.request)) == 0:
                raise ValueError("request is empty")
        except ValueError as e:
            raise MalformedEnvelopeError(f"malformed envelope: {e}") from None

    def to_map(self) -> dict[str, Union[int, str, bytes]]:
        """The CBOR map of the envelope."""
        return {"v": self.v, "scope": self.scope, "epoch": self.epoch, "grant": self.grant,
                "executor": self.executor, "claim": self.claim, "request": bytes(self.request)}

    def encode(self) -> bytes:
        """The canonical encoding: the bytes a worker submits."""
        return encode_envelope(self)


def set_request(action: str, target: str, value: bytes) -> Request:
    """A request for action that sets target to value."""
    return Request(action=action, target=target, set=bytes(value))


def patch_request(action: str, target: str, patch: Union[bytes, str]) -> Request:
    """A request for action that applies the RFC 6902 JSON Patch patch to
    target's JSON value."""
    return Request(action=action, target=target, patch=patch.encode("utf-8") if isinstance(patch, str) else bytes(patch))


def _dumps(m: dict[str, Union[int, str, bytes]]) -> bytes:
    out: bytes = cbor2.dumps(m, canonical=True)
    return out


def encode_request(r: Request) -> bytes:
    """Check r and return its canonical encoding (Go's EncodeRequest)."""
    r.check()
    return _dumps(r.to_map())


def encode_envelope(e: Envelope) -> bytes:
    """Check e and return its canonical encoding (Go's EncodeEnvelope). The
    request bytes are carried unchanged."""
    e.check()
    return _dumps(e.to_map())


def _decode_map(b: bytes, limit: int, keys: frozenset[str]) -> dict[str, Any]:
    b = bytes(b)
    if limit <= 0:
        limit = MAX_ENVELOPE_SIZE
    if len(b) == 0:
        raise ValueError("empty input")
    if len(b) > limit:
        raise ValueError(f"{len(b)} bytes exceeds the {limit}-byte limit")
    if b[0] & 0xE0 != 0xA0:
        raise ValueError("not a CBOR map")
    try:
        m = cbor2.loads(b)
    except (cbor2.CBORDecodeError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as e:
        raise ValueError(f"not CBOR: {e}") from None
    if not isinstance(m, dict):
        raise ValueError("not a CBOR map")
    for k in m:
        if not isinstance(k, str):
            raise ValueError(f"key {k!r} is not text")
        if k not in keys:
            raise ValueError(f"unknown key {k!r}")
    return m


def _require_canonical(b: bytes, m: dict[str, Union[int, str, bytes]]) -> None:
    # One comparison rejects what the decoder let through: non-shortest
    # integers and lengths, unsorted or duplicate keys, indefinite lengths,
    # tags, trailing bytes, and explicitly encoded absent optionals.
    if _dumps(m) != bytes(b):
        raise ValueError("not in canonical form (a required field is missing, an integer or length is not "
                         "shortest, keys are out of order or repeated, or there are tags or trailing bytes)")


_REQUEST_KEYS = frozenset({"v", "action", "target", "expect_revision", "expect_value", "set", "patch"})
_ENVELOPE_KEYS = frozenset({"v", "scope", "epoch", "grant", "executor", "claim", "request"})


def decode_request(b: bytes, limit: int = 0) -> Request:
    """Decode b strictly (Go's DecodeRequest): the canonical encoding of a
    valid request, at most limit bytes (MAX_ENVELOPE_SIZE when 0). Raises
    MalformedRequestError."""
    try:
        m = _decode_map(b, limit, _REQUEST_KEYS)
        for k in ("v", "action", "target"):
            if k not in m:
                raise ValueError(f"{k} is missing")
        r = Request(
            v=_uint("v", m["v"]),
            action=_text("action", m["action"]),
            target=_text("target", m["target"]),
            expect_revision=_uint("expect_revision", m["expect_revision"]) if "expect_revision" in m else None,
            expect_value=_bytes("expect_value", m["expect_value"]) if "expect_value" in m else None,
            set=_bytes("set", m["set"]) if "set" in m else None,
            patch=_bytes("patch", m["patch"]) if "patch" in m else None,
        )
        if r.patch is not None and len(r.patch) == 0:
            raise ValueError("patch is empty")
        _require_canonical(b, r.to_map())
    except ValueError as e:
        raise MalformedRequestError(f"malformed request: {e}") from None
    r.check()
    return r


def decode_envelope(b: bytes, limit: int = 0) -> Envelope:
    """Decode b strictly (Go's DecodeEnvelope): the canonical encoding of a
    valid envelope with every field present, at most limit bytes. Raises
    MalformedEnvelopeError."""
    try:
        m = _decode_map(b, limit, _ENVELOPE_KEYS)
        for k in sorted(_ENVELOPE_KEYS):
            if k not in m:
                raise ValueError(f"{k} is missing")
        e = Envelope(v=_uint("v", m["v"]), scope=_text("scope", m["scope"]), epoch=_uint("epoch", m["epoch"]),
                     grant=_text("grant", m["grant"]), executor=_text("executor", m["executor"]),
                     claim=_text("claim", m["claim"]), request=_bytes("request", m["request"]))
        _require_canonical(b, e.to_map())
    except ValueError as err:
        raise MalformedEnvelopeError(f"malformed envelope: {err}") from None
    e.check()
    return e


def _text(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{field} is {type(value).__name__}, not text")
    return value


def request_digest(request: bytes) -> bytes:
    """The SHA-256 of the exact request bytes: the value a grant binds."""
    return hashlib.sha256(bytes(request)).digest()

