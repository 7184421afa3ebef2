"""The client against a real kvfence serve."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

import kvfence
from conftest import WORKER_A, WORKER_B, Receiver


def _scope(name: str) -> str:
    return f"configmap/test/{name}"


def test_full_flow(receiver: Receiver) -> None:
    s = _scope("flow")
    admin = receiver.admin()
    worker_a = receiver.client("worker-a")
    worker_b = receiver.client("worker-b")

    created = admin.create_scope(s, max_grant_ttl=timedelta(hours=2))
    assert (created.scope, created.epoch, created.mode) == (s, 1, "held")
    assert created.max_grant_ttl == timedelta(hours=2)
    t = admin.create_target(s, s, b'{"data":{"retention_days":"30"}}')
    assert t.revision == 1

    req1 = kvfence.set_request("raise-retention", s, b'{"data":{"retention_days":"45"}}').encode()
    act = admin.activate(s, WORKER_A, "claim-a", req1, ttl=timedelta(minutes=15), decision="review-1")
    assert act.grant.request_sha256 == kvfence.request_digest(req1)
    a1 = act.assignment()

    res = worker_a.submit_assignment(a1)
    assert (res.outcome, res.revision, res.scope, res.epoch) == ("applied", 2, s, 1)
    again = worker_a.submit_assignment(a1)
    assert (again.outcome, again.revision) == ("already_applied", 2)
    assert admin.target(s).value == b'{"data":{"retention_days":"45"}}'

    st = admin.status(s)
    assert [x.mode for x in st.scopes] == ["open"]
    assert st.scopes[0].grant is not None and st.scopes[0].grant.id == act.grant.id
    rc = admin.receipt(s, "raise-retention")
    assert (rc.rev_before, rc.rev_after, rc.grant) == (1, 2, act.grant.id)
    assert [r.action for r in admin.receipts(s, "claim-a")] == ["raise-retention"]
    assert admin.grant(act.grant.id).executor == WORKER_A

    # A hold with an id and the expected epoch; its repeat is the first.
    h = admin.hold(s, "worker-a stalled", hold_id="hold-1", expect_epoch=1)
    assert [(x.scope, x.previous_epoch, x.epoch) for x in h.scopes] == [(s, 1, 2)]
    assert h.checkpoint is not None and not h.repeated
    h2 = admin.hold(s, "worker-a stalled", hold_id="hold-1", expect_epoch=1)
    assert h2.repeated and [x.epoch for x in h2.scopes] == [2]
    with pytest.raises(kvfence.EpochMismatchError) as ei:
        admin.hold(s, "late", hold_id="hold-2", expect_epoch=1)
    assert (ei.value.status, ei.value.code) == (409, "epoch_mismatch")

    # The applied request, retried while held: denied, with its receipt.
    with pytest.raises(kvfence.StaleAuthorityError) as di:
        worker_a.submit_assignment(a1)
    assert di.value.reason == "receiver_held" and di.value.receipt_seq == rc.audit_seq

    # A new grant for worker-a at epoch 2, then a hold: the hold denial.
    req2 = kvfence.set_request("lower-retention", s, b'{"data":{"retention_days":"40"}}').encode()
    a2 = admin.activate(s, WORKER_A, "claim-a2", req2, epoch=2).assignment()
    admin.hold([s], "worker-a stalled again", hold_id="hold-3")
    with pytest.raises(kvfence.StaleAuthorityError) as di:
        worker_a.submit_assignment(a2)
    assert (di.value.reason, di.value.status, di.value.code) == ("receiver_held", 403, "receiver_held")

    # worker-b is activated at epoch 3: worker-a's epoch-2 envelope is stale.
    req3 = kvfence.set_request("lower-retention", s, b'{"data":{"retention_days":"40"}}').encode()
    a3 = admin.activate(s, WORKER_B, "claim-b", req3).assignment()
    with pytest.raises(kvfence.StaleAuthorityError) as di:
        worker_a.submit_assignment(a2)
    assert di.value.reason == "stale_or_unknown_epoch"
    assert di.value.result.scope == s and di.value.result.audit_seq > 0

    # worker-a submitting worker-b's current envelope: a denial that is not
    # stale authority.
    with pytest.raises(kvfence.DeniedError) as di:
        worker_a.submit_assignment(a3)
    assert di.value.reason == "executor_mismatch"
    assert not isinstance(di.value, kvfence.StaleAuthorityError)
    assert worker_b.submit_assignment(a3).outcome == "applied"

    st = admin.status(s).scopes[0]
    assert st.stale_rejections == 3 and st.denials["executor_mismatch"] == 1
    assert st.last_stale_rejection_at is not None

    # The audit chain, each entry checked against its hash and link.
    evs = list(admin.events())
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    kinds = [e.kind for e in evs]
    assert kinds.count("hold") == 2 and kinds.count("submit") >= 6
    assert any(e.kind == "hold" and e["actor"] for e in evs)
    for c in (admin, worker_a, worker_b):
        c.close()


def test_forbidden_is_not_a_denial(receiver: Receiver) -> None:
    s = _scope("forbidden")
    admin = receiver.admin()
    admin.create_scope(s)
    admin.create_target(s, s, b"v1")
    worker = receiver.client("worker-a")
    # A worker at an administrative endpoint: a role refusal, 403.
    with pytest.raises(kvfence.KvfenceError) as fi:
        worker.create_scope(_scope("not-mine"))
    assert type(fi.value) is kvfence.ForbiddenError
    assert (fi.value.status, fi.value.code) == (403, "forbidden")
    assert not isinstance(fi.value, kvfence.DeniedError)
    # A fence denial, also 403: a decision, a different class.
    a = kvfence.Assignment(scope=s, epoch=1, grant="0" * 32, executor=WORKER_A, claim="c",
                           request=kvfence.set_request("x", s, b"v2").encode())
    with pytest.raises(kvfence.KvfenceError) as di:
        worker.submit_assignment(a)
    assert isinstance(di.value, kvfence.DeniedError) and not isinstance(di.value, kvfence.ForbiddenError)
    assert di.value.status == 403 and di.value.reason == "receiver_held"
    # The operator's mTLS certificate is admitted where the worker's is not.
    assert receiver.client("alice").status(s).scopes[0].scope == s


@pytest.mark.parametrize("call,cls,status,code", [
    (lambda c, s: c.create_scope(s), kvfence.ConflictError, 409, "scope_exists"),
    (lambda c, s: c.create_target(s, s, b"again"), kvfence.ConflictError, 409, "target_exists"),
    (lambda c, s: c.create_target(s + "/none", "t", b""), kvfence.NotFoundError, 404, "unknown_scope"),
    (lambda c, s: c.target(s + "/none"), kvfence.NotFoundError, 404, "unknown_target"),
    (lambda c, s: c.receipt(s, "never"), kvfence.NotFoundError, 404, "not_found"),
    (lambda c, s: c.activate(s, WORKER_A, "c", b"not cbor"), kvfence.BadRequestError, 400, "malformed_request"),
    (lambda c, s: c.activate(s, WORKER_A, "c", kvfence.set_request("a", s, b"x").encode(), ttl=timedelta(days=400)),
     kvfence.BadRequestError, 400, "ttl_too_long"),
    (lambda c, s: c.hold(s + "/none", "r"), kvfence.NotFoundError, 404, "unknown_scope"),
])
def test_error_codes(receiver: Receiver, call, cls, status, code) -> None:  # type: ignore[no-untyped-def]
    s = _scope("codes")
    admin = receiver.admin()
    try:
        admin.create_scope(s)
        admin.create_target(s, s, b"v")
    except kvfence.ConflictError:
        pass
    with pytest.raises(kvfence.KvfenceError) as ei:
        call(admin, s)
    assert type(ei.value) is cls, ei.value
    assert (ei.value.status, ei.value.code) == (status, code)
    assert ei.value.message


def test_untrusted_socket_sends_nothing(receiver: Receiver) -> None:
    s = _scope("untrusted")
    c = kvfence.Client("unix://" + receiver.socket, server_uids=[54321])
    with pytest.raises(kvfence.UntrustedServerError):
        c.create_scope(s)
    with pytest.raises(kvfence.NotFoundError):
        receiver.admin().status(s)


def test_assignment_out_from_the_cli(receiver: Receiver) -> None:
    s = _scope("handoff")
    admin = receiver.admin()
    admin.create_scope(s)
    admin.create_target(s, s, b"v1")
    req = receiver.dir / "handoff-req.cbor"
    req.write_bytes(kvfence.set_request("hand-off", s, b"v2").encode())
    out = receiver.dir / "handoff.json"
    r = receiver.cli("activate", "--scope", s, "--executor", WORKER_A, "--claim", "claim-h", "--request", str(req),
                     "--assignment-out", str(out), "--server", "unix://" + receiver.socket)
    assert r.returncode == 0, r.stderr
    a = kvfence.load_assignment(out)
    assert (a.scope, a.epoch, a.executor, a.claim, a.request) == (s, 1, WORKER_A, "claim-h", req.read_bytes())
    assert receiver.client("worker-a").submit_assignment(a).outcome == "applied"
    # The Go CLI reads the envelope the Python client builds from it.
    env = receiver.dir / "handoff-env.cbor"
    env.write_bytes(a.envelope())
    r = receiver.cli("submit", "--envelope", str(env), "--server", receiver.url, "--tls-cert",
                     str(receiver.dir / "worker-a.crt"), "--tls-key", str(receiver.dir / "worker-a.key"),
                     "--tls-ca", str(receiver.dir / "ca.crt"), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["outcome"] == "already_applied"


def test_healthz_and_targets(receiver: Receiver) -> None:
    admin = receiver.admin()
    admin.healthz()
    s = _scope("list")
    admin.create_scope(s)
    admin.create_target(s, s + "/a", b"\xff\x00")
    ts = admin.targets(s)
    assert [(t.name, t.value) for t in ts] == [(s + "/a", b"\xff\x00")]


def test_readme_python_worker(receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    # The README's ten lines, run as written against this receiver.
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme[readme.index("### A Python worker"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    src = code.group(1).replace("https://127.0.0.1:8443", receiver.url)
    assert len(src.strip().splitlines()) <= 10
    s = _scope("readme")
    admin = receiver.admin()
    admin.create_scope(s)
    admin.create_target(s, s, b"v1")
    act = admin.activate(s, WORKER_A, "claim-r", kvfence.set_request("readme", s, b"v2").encode())
    a = act.assignment()
    (receiver.dir / "worker-a.json").write_text(json.dumps({
        "scope": a.scope, "epoch": a.epoch, "grant": a.grant, "executor": a.executor, "claim": a.claim,
        "request_b64": __import__("base64").b64encode(a.request).decode()}))
    monkeypatch.chdir(receiver.dir)
    exec(compile(src, "README.md", "exec"), {})
    assert capsys.readouterr().out.startswith("applied 2 ")
    admin.hold(s, "readme")
    exec(compile(src, "README.md", "exec"), {})
    assert capsys.readouterr().out == "fenced: receiver_held\n"


def test_hold_all(receiver: Receiver) -> None:
    s = _scope("hold-all")
    admin = receiver.admin()
    admin.create_scope(s)
    admin.create_target(s, s, b"v1")
    admin.activate(s, WORKER_A, "claim-all", kvfence.set_request("all", s, b"v2").encode())
    res = admin.hold_all("incident")
    assert s in [x.scope for x in res.scopes]
    assert all(x.mode == "held" for x in admin.status().scopes)
    again = admin.hold_all("incident")
    assert again.scopes == [] and s in again.already_held


def test_extend_grant(receiver: Receiver) -> None:
    s = _scope("extend")
    admin = receiver.admin()
    admin.create_scope(s, max_grant_ttl=timedelta(hours=1))
    admin.create_target(s, s, b'{"data":{}}')
    req = kvfence.set_request("extend", s, b'{"data":{"a":"1"}}').encode()
    act = admin.activate(s, WORKER_A, "claim-x", req, ttl=timedelta(minutes=5))
    assert act.grant.not_after is not None

    g = admin.extend_grant(act.grant.id, timedelta(minutes=30))
    assert g.id == act.grant.id and g.created_at is not None and g.not_after is not None
    assert g.not_after > act.grant.not_after
    assert admin.grant(act.grant.id).not_after == g.not_after

    # Beyond the scope's maximum: refused, the grant unchanged.
    with pytest.raises(kvfence.BadRequestError) as ei:
        admin.extend_grant(act.grant.id, timedelta(hours=2))
    assert ei.value.code == "ttl_too_long"
    assert admin.grant(act.grant.id).not_after == g.not_after

    # A grant a hold superseded is no longer extended.
    admin.hold(s, "superseded")
    with pytest.raises(kvfence.ConflictError) as ci:
        admin.extend_grant(act.grant.id, timedelta(minutes=10))
    assert (ci.value.status, ci.value.code) == (409, "grant_not_active")
    with pytest.raises(ValueError):
        admin.extend_grant(act.grant.id, timedelta(0))


def test_every_error_code_has_its_exception() -> None:
    """Every error code docs/openapi.yaml lists maps to an exception of its
    own kind, not to the fallback by HTTP status."""
    import pathlib
    import re

    from kvfence import errors

    spec = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "openapi.yaml").read_text()
    block = spec[spec.index("    ErrorCode:"):]
    block = block[block.index("enum:") + len("enum:"):]
    codes = []
    for line in block.splitlines()[1:]:
        m = re.fullmatch(r"\s+- ([a-z_]+)", line)
        if not m:
            break
        codes.append(m.group(1))
    assert len(codes) > 20, codes
    missing = [c for c in codes if c not in errors._BY_CODE]
    assert not missing, f"error codes without an exception: {missing}"


def test_target_kinds_shown(receiver: Receiver) -> None:
    """An internal target is shown with its kind and nothing a remote kind names."""
    admin = receiver.admin()
    s = _scope("kinds")
    admin.create_scope(s)
    t = admin.create_target(s, s, b"v1")
    assert (t.kind, t.target_key, t.object, t.uid) == ("internal", "", "", "")
    got = admin.target(s)
    assert (got.kind, got.target_key, got.object, got.live, got.live_error) == ("internal", "", "", None, "")
    assert [x.kind for x in admin.targets(s)] == ["internal"]


@pytest.mark.parametrize("kwargs,cls,status,code", [
    # The served receiver keeps its store in a database file: no etcd key.
    ({"value": b"v", "kind": "etcd", "target_key": "/app/x"}, kvfence.ServerError, 501, "kind_unsupported"),
    # It was started without a kubeconfig: no Kubernetes identity.
    ({"kind": "kubernetes", "object": "configmaps/prod/x"}, kvfence.ServerError, 501, "no_dispatcher"),
    # A func target is an embedder's, never created over the API.
    ({"value": b"v", "kind": "func"}, kvfence.ServerError, 501, "kind_unsupported"),
    ({"kind": "kubernetes", "object": "configmaps/x"}, kvfence.BadRequestError, 400, "invalid_argument"),
])
def test_target_kinds_refused(receiver: Receiver, kwargs, cls, status, code) -> None:  # type: ignore[no-untyped-def]
    admin = receiver.admin()
    s = _scope("kinds-refused")
    try:
        admin.create_scope(s)
    except kvfence.ConflictError:
        pass
    with pytest.raises(kvfence.KvfenceError) as ei:
        admin.create_target(s, "refused-" + code, **kwargs)
    assert type(ei.value) is cls, ei.value
    assert (ei.value.status, ei.value.code) == (status, code)
    with pytest.raises(kvfence.NotFoundError):
        admin.target("refused-" + code)


@pytest.mark.parametrize("kwargs", [
    {"value": b"v", "kind": "kubernetes", "object": "configmaps/prod/x"},
    {"kind": "etcd", "value": b"v"},
    {"value": b"v", "target_key": "/app/x"},
    {"value": b"v", "object": "configmaps/prod/x"},
    {"kind": "internal"},
    {"value": b"v", "kind": "Internal"},
])
def test_target_kinds_checked_before_sending(kwargs) -> None:  # type: ignore[no-untyped-def]
    c = kvfence.Client.__new__(kvfence.Client)
    with pytest.raises(ValueError):
        c.create_target("s", "t", **kwargs)


def test_target_kinds_read() -> None:
    """A kubernetes target's answer is read with its object and live state;
    a kind that names what it does not have is refused."""
    base = {"target": "t", "scope": "s", "revision": 1, "value": "{}", "value_b64": "e30="}
    t = kvfence.Target.from_json({**base, "kind": "kubernetes", "object": "configmaps/prod/p", "uid": "u-1",
                                  "live": {"resource_version": "7", "uid": "u-1", "last_dispatch": "d-1"}})
    assert (t.object, t.uid, t.live) == ("configmaps/prod/p", "u-1", kvfence.LiveObject("7", "u-1", "d-1"))
    e = kvfence.Target.from_json({**base, "kind": "etcd", "target_key": "/app/p", "writes": 2})
    assert (e.target_key, e.writes) == ("/app/p", 2)
    for bad in ({**base, "kind": "etcd"}, {**base, "kind": "internal", "object": "configmaps/a/b"},
                {**base, "kind": "nope"}, {**base, "kind": "internal", "live": {"resource_version": "1", "uid": "u",
                                                                                 "last_dispatch": ""}}):
        with pytest.raises(ValueError):
            kvfence.Target.from_json(bad)
