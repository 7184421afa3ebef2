"""Hostile answers from something that speaks for the receiver: each is a
precise exception, never a result taken as the receiver's word."""

from __future__ import annotations

import json
import os
import socketserver
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import pytest

import kvfence
from kvfence.types import Event

SCOPE = "configmap/prod/backup-policy"
REQ = kvfence.set_request("raise-retention", SCOPE, b"45").encode()
ASSIGNMENT = kvfence.Assignment(scope=SCOPE, epoch=1, grant="0123456789abcdef0123456789abcdef",
                                executor="spiffe://example.org/agent/worker-a", claim="claim-a", request=REQ)

Answer = tuple[int, Optional[str], Union[bytes, None]]  # status, content type, body (None: hang up)


class FakeReceiver:
    """An HTTP server on a unix socket, served by this uid, answering each
    request with the next canned answer."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="kvf")
        self.path = os.path.join(self.dir, "s.sock")
        self.answers: list[Answer] = []
        self.requests: list[tuple[str, str, bytes]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                fake.requests.append((self.command, self.path, self.rfile.read(n)))
                status, ctype, body = fake.answers.pop(0)
                if body is None:
                    self.close_connection = True
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self.send_response(status)
                if ctype:
                    self.send_header("Content-Type", ctype)
                if 300 <= status < 400:
                    self.send_header("Location", "https://elsewhere.example/v1/submit")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        class Server(socketserver.ThreadingUnixStreamServer):
            # A client's kept-alive connection must not hold the test up.
            daemon_threads = True
            block_on_close = False

        self.server = Server(self.path, Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def client(self) -> kvfence.Client:
        return kvfence.Client("unix://" + self.path, timeout=5)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        Path(self.path).unlink(missing_ok=True)
        os.rmdir(self.dir)


@pytest.fixture
def fake() -> Iterator[FakeReceiver]:
    f = FakeReceiver()
    yield f
    f.close()


def _submit(outcome: str = "applied", reason: str = "", **over: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"outcome": outcome, "reason": reason, "detail": "", "scope": SCOPE, "epoch": 1,
                         "grant": ASSIGNMENT.grant, "action": "raise-retention", "target": SCOPE, "revision": 2,
                         "audit_seq": 9}
    m.update(over)
    return m


def _j(v: Any) -> bytes:
    return json.dumps(v).encode()


JSON = "application/json"


def test_the_fake_receiver_answers_a_valid_submit(fake: FakeReceiver) -> None:
    # The baseline the hostile variants below differ from in one way.
    fake.answers.append((200, JSON, _j(_submit())))
    res = fake.client().submit_assignment(ASSIGNMENT)
    assert (res.outcome, res.revision) == ("applied", 2)
    assert fake.requests == [("POST", "/v1/submit", ASSIGNMENT.envelope())]


@pytest.mark.parametrize("answer,match", [
    ((200, "text/html", _j(_submit())), "not application/json"),
    ((200, None, _j(_submit())), "not application/json"),
    ((200, JSON, b'{"outcome": "applied"'), "not JSON"),
    ((200, JSON, b"\xff" + _j(_submit())), "not UTF-8"),
    ((200, JSON, _j(_submit()) + b" []"), "not JSON"),
    ((200, JSON, b'{"outcome":"denied",' + _j(_submit())[1:]), "given twice"),
    ((200, JSON, _j({**{k: v for k, v in _submit().items() if k != "outcome"}, "Outcome": "applied"})), "'Outcome'"),
    ((200, JSON, _j({k: v for k, v in _submit().items() if k != "audit_seq"})), "no 'audit_seq'"),
    ((200, JSON, _j({**_submit(), "OUTCOME": "denied"})), "member 'OUTCOME'"),
    ((200, JSON, _j(_submit(epoch=1.0))), "not an unsigned"),
    ((200, JSON, _j(_submit(epoch="1"))), "not an unsigned"),
    ((200, JSON, _j(_submit(epoch=-1))), "not an unsigned"),
    ((200, JSON, _j(_submit(epoch=True))), "not an unsigned"),
    ((200, JSON, _j(_submit(epoch=1 << 64))), "not an unsigned"),
    ((200, JSON, _j(_submit(revision=float("nan")))), "not JSON"),
    ((200, JSON, _j(_submit(outcome="maybe"))), "unknown outcome"),
    ((200, JSON, _j(_submit(reason="receiver_held"))), "with reason"),
    ((200, JSON, _j(_submit("denied", "receiver_held"))), "HTTP 200 with outcome 'denied'"),
    ((403, JSON, _j(_submit())), "HTTP 403 with outcome 'applied'"),
    ((403, JSON, _j(_submit("denied"))), "with reason ''"),
    ((200, JSON, _j(_submit(scope="another/scope"))), "the decision is about"),
    ((200, JSON, _j(_submit(epoch=2))), "the decision is about"),
    ((200, JSON, _j(_submit(revision=0))), "the decision is about"),
    ((302, JSON, _j(_submit())), "unexpected HTTP 302"),
    ((200, JSON, _j([_submit()])), "not a JSON object"),
    ((200, JSON, ('{"outcome":' + "[" * 40 + "]" * 40 + "}").encode()), "nested over 32"),
    ((200, JSON, b'{"outcome":"\\ud800"}'), "unpaired UTF-16 surrogate"),
])
def test_hostile_submit_answer(fake: FakeReceiver, answer: Answer, match: str) -> None:
    fake.answers.append(answer)
    with pytest.raises(kvfence.ProtocolError, match=match) as ei:
        fake.client().submit_assignment(ASSIGNMENT)
    assert ei.value.code == "protocol"


@pytest.mark.parametrize("answer,cls,code", [
    ((403, JSON, _j({"error": {"code": "forbidden", "message": "not an admin"}})), kvfence.ForbiddenError, "forbidden"),
    ((200, JSON, _j({"error": {"code": "forbidden", "message": "x"}})), kvfence.ForbiddenError, "forbidden"),
    ((403, JSON, _j(_submit("denied", "receiver_held"))), kvfence.StaleAuthorityError, "receiver_held"),
    ((403, JSON, _j(_submit("denied", "claim_mismatch"))), kvfence.DeniedError, "claim_mismatch"),
    ((401, JSON, _j({"error": {"code": "unauthenticated", "message": "x"}})), kvfence.UnauthenticatedError, "unauthenticated"),
    ((503, JSON, _j({"error": {"code": "outcome_unknown", "message": "x"}})), kvfence.OutcomeUnknownError, "outcome_unknown"),
    ((500, JSON, _j({"error": {"code": "not_acknowledged", "message": "x"}})), kvfence.NotAcknowledgedError, "not_acknowledged"),
    ((503, JSON, _j({"error": {"code": "storage_busy", "message": "x"}})), kvfence.UnavailableError, "storage_busy"),
    ((413, JSON, _j({"error": {"code": "too_large", "message": "x"}})), kvfence.TooLargeError, "too_large"),
    ((415, JSON, _j({"error": {"code": "unsupported_media_type", "message": "x"}})), kvfence.BadRequestError, "unsupported_media_type"),
    ((500, JSON, _j({"error": {"code": "integrity", "message": "x"}})), kvfence.IntegrityError, "integrity"),
    # Something between answered: a change may have applied.
    ((502, "text/html", b"<html>bad gateway</html>"), kvfence.OutcomeUnknownError, ""),
    ((503, JSON, b""), kvfence.OutcomeUnknownError, ""),
    ((500, JSON, _j({"error": {"message": "no code"}})), kvfence.OutcomeUnknownError, ""),
    # A 403 to a submit is a decision or an error object, never a guess.
    ((403, "text/plain", b"go away"), kvfence.ProtocolError, "protocol"),
    ((400, JSON, _j({"error": {"code": "some_new_code", "message": "x"}})), kvfence.BadRequestError, "some_new_code"),
])
def test_error_answer_maps_to_its_class(fake: FakeReceiver, answer: Answer, cls: type, code: str) -> None:
    fake.answers.append(answer)
    with pytest.raises(kvfence.KvfenceError) as ei:
        fake.client().submit_assignment(ASSIGNMENT)
    assert type(ei.value) is cls, repr(ei.value)
    assert ei.value.code == code and ei.value.status == answer[0]


def test_a_read_without_error_object_is_mapped_by_status(fake: FakeReceiver) -> None:
    # A read changes nothing, so a proxy's 502 is not "outcome unknown".
    fake.answers.append((502, "text/html", b"<html>bad gateway</html>"))
    with pytest.raises(kvfence.ServerError):
        fake.client().status()
    fake.answers.append((403, "text/plain", b"go away"))
    with pytest.raises(kvfence.ForbiddenError) as ei:
        fake.client().status()
    assert (ei.value.code, ei.value.status, ei.value.message) == ("", 403, "go away")


def test_hang_up_after_a_change_is_outcome_unknown(fake: FakeReceiver) -> None:
    fake.answers.append((0, None, None))
    with pytest.raises(kvfence.OutcomeUnknownError, match="after the request was sent"):
        fake.client().submit_assignment(ASSIGNMENT)
    assert len(fake.requests) == 1


def test_hang_up_on_a_read_is_a_transport_error(fake: FakeReceiver) -> None:
    fake.answers.append((0, None, None))
    with pytest.raises(kvfence.TransportError) as ei:
        fake.client().status()
    assert not isinstance(ei.value, kvfence.OutcomeUnknownError)


def test_nothing_listening_is_a_transport_error() -> None:
    d = tempfile.mkdtemp(prefix="kvf")
    try:
        with pytest.raises(kvfence.TransportError, match="nothing was sent") as ei:
            kvfence.Client(f"unix://{d}/none.sock").submit_assignment(ASSIGNMENT)
        assert not isinstance(ei.value, kvfence.OutcomeUnknownError)
    finally:
        os.rmdir(d)


def test_untrusted_uid_is_refused_before_sending(fake: FakeReceiver) -> None:
    fake.answers.append((200, JSON, _j(_submit())))
    c = kvfence.Client("unix://" + fake.path, server_uids=[os.getuid() + 1])
    with pytest.raises(kvfence.UntrustedServerError, match=f"uid {os.getuid()}"):
        c.submit_assignment(ASSIGNMENT)
    assert fake.requests == []


def _grant(**over: Any) -> dict[str, Any]:
    g: dict[str, Any] = {"grant": ASSIGNMENT.grant, "scope": SCOPE, "epoch": 1, "executor": ASSIGNMENT.executor,
                         "claim": "claim-a", "action": "raise-retention",
                         "request_sha256": kvfence.request_digest(REQ).hex(),
                         "not_before": "2026-12-03T19:00:00.123456789Z", "not_after": "2026-12-03T19:15:00Z",
                         "decision": "", "audit_seq": 4}
    g.update(over)
    return g


def _activate(c: kvfence.Client) -> kvfence.Activation:
    return c.activate(SCOPE, ASSIGNMENT.executor, "claim-a", REQ)


def test_activate_checks_the_grant(fake: FakeReceiver) -> None:
    fake.answers.append((200, JSON, _j(_grant())))
    act = _activate(fake.client())
    assert act.assignment() == ASSIGNMENT
    assert act.grant.not_before is not None and act.grant.not_before.unix_nano % 1_000_000_000 == 123456789
    assert str(act.grant.not_before) == "2026-12-03T19:00:00.123456789Z"


@pytest.mark.parametrize("over,match", [
    (dict(request_sha256="00" * 32), "binds request sha256"),
    (dict(request_sha256="AB" * 32), "64 lowercase hex"),
    (dict(executor="spiffe://example.org/agent/someone-else"), "not the one asked for"),
    (dict(not_after="2026-12-03 19:15:00"), "not an RFC 3339"),
    (dict(not_after="2026-02-30T00:00:00Z"), "not a valid time"),
    (dict(not_after=5), "not a time"),
])
def test_activate_refuses_a_wrong_grant(fake: FakeReceiver, over: dict[str, Any], match: str) -> None:
    fake.answers.append((200, JSON, _j(_grant(**over))))
    with pytest.raises(kvfence.ProtocolError, match=match):
        _activate(fake.client())


def test_create_target_checks_the_stored_digest(fake: FakeReceiver) -> None:
    fake.answers.append((200, JSON, _j({"target": "t", "scope": "s", "revision": 1, "value_sha256": "00" * 32})))
    with pytest.raises(kvfence.ProtocolError, match="another sha256"):
        fake.client().create_target("s", "t", b"v")


def _hold(**over: Any) -> dict[str, Any]:
    """A hold answer whose JSON fields say what its signed bytes say.
    ack_X and cp_X change a field in both; json_ack_X and json_cp_X in the
    JSON only; no_ack drops the ack; other keys replace the answer's."""
    import base64

    import cbor2

    at = "2026-12-03T19:00:00.5Z"
    at_ns = kvfence.Timestamp.parse(at).unix_nano
    key, sig = bytes(range(32)), bytes(64)
    ack = {"hold_id": "h1", "previous_epoch": 1, "epoch": 2, "audit_seq": 10, "requested_at": at_ns, "at": at_ns,
           "checkpoint_seq": 10, "scope": SCOPE, "receiver": "r1", "checkpoint_head": b"\xab" * 32}
    cp = {"receiver": "r1", "seq": 10, "head": b"\xab" * 32, "root": b"\xef" * 32, "state": b"\xcd" * 32,
          "epoch_high_water": 2, "at": at_ns}
    for k, v in over.items():
        if k.startswith("ack_"):
            ack[k[4:]] = v
        elif k.startswith("cp_"):
            cp[k[3:]] = v

    def signed(body_key: str, body: dict[str, Any]) -> str:
        raw = cbor2.dumps({"key": key, "sig": sig, body_key: cbor2.dumps(body, canonical=True)}, canonical=True)
        return base64.b64encode(raw).decode()

    def ts(ns: int) -> str:
        return str(kvfence.Timestamp(ns))

    ack_json = {"hold_id": ack["hold_id"], "previous_epoch": ack["previous_epoch"], "epoch": ack["epoch"],
                "audit_seq": ack["audit_seq"], "requested_at": ts(ack["requested_at"]), "committed_at": ts(ack["at"]),
                "checkpoint_seq": ack["checkpoint_seq"], "signed_b64": signed("hold_ack", ack)}
    cp_json = {"receiver": cp["receiver"], "seq": cp["seq"], "head": cp["head"].hex(), "root": cp["root"].hex(),
               "state": cp["state"].hex(),
               "epoch_high_water": cp["epoch_high_water"], "at": ts(cp["at"]),
               "key_fingerprint": "SHA256:" + base64.b64encode(key).decode().rstrip("="),
               "signature_b64": base64.b64encode(sig).decode(), "signed_b64": signed("checkpoint", cp)}
    h: dict[str, Any] = {"scopes": [{"scope": SCOPE, "previous_epoch": 1, "epoch": 2,
                                     "mode": "held", "ack": ack_json}],
                         "hold_requested_at": at, "hold_committed_at": at, "audit_seq": 10, "repeated": False,
                         "checkpoint": cp_json}
    for k, v in over.items():
        if k == "no_ack":
            h["scopes"][0]["ack"] = None
        elif k.startswith("json_ack_"):
            ack_json[k[9:]] = v
        elif k.startswith("json_cp_"):
            cp_json[k[8:]] = v
        elif not k.startswith(("ack_", "cp_")):
            h[k] = v
    return h


