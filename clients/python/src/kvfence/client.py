"""The client of a served kvfence receiver (docs/design.md §12), over mTLS
or the local admin socket.

The HTTP transport is the standard library's http.client: it lets the
unix-socket connection check the listening process's peer credentials and
the socket file's owner before a byte is sent, and keeps the client's only
third-party dependency cbor2.

The client never tells the receiver who it is (the receiver takes the
identity from the channel), and takes nothing from an answer it has not
checked: an answer with the wrong content type, JSON that is not strict,
a member missing or of the wrong type, a status that disagrees with the
body, or a result that does not answer the call raises ProtocolError.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import select
import socket
import ssl
import stat
import struct
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator, Optional, Sequence, Union
from urllib.parse import quote, unquote, urlsplit

import cbor2

from . import _json
from .assignment import Assignment
from .errors import (
    STALE_REASONS,
    DeniedError,
    KvfenceError,
    MalformedEnvelopeError,
    OutcomeUnknownError,
    ProtocolError,
    StaleAuthorityError,
    TransportError,
    UntrustedServerError,
    error_for,
)
from .types import (
    Event,
    Grant,
    HoldAllResult,
    HoldResult,
    Receipt,
    ScopeCreated,
    Status,
    SubmitResult,
    Target,
)
from .wire import Envelope, decode_envelope

__all__ = ["Client", "Activation", "MAX_ANSWER", "EVENTS_PAGE"]

#: The largest answer body read: the largest is a page of events.
MAX_ANSWER = 64 << 20
#: The page size events asks for.
EVENTS_PAGE = 1000
_JSON = "application/json"
_CBOR = "application/cbor"


@dataclass(frozen=True)
class Activation:
    """What activate returns: the grant, and the request bytes it binds."""

    grant: Grant
    request: bytes

    def assignment(self) -> Assignment:
        """What the activated worker is handed."""
        g = self.grant
        return Assignment(scope=g.scope, epoch=g.epoch, grant=g.id, executor=g.executor, claim=g.claim,
                          request=self.request)


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection over a unix socket that sends nothing until the
    listening process's uid and the socket file's owner are trusted."""

    def __init__(self, path: str, uids: Sequence[int], timeout: float) -> None:
        super().__init__("kvfence-admin", timeout=timeout)
        self._path = path
        self._uids = tuple(uids)

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
            _check_unix_server(s, self._path, self._uids)
        except BaseException:
            s.close()
            raise
        self.sock = s


def _check_unix_server(s: socket.socket, path: str, uids: Sequence[int]) -> None:
    # The listener's uid, as the kernel recorded it, is what no one else can
    # forge; the socket file's owner too, so that a socket left where
    # another user may replace it is refused.
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        raise UntrustedServerError(f"{path}: peer credentials are not available on this platform; nothing was sent")
    try:
        raw = s.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", raw)
    except OSError as e:
        raise UntrustedServerError(f"{path}: reading the server's credentials: {e}; nothing was sent") from None
    want = " or ".join(str(u) for u in uids)
    if uid not in uids:
        raise UntrustedServerError(f"{path} is served by a process of uid {uid}, and only uid {want} may serve it; "
                                   "nothing was sent")
    try:
        st = os.stat(path)
    except OSError as e:
        raise UntrustedServerError(f"{path}: {e}; nothing was sent") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise UntrustedServerError(f"{path} is not a socket; nothing was sent")
    if st.st_uid not in uids:
        raise UntrustedServerError(f"the socket file {path} is owned by uid {st.st_uid}, and only uid {want} may "
                                   "serve it; nothing was sent")


def _media_type(v: Optional[str]) -> str:
    return (v or "").split(";", 1)[0].strip().lower()


