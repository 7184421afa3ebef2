"""Strict reading of JSON from files and from the receiver's answers.

As the Go side (api.DecodeStrict, api.DecodeAnswer): the bytes must be
UTF-8 and one JSON value; a member given twice, an unpaired surrogate
escape, NaN or Infinity, nesting over 32 levels, and a member that differs
only in case from a known one are refused. Answers may carry members this
client does not know (a newer receiver may add some); files may not.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Optional, TypeVar

from .wire import _pairs_no_dups, _refuse_constant

MAX_DEPTH = 32
_MAX_UINT64 = (1 << 64) - 1

T = TypeVar("T")


def loads(b: bytes) -> Any:
    """Parse b as one strict JSON value; raises ValueError."""
    try:
        text = bytes(b).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"the body is not UTF-8 (at byte {e.start})") from None
    try:
        v = json.loads(text, object_pairs_hook=_pairs_no_dups, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    _check(v)
    return v


def _check(v: Any) -> None:
    stack: list[tuple[Any, int]] = [(v, 0)]
    while stack:
        x, depth = stack.pop()
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("a string has an unpaired UTF-16 surrogate escape") from None
        elif isinstance(x, (list, dict)):
            if depth >= MAX_DEPTH:
                raise ValueError(f"objects and arrays nested over {MAX_DEPTH} levels")
            items: Iterable[Any] = x if isinstance(x, list) else list(x.keys()) + list(x.values())
            stack.extend((y, depth + 1) for y in items)


class Obj:
    """One JSON object read against the members its type has.

    ``where`` names it in errors. With ``strict`` a member not in ``known``
    is refused; without, it is let through, but a member that is a known
    one in another case never is.
    """

    def __init__(self, v: Any, where: str, known: Iterable[str], *, strict: bool = False) -> None:
        if not isinstance(v, dict):
            raise ValueError(f"{where} is not a JSON object")
        known_set = frozenset(known)
        folded = {k.casefold(): k for k in known_set}
        for k in v:
            if k in known_set:
                continue
            if k.casefold() in folded:
                raise ValueError(f"{where} has member {k!r}; the member is {folded[k.casefold()]!r}")
            if strict:
                raise ValueError(f"{where} has unknown member {k!r}")
        self.v: dict[str, Any] = v
        self.where = where

    def has(self, name: str) -> bool:
        """Whether the member is present (null counts as present)."""
        return name in self.v

    def _get(self, name: str, optional: bool) -> Any:
        if name not in self.v:
            if optional:
                return None
            raise ValueError(f"{self.where} has no {name!r}")
        return self.v[name]

    def text(self, name: str, *, optional: bool = False) -> str:
        """A string member; "" when optional and absent."""
        x = self._get(name, optional)
        if x is None and optional and name not in self.v:
            return ""
        if not isinstance(x, str):
            raise ValueError(f"{self.where}: {name} is {_kind(x)}, not a string")
        return x

    def uint(self, name: str, *, optional: bool = False) -> int:
        """An unsigned 64-bit integer member; 0 when optional and absent."""
        x = self._get(name, optional)
        if x is None and optional and name not in self.v:
            return 0
        if not isinstance(x, int) or isinstance(x, bool) or x < 0 or x > _MAX_UINT64:
            raise ValueError(f"{self.where}: {name} is {_kind(x)}, not an unsigned 64-bit integer")
        return x

    def flag(self, name: str, *, optional: bool = False) -> bool:
        """A boolean member; False when optional and absent."""
        x = self._get(name, optional)
        if x is None and optional and name not in self.v:
            return False
        if not isinstance(x, bool):
            raise ValueError(f"{self.where}: {name} is {_kind(x)}, not a boolean")
        return x

    def b64(self, name: str, *, optional: bool = False) -> bytes:
        """A padded standard base64 member, decoded."""
        s = self.text(name, optional=optional)
        return b64decode(s, f"{self.where}: {name}")

    def hex32(self, name: str) -> bytes:
        """A SHA-256 digest member: 64 lowercase hex digits."""
        s = self.text(name)
        if not re.fullmatch(r"[0-9a-f]{64}", s):
            raise ValueError(f"{self.where}: {name} {s!r} is not 64 lowercase hex digits")
        return bytes.fromhex(s)

    def time(self, name: str) -> Optional["Timestamp"]:
        """An RFC 3339 UTC time member, or None for null."""
        x = self._get(name, False)
        if x is None:
            return None
        if not isinstance(x, str):
            raise ValueError(f"{self.where}: {name} is {_kind(x)}, not a time")
        return Timestamp.parse(x, f"{self.where}: {name}")

    def obj(self, name: str, known: Iterable[str], *, nullable: bool = False) -> Optional["Obj"]:
        """A nested object member, or None for null when nullable."""
        x = self._get(name, False)
        if x is None and nullable:
            return None
        return Obj(x, f"{self.where}.{name}", known)

    def array(self, name: str, item: Callable[[Any, str], T]) -> list[T]:
        """An array member, each element read by item(value, where)."""
        x = self._get(name, False)
        if not isinstance(x, list):
            raise ValueError(f"{self.where}: {name} is {_kind(x)}, not an array")
        return [item(e, f"{self.where}.{name}[{i}]") for i, e in enumerate(x)]


def _kind(x: Any) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, int):
        return f"the number {x}"
    if isinstance(x, float):
        return f"the non-integer number {x!r}"
    if isinstance(x, str):
        return "a string"
    if isinstance(x, list):
        return "an array"
    if isinstance(x, dict):
        return "an object"
    return type(x).__name__


def b64decode(s: str, where: str) -> bytes:
    """Decode padded standard base64 strictly, as Go's encoding/json does."""
    try:
        out = base64.b64decode(s.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError(f"{where} is not padded standard base64") from None
    # b64decode accepts non-zero trailing bits, which Go refuses; one
    # spelling only.
    if base64.b64encode(out).decode("ascii") != s:
        raise ValueError(f"{where} is not canonical base64")
    return out


_TIME_RE = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")


@dataclass(frozen=True, order=True)
class Timestamp:
    """An instant on the receiver's clock, exact to the nanosecond, as the
    receiver spells it (RFC 3339 in UTC)."""

    unix_nano: int

    @staticmethod
    def parse(s: str, where: str = "time") -> "Timestamp":
        """Parse the receiver's RFC 3339 UTC spelling; raises ValueError."""
        m = _TIME_RE.fullmatch(s)
        if not m:
            raise ValueError(f"{where} {s!r} is not an RFC 3339 time in UTC")
        y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
        try:
            datetime(y, mo, d, h, mi, sec, tzinfo=timezone.utc)
        except ValueError:
            raise ValueError(f"{where} {s!r} is not a valid time") from None
        frac = m.group(7) or ""
        ns = int(frac.ljust(9, "0")) if frac else 0
        return Timestamp(calendar.timegm((y, mo, d, h, mi, sec, 0, 0, 0)) * 1_000_000_000 + ns)

    def datetime(self) -> datetime:
        """The instant as an aware UTC datetime (to the microsecond)."""
        return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=self.unix_nano // 1000)

    def __str__(self) -> str:
        sec, ns = divmod(self.unix_nano, 1_000_000_000)
        base = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=sec)
        out = base.strftime("%Y-%m-%dT%H:%M:%S")
        if ns:
            out += "." + f"{ns:09d}".rstrip("0")
        return out + "Z"


_DUR_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DUR_UNIT = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
             "m": 60_000_000_000, "h": 3_600_000_000_000}


def parse_duration(s: str, where: str = "duration") -> timedelta:
    """Parse a positive Go duration ("24h0m0s", "1.5s"); raises ValueError."""
    pos = 0
    total_ns = 0
    if not s:
        raise ValueError(f"{where} is empty")
    while pos < len(s):
        m = _DUR_RE.match(s, pos)
        if not m:
            raise ValueError(f"{where} {s!r} is not a Go duration")
        num, unit = m.group(1), m.group(2)
        whole, _, frac = num.partition(".")
        scale = _DUR_UNIT[unit]
        total_ns += int(whole or "0") * scale
        if frac:
            total_ns += int(frac) * scale // (10 ** len(frac))
        pos = m.end()
    if total_ns <= 0 or total_ns > (1 << 63) - 1:
        raise ValueError(f"{where} {s!r} is not a positive duration")
    return timedelta(microseconds=total_ns / 1000)


def format_duration(d: timedelta) -> str:
    """A Go duration for d, to the microsecond; raises ValueError unless d
    is positive."""
    us = (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds
    if us <= 0:
        raise ValueError(f"duration {d} is not positive")
    return f"{us}us"