def test_hold_answer_is_checked(fake: FakeReceiver) -> None:
    fake.answers.append((200, JSON, _j(_hold())))
    res = fake.client().hold(SCOPE, "r", hold_id="h1", expect_epoch=1)
    assert [(s.scope, s.epoch) for s in res.scopes] == [(SCOPE, 2)]
    assert fake.requests[0][2] == _j({"scopes": [SCOPE], "reason": "r", "hold_id": "h1", "expect_epoch": 1})


_OUTSTANDING = {"scope": SCOPE, "action": "a", "grant": "g", "target": "t",
                "object": {"group": "", "version": "v1", "resource": "configmaps", "namespace": "prod", "name": "x"},
                "dispatch_id": "d", "precondition": "7", "version": "9", "audit_seq": 4}


def test_hold_answer_lists_outstanding_writes(fake: FakeReceiver) -> None:
    fake.answers.append((200, JSON, _j(_hold(outstanding=[_OUTSTANDING]))))
    res = fake.client().hold(SCOPE, "r", hold_id="h1", expect_epoch=1)
    assert [(o.dispatch_id, o.version, o.object["name"]) for o in res.outstanding] == [("d", "9", "x")]


@pytest.mark.parametrize("over,match", [
    (dict(outstanding=[dict(_OUTSTANDING, audit_seq=-1)]), "audit_seq"),
    (dict(outstanding=[dict(_OUTSTANDING, object=None)]), "object"),
    (dict(outstanding={}), "not an array"),
    (dict(checkpoint=None), "not covered by the answer.s checkpoint"),
    (dict(checkpoint=None, no_ack=True), "no signed checkpoint"),
    (dict(no_ack=True), "carries no signed acknowledgment"),
    (dict(ack_hold_id="other"), "hold id 'other'"),
    (dict(ack_epoch=3), "ack says epoch"),
    (dict(ack_checkpoint_seq=9), "not covered"),
    (dict(ack_checkpoint_head=b"\x00" * 32), "not covered"),
    (dict(ack_receiver="r2"), "not covered"),
    (dict(ack_scope="another/scope"), "signed for scope 'another/scope'"),
    (dict(scopes=[]), "asked to hold 1 scopes"),
    (dict(audit_seq=11), "does not cover"),
    (dict(json_ack_signed_b64="AAE"), "base64"),
    (dict(json_ack_signed_b64="oA=="), "has keys"),
    (dict(json_ack_epoch=3), "epoch is not what its signed_b64 says"),
    (dict(json_ack_hold_id="h2"), "hold_id is not what its signed_b64 says"),
    (dict(json_ack_committed_at="2026-12-03T19:00:01Z"), "committed_at is not what"),
    (dict(json_cp_seq=11), "seq is not what its signed_b64 says"),
    (dict(json_cp_head="00" * 32), "head is not what"),
    (dict(json_cp_root="00" * 32), "root is not what"),
    (dict(json_cp_key_fingerprint="SHA256:AAAA"), "key_fingerprint is not what"),
    (dict(json_cp_signature_b64="AA=="), "signature_b64 is not what"),
])
def test_hostile_hold_answer(fake: FakeReceiver, over: dict[str, Any], match: str) -> None:
    fake.answers.append((200, JSON, _j(_hold(**over))))
    with pytest.raises(kvfence.ProtocolError, match=match):
        fake.client().hold(SCOPE, "r", hold_id="h1", expect_epoch=1)