class Client:
    """A client of one served receiver: ``https://HOST:PORT`` with tls (see
    load_tls) carrying the client certificate and the CA that issued the
    receiver's, or ``unix:///PATH`` for the local admin socket, served by
    one of server_uids (default: the caller's own uid and root). Plain
    http is refused: the receiver takes the caller's identity from the
    channel, and plain TCP carries none.

    Connections are kept between calls; a Client may be shared by threads.
    """

    def __init__(self, url: str, *, tls: Optional[ssl.SSLContext] = None,
                 server_uids: Optional[Sequence[int]] = None, timeout: float = 30.0) -> None:
        u = urlsplit(url)
        self._timeout = timeout
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._new: Callable[[], http.client.HTTPConnection]
        if u.scheme == "https":
            if tls is None:
                raise ValueError("an https receiver needs an ssl.SSLContext with a client certificate (load_tls)")
            if not u.hostname or u.path not in ("", "/") or u.query or u.fragment or u.username:
                raise ValueError(f"{url!r}: want https://HOST:PORT")
            host, port = u.hostname, u.port or 443
            self._new = lambda: http.client.HTTPSConnection(host, port, context=tls, timeout=timeout)
        elif u.scheme == "unix":
            if u.netloc or not u.path or u.query or u.fragment or "?" in url or "#" in url:
                raise ValueError(f"{url!r}: want unix:///PATH")
            # The path is decoded as Go's url.Parse decodes it, so that one
            # URL names one socket in both clients: unix:///d/a%20b.sock is
            # "/d/a b.sock", never a socket named by the escaped text.
            if re.search(r"%(?![0-9A-Fa-f]{2})", u.path):
                raise ValueError(f"{url!r}: a % in the path is not a percent-escape")
            path = unquote(u.path, errors="strict")
            if "\x00" in path:
                raise ValueError(f"{url!r}: the path holds a NUL")
            uids = tuple(server_uids) if server_uids else (os.getuid(), 0)
            self._new = lambda: _UnixConnection(path, uids, timeout)
        else:
            raise ValueError(f"{url!r}: the scheme must be https or unix")

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _conn(self) -> http.client.HTTPConnection:
        with self._lock:
            while self._idle:
                c = self._idle.pop()
                # A connection the receiver closed while idle reads as
                # readable (EOF); a change sent on it would fail after
                # sending and read as outcome unknown.
                if c.sock is not None and not select.select([c.sock], [], [], 0)[0]:
                    return c
                c.close()
        return self._new()

    def _call(self, method: str, path: str, body: Optional[bytes] = None, ctype: str = "",
              ok: tuple[int, ...] = (200,)) -> tuple[int, Any]:
        """Send one request and return the status and the strict JSON of an
        answer whose status is in ok; raise the error an other answer
        stands for."""
        change = method not in ("GET", "HEAD")
        headers = {"Accept": _JSON}
        if ctype:
            headers["Content-Type"] = ctype
        conn = self._conn()
        try:
            if conn.sock is None:
                conn.connect()
        except UntrustedServerError:
            conn.close()
            raise
        except (OSError, ssl.SSLError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError(f"{method} {path}: connecting: {e}; nothing was sent") from None
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            raw = resp.read(MAX_ANSWER + 1)
            more = len(raw) > MAX_ANSWER
        except (OSError, ssl.SSLError, http.client.HTTPException) as e:
            conn.close()
            if change:
                raise OutcomeUnknownError(f"{method} {path}: the connection failed after the request was sent: {e}; "
                                          "the call may or may not have taken effect") from None
            raise TransportError(f"{method} {path}: {e}") from None
        if more or resp.will_close or not resp.isclosed():
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        status = resp.status
        if more:
            raise ProtocolError(f"{method} {path}: answer over {MAX_ANSWER} bytes", status=status)
        is_json = _media_type(resp.getheader("Content-Type")) == _JSON
        if status in ok:
            if not is_json:
                raise ProtocolError(f"{method} {path}: HTTP {status} answer of type "
                                    f"{resp.getheader('Content-Type')!r}, not {_JSON}", status=status)
            try:
                v = _json.loads(raw)
            except ValueError as e:
                raise ProtocolError(f"{method} {path}: {e}", status=status) from None
            if isinstance(v, dict) and "error" in v:
                code, msg = self._error_body(v, method, path, status)
                raise error_for(status, code, msg, change=change)
            return status, v
        if 300 <= status < 400 or status < 200:
            raise ProtocolError(f"{method} {path}: unexpected HTTP {status}", status=status)
        code, msg = "", raw[:512].decode("utf-8", "replace").strip()
        if is_json:
            try:
                code, msg = self._error_body(_json.loads(raw), method, path, status)
            except (ValueError, ProtocolError):
                code = ""
        raise error_for(status, code, msg, change=change)

    @staticmethod
    def _error_body(v: Any, method: str, path: str, status: int) -> tuple[str, str]:
        try:
            o = _json.Obj(v, "error answer", ("error",))
            e = o.obj("error", ("code", "message"))
            assert e is not None
            code, msg = e.text("code"), e.text("message")
        except ValueError as err:
            raise ProtocolError(f"{method} {path}: {err}", status=status) from None
        if not code:
            raise ProtocolError(f"{method} {path}: an error answer without a code", status=status)
        return code, msg

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        import json

        return self._call("POST", path, json.dumps(body).encode("utf-8"), _JSON)[1]

    def _get(self, path: str) -> Any:
        return self._call("GET", path)[1]

    @staticmethod
    def _read(what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except ValueError as e:
            raise ProtocolError(f"{what}: {e}") from None

    # Worker calls.

    def submit(self, envelope: bytes) -> SubmitResult:
        """Submit an envelope and return the decision when it applied
        (``applied``, or ``already_applied`` for a repeat).

        A denial raises DeniedError (StaleAuthorityError for a stale
        authority: the worker must stop), carrying the decision. Retrying
        the same envelope after OutcomeUnknownError or NotAcknowledgedError
        is safe: one that applied is answered ``already_applied``.
        """
        env = bytes(envelope)
        try:
            sent: Optional[Envelope] = decode_envelope(env)
        except MalformedEnvelopeError:
            sent = None
        names = _request_names(sent.request) if sent is not None else None
        status, v = self._call("POST", "/v1/submit", env, _CBOR, ok=(200, 403))
        res: SubmitResult = self._read("POST /v1/submit", SubmitResult.from_json, v)
        # The receiver answers a denial with 403 and a decision that applied
        # with 200; an answer whose status and outcome disagree is not its
        # decision, and a 403 is never taken for applied.
        if (status == 403) != (res.outcome == "denied"):
            raise ProtocolError(f"POST /v1/submit: HTTP {status} with outcome {res.outcome!r}", status=status)
        if res.outcome == "denied":
            cls = StaleAuthorityError if res.reason in STALE_REASONS else DeniedError
            raise cls(res, status=status)
        if sent is None or names is None:
            raise ProtocolError("POST /v1/submit: the receiver applied an envelope that is not canonical", status=status)
        got = (res.scope, res.epoch, res.grant, res.action, res.target)
        want = (sent.scope, sent.epoch, sent.grant) + names
        if got != want or res.revision == 0:
            raise ProtocolError(f"POST /v1/submit: the decision is about {got}, the envelope {want}", status=status)
        return res

    def submit_assignment(self, a: Assignment) -> SubmitResult:
        """Build the assignment's envelope and submit it (see submit)."""
        return self.submit(a.envelope())

    # Administrative calls.

    def create_scope(self, scope: str, *, max_grant_ttl: Optional[timedelta] = None) -> ScopeCreated:
        """Create a protected scope at epoch 1, held."""
        body: dict[str, Any] = {"scope": scope}
        if max_grant_ttl is not None:
            body["max_grant_ttl"] = _json.format_duration(max_grant_ttl)
        out: ScopeCreated = self._read("POST /v1/scopes", ScopeCreated.from_json, self._post("/v1/scopes", body))
        if out.scope != scope:
            raise ProtocolError(f"POST /v1/scopes: asked for scope {scope!r}, the answer is of {out.scope!r}")
        return out

    def create_target(self, scope: str, target: str, value: Optional[bytes] = None, *, kind: str = "internal",
                      target_key: str = "", object: str = "") -> Target:
        """Create a target in an existing scope at revision 1: of kind
        internal (the default), etcd (``target_key``, the application's etcd
        key; the receiver must be on the etcd engine, else ServerError
        ``kind_unsupported``) or kubernetes (``object``,
        ``configmaps/NAMESPACE/NAME``, and no value: the object holds it;
        ServerError ``no_dispatcher`` when the receiver has no Kubernetes
        identity). The answer is checked against what was asked: the stored
        value's digest (not for kubernetes), the kind, the key or object."""
        import base64

        if kind not in ("internal", "etcd", "kubernetes", "func"):
            raise ValueError(f"kind {kind!r}: one of internal, etcd or kubernetes")
        if bool(target_key) != (kind == "etcd"):
            raise ValueError("target_key is given for, and only for, kind etcd")
        if bool(object) != (kind == "kubernetes"):
            raise ValueError("object is given for, and only for, kind kubernetes")
        body: dict[str, Any] = {"scope": scope, "target": target, "kind": kind}
        if kind == "kubernetes":
            if value is not None:
                raise ValueError("a target of kind kubernetes takes no value: the object holds it")
            body["object"] = object
        else:
            if value is None:
                raise ValueError(f"a target of kind {kind} needs a value")
            value = bytes(value)
            body["value_b64"] = base64.b64encode(value).decode("ascii")
            if target_key:
                body["target_key"] = target_key
        v = self._post("/v1/targets", body)

        def read(v: Any) -> Target:
            o = _json.Obj(v, "target answer", ("target", "scope", "revision", "value_sha256", "kind", "target_key",
                                               "object", "uid"))
            digest = o.hex32("value_sha256")
            got_kind = o.text("kind", optional=True) or "internal"
            t = Target(name=o.text("target"), scope=o.text("scope"), revision=o.uint("revision"),
                       value=value if value is not None else b"", kind=got_kind,
                       target_key=o.text("target_key", optional=True), object=o.text("object", optional=True),
                       uid=o.text("uid", optional=True), writes=1 if got_kind == "etcd" else 0)
            if (t.name, t.scope) != (target, scope):
                raise ValueError(f"asked for target {target!r} of {scope!r}, the answer is {t.name!r} of {t.scope!r}")
            if (t.kind, t.target_key, t.object) != (kind, target_key, object):
                raise ValueError(f"asked for kind {kind} with key {target_key!r} and object {object!r}, the answer is "
                                 f"kind {t.kind} with key {t.target_key!r} and object {t.object!r}")
            if value is not None and digest != hashlib.sha256(value).digest():
                raise ValueError("the receiver stored a value with another sha256 than the one sent")
            if kind == "kubernetes" and not t.uid:
                raise ValueError("the receiver created a kubernetes target without its object's uid")
            return t

        out: Target = self._read("POST /v1/targets", read, v)
        return out

    def activate(self, scope: str, executor: str, claim: str, request: bytes, *,
                 ttl: Optional[timedelta] = None, decision: str = "", epoch: int = 0) -> Activation:
        """Mint a grant for a held scope at its current epoch (or at epoch,
        which must then be current) and open the scope with it. The
        receiver's clock sets the window, from now for ttl (None: its
        default). The grant must bind exactly the request bytes sent."""
        import base64

        request = bytes(request)
        body: dict[str, Any] = {"scope": scope, "executor": executor, "claim": claim,
                                "request_b64": base64.b64encode(request).decode("ascii")}
        if ttl is not None:
            body["ttl"] = _json.format_duration(ttl)
        if decision:
            body["decision"] = decision
        if epoch:
            body["epoch"] = epoch
        g: Grant = self._read("POST /v1/activate", Grant.from_json, self._post("/v1/activate", body))
        if g.request_sha256 != hashlib.sha256(request).digest():
            raise ProtocolError(f"POST /v1/activate: the grant binds request sha256 {g.request_sha256.hex()}, "
                                "not the bytes sent")
        if (g.scope, g.executor, g.claim) != (scope, executor, claim) or (epoch and g.epoch != epoch) or not g.id:
            raise ProtocolError("POST /v1/activate: the grant is not the one asked for")
        return Activation(grant=g, request=request)

    def extend_grant(self, grant: str, ttl: timedelta) -> Grant:
        """Move the active grant's end of validity to the receiver's now
        plus ttl, within its scope's maximum from the grant's activation,
        so that long work keeps its grant; returns the grant as it now
        stands. Beyond the maximum: BadRequestError (``ttl_too_long``); a
        grant a hold, a later activation or a recovery superseded, or one
        that expired: ConflictError (``grant_not_active``,
        ``grant_expired``). Nothing changes on an error."""
        if ttl <= timedelta(0):
            raise ValueError(f"the ttl of an extension must be positive, got {ttl}")
        v = self._post("/v1/grant/extend", {"grant": grant, "ttl": _json.format_duration(ttl)})
        g: Grant = self._read("POST /v1/grant/extend", lambda x: Grant.from_json(x, extended=True), v)
        if g.id != grant or g.not_after is None:
            raise ProtocolError(f"POST /v1/grant/extend: asked to extend grant {grant!r}, the answer is for {g.id!r}")
        return g

    def hold(self, scopes: Union[str, Sequence[str]], reason: str, *, hold_id: str = "",
             expect_epoch: int = 0) -> HoldResult:
        """Advance the epoch of every named scope and hold it, all or none.

        With hold_id the hold is idempotent: a repeat returns the first
        hold's result with ``repeated`` set. With expect_epoch (one scope)
        it holds only a scope at that epoch (EpochMismatchError otherwise).
        The answer must carry a signed checkpoint and, for each scope asked
        for and no other, an acknowledgment with hold_id of that scope,
        covered by that checkpoint, every field as its signed bytes say;
        the signatures are for the caller to verify with the receiver's
        public key (``signed`` holds the bytes).
        """
        names = [scopes] if isinstance(scopes, str) else list(scopes)
        body: dict[str, Any] = {"scopes": names, "reason": reason}
        if hold_id:
            body["hold_id"] = hold_id
        if expect_epoch:
            body["expect_epoch"] = expect_epoch
        res: HoldResult = self._read("POST /v1/hold", HoldResult.from_json, self._post("/v1/hold", body))
        problem = ""
        if res.checkpoint is None:
            problem = "the hold's answer carries no signed checkpoint"
        elif len(res.scopes) != len(names):
            problem = f"asked to hold {len(names)} scopes, the answer holds {len(res.scopes)}"
        seen: set[str] = set()
        for s in res.scopes if not problem else []:
            if s.scope not in names or s.scope in seen:
                problem = f"the answer holds scope {s.scope!r}, which was not asked for or is there twice"
            elif s.ack is None:
                problem = f"scope {s.scope!r}'s hold carries no signed acknowledgment"
            elif s.ack.hold_id != hold_id:
                problem = f"scope {s.scope!r}'s acknowledgment is of hold id {s.ack.hold_id!r}, not {hold_id!r}"
            elif expect_epoch and s.previous_epoch != expect_epoch:
                problem = f"scope {s.scope!r} was held from epoch {s.previous_epoch}, not the expected {expect_epoch}"
            if problem:
                break
            seen.add(s.scope)
        if problem:
            raise ProtocolError(f"POST /v1/hold: {problem}")
        return res

    def hold_all(self, reason: str) -> HoldAllResult:
        """Hold every open scope in one transaction; scopes held already are
        named in ``already_held`` and left as they were."""
        v = self._post("/v1/hold", {"scopes": [], "reason": reason, "all": True})

        def read(v: Any) -> HoldAllResult:
            res = HoldResult.from_json(v, extra=("already_held",))
            held = _json.Obj(v, "hold answer", ()).array("already_held", _text)
            return HoldAllResult(**res.__dict__, already_held=held)

        out: HoldAllResult = self._read("POST /v1/hold", read, v)
        return out

    def status(self, scope: str = "") -> Status:
        """The control state of scope, or of every scope when scope is ""."""
        path = "/v1/status" + (f"?scope={quote(scope, safe='')}" if scope else "")
        st: Status = self._read("GET /v1/status", Status.from_json, self._get(path))
        if scope and any(s.scope != scope for s in st.scopes):
            raise ProtocolError(f"GET /v1/status: asked for scope {scope!r}, the answer has others")
        return st

    def target(self, name: str) -> Target:
        """A target's value and revision, its kind and what the kind names;
        for a kubernetes target, its object as the receiver read it now
        (``live``), or why it did not (``live_error``)."""
        t: Target = self._read("GET /v1/target", Target.from_json, self._get(f"/v1/target?target={quote(name, safe='')}"))
        if t.name != name:
            raise ProtocolError(f"GET /v1/target: asked for {name!r}, got {t.name!r}")
        return t

    def targets(self, scope: str = "") -> list[Target]:
        """The targets of scope, or of every scope when scope is ""."""
        path = "/v1/target-list" + (f"?scope={quote(scope, safe='')}" if scope else "")
        v = self._get(path)
        ts: list[Target] = self._read("GET /v1/target-list",
                                      lambda v: _json.Obj(v, "target list", ("targets",)).array("targets", Target.from_json), v)
        if scope and any(t.scope != scope for t in ts):
            raise ProtocolError(f"GET /v1/target-list: asked for scope {scope!r}'s targets, got another's")
        return ts

    def grant(self, grant_id: str) -> Grant:
        """A stored grant, with ``expired`` by the receiver's clock."""
        g: Grant = self._read("GET /v1/grant", Grant.from_json, self._get(f"/v1/grant?id={quote(grant_id, safe='')}"),
                              stored=True)
        if g.id != grant_id:
            raise ProtocolError(f"GET /v1/grant: asked for grant {grant_id!r}, got {g.id!r}")
        return g

    def receipt(self, scope: str, action: str) -> Receipt:
        """The receipt of an applied action (NotFoundError if none)."""
        q = f"?scope={quote(scope, safe='')}&action={quote(action, safe='')}"
        rc: Receipt = self._read("GET /v1/receipt", Receipt.from_json, self._get("/v1/receipt" + q))
        if (rc.scope, rc.action) != (scope, action):
            raise ProtocolError(f"GET /v1/receipt: asked for {scope!r}/{action!r}, got {rc.scope!r}/{rc.action!r}")
        return rc

    def receipts(self, scope: str, claim: str) -> list[Receipt]:
        """The receipts of scope applied under grants that carried claim,
        oldest first."""
        q = f"?scope={quote(scope, safe='')}&claim={quote(claim, safe='')}"
        v = self._get("/v1/receipts" + q)
        rcs: list[Receipt] = self._read("GET /v1/receipts",
                                        lambda v: _json.Obj(v, "receipts", ("receipts",)).array("receipts", Receipt.from_json), v)
        for i, rc in enumerate(rcs):
            if rc.scope != scope:
                raise ProtocolError(f"GET /v1/receipts: asked for scope {scope!r}'s receipts, got one of {rc.scope!r}")
            if i and rc.audit_seq <= rcs[i - 1].audit_seq:
                raise ProtocolError("GET /v1/receipts: the receipts are not oldest first")
        return rcs

    def events(self, since: int = 1) -> Iterator[Event]:
        """The audit entries with seq >= since, in order, a page at a time.
        Each is checked against its hash and links to the one before it, so
        the caller sees exactly the chain the receiver holds."""
        prev: Optional[Event] = None
        while True:
            v = self._get(f"/v1/events?since={since}&limit={EVENTS_PAGE}")
            evs: list[Event] = self._read("GET /v1/events",
                                          lambda v: _json.Obj(v, "events", ("events",)).array("events", Event.from_json), v)
            for ev in evs:
                if ev.seq < since or (prev is not None and (ev.seq != prev.seq + 1 or ev.prev != prev.hash)):
                    raise ProtocolError(f"GET /v1/events: entry {ev.seq} does not follow the entry before it")
                prev = ev
                yield ev
            if len(evs) < EVENTS_PAGE or prev is None:
                return
            since = prev.seq + 1

    def healthz(self) -> None:
        """Return if the receiver is serving; raise otherwise."""
        self._get("/healthz")


def _request_names(request: bytes) -> Optional[tuple[str, str]]:
    """The action and target a request names, or None. Only to check that
    an answer is about the request sent: whether the request is valid is
    the receiver's decision, so this reads it without judging it."""
    try:
        m = cbor2.loads(request)
    except Exception:  # any decoding failure of bytes the caller chose
        return None
    if isinstance(m, dict) and isinstance(m.get("action"), str) and isinstance(m.get("target"), str):
        return m["action"], m["target"]
    return None


def _text(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{where} is not a string")
    return v


# KvfenceError is re-exported here for callers that import only the client.
__all__ += ["KvfenceError"]