def test_hold_from_another_epoch_is_refused(fake: FakeReceiver) -> None:
    fake.answers.append((200, JSON, _j(_hold())))
    with pytest.raises(kvfence.ProtocolError, match="not the expected 5"):
        fake.client().hold(SCOPE, "r", hold_id="h1", expect_epoch=5)


def _entries() -> list[dict[str, Any]]:
    vec = json.loads((Path(__file__).resolve().parents[3] / "testdata" / "wire" / "vectors.json").read_text())
    return [v["entry"] for v in vec["entries"]]


def test_events_are_checked_against_their_hash(fake: FakeReceiver) -> None:
    e = _entries()[0]
    fake.answers.append((200, JSON, _j({"events": [e]})))
    assert [ev.seq for ev in fake.client().events(since=e["seq"])] == [e["seq"]]
    fake.answers.append((200, JSON, _j({"events": [dict(e, outcome="denied")]})))
    with pytest.raises(kvfence.ProtocolError, match="hash to"):
        list(fake.client().events(since=e["seq"]))


def test_events_must_link(fake: FakeReceiver) -> None:
    # Two genuine entries that are not neighbours in one chain.
    a, b = _entries()[0], _entries()[2]
    fake.answers.append((200, JSON, _j({"events": [a, b]})))
    with pytest.raises(kvfence.ProtocolError, match="does not follow"):
        list(fake.client().events(since=1))
    assert isinstance(Event.from_json(b), Event)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the socket file to another uid needs root")
def test_peer_and_owner_are_checked_apart(fake: FakeReceiver) -> None:
    # The listener is this process (uid 0); the socket file is given to
    # another uid, so that each check is the only one that can refuse.
    other = 54321
    os.chown(fake.path, other, -1)
    c = kvfence.Client("unix://" + fake.path, server_uids=[other])
    with pytest.raises(kvfence.UntrustedServerError, match="served by a process of uid 0"):
        c.status()
    c = kvfence.Client("unix://" + fake.path, server_uids=[0])
    with pytest.raises(kvfence.UntrustedServerError, match=f"owned by uid {other}"):
        c.status()
    assert fake.requests == []


def _chain(n: int) -> list[dict[str, Any]]:
    # n linked entries, each hashed as the receiver hashes it.
    import hashlib

    out: list[dict[str, Any]] = []
    prev = bytes(32)
    for seq in range(1, n + 1):
        ev = Event(seq=seq, hash=b"", prev=prev, at=None, kind="note", fields={"note": f"entry {seq}"})
        h = hashlib.sha256(b"kvfence/audit/v1\n" + ev.encode()).digest()
        out.append({"seq": seq, "hash": h.hex(), "prev": prev.hex(), "at": None, "kind": "note", "note": f"entry {seq}"})
        prev = h
    return out


def test_events_read_page_by_page(fake: FakeReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kvfence.client, "EVENTS_PAGE", 2)
    chain = _chain(5)
    for page in (chain[0:2], chain[2:4], chain[4:5]):
        fake.answers.append((200, JSON, _j({"events": page})))
    assert [ev["note"] for ev in fake.client().events()] == [f"entry {i}" for i in range(1, 6)]
    assert [r[1] for r in fake.requests] == ["/v1/events?since=1&limit=2", "/v1/events?since=3&limit=2",
                                             "/v1/events?since=5&limit=2"]


def test_events_page_that_skips_an_entry(fake: FakeReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kvfence.client, "EVENTS_PAGE", 2)
    chain = _chain(5)
    fake.answers.append((200, JSON, _j({"events": chain[0:2]})))
    fake.answers.append((200, JSON, _j({"events": chain[3:5]})))
    with pytest.raises(kvfence.ProtocolError, match="entry 4 does not follow"):
        list(fake.client().events())
