"""The cross-language vectors in testdata/wire, written by Go's
kvfence/wirevectors_test.go: Python builds the same bytes from the same
inputs, decodes Go's bytes back to the same values, and refuses what Go
refuses."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import kvfence
from kvfence.types import Event

VECTORS = json.loads((Path(__file__).resolve().parents[3] / "testdata" / "wire" / "vectors.json").read_text())


def _request(v: dict[str, Any]) -> kvfence.Request:
    return kvfence.Request(
        action=v["action"], target=v["target"],
        set=base64.b64decode(v["set_b64"]) if "set_b64" in v else None,
        patch=v["patch"].encode() if "patch" in v else None,
        expect_revision=v.get("expect_revision"),
        expect_value=base64.b64decode(v["expect_value_b64"]) if "expect_value_b64" in v else None)


def test_vector_file_is_not_empty() -> None:
    for k in ("requests", "envelopes", "invalid_requests", "invalid_envelopes", "entries"):
        assert len(VECTORS[k]) >= 3, k


@pytest.mark.parametrize("v", VECTORS["requests"], ids=lambda v: v["name"])
def test_request_vectors(v: dict[str, Any]) -> None:
    r = _request(v)
    raw = kvfence.encode_request(r)
    assert raw.hex() == v["cbor_hex"]
    assert kvfence.request_digest(raw).hex() == v["sha256"] == hashlib.sha256(bytes.fromhex(v["cbor_hex"])).hexdigest()
    assert kvfence.decode_request(bytes.fromhex(v["cbor_hex"])) == r


@pytest.mark.parametrize("v", VECTORS["envelopes"], ids=lambda v: v["name"])
def test_envelope_vectors(v: dict[str, Any]) -> None:
    e = kvfence.Envelope(scope=v["scope"], epoch=v["epoch"], grant=v["grant"], executor=v["executor"],
                         claim=v["claim"], request=bytes.fromhex(v["request_hex"]))
    assert kvfence.encode_envelope(e).hex() == v["cbor_hex"]
    assert kvfence.decode_envelope(bytes.fromhex(v["cbor_hex"])) == e
    a = kvfence.Assignment(scope=e.scope, epoch=e.epoch, grant=e.grant, executor=e.executor, claim=e.claim,
                           request=e.request)
    assert a.envelope().hex() == v["cbor_hex"]


@pytest.mark.parametrize("v", VECTORS["invalid_requests"], ids=lambda v: v["name"])
def test_invalid_request_vectors(v: dict[str, Any]) -> None:
    with pytest.raises(kvfence.MalformedRequestError):
        kvfence.decode_request(bytes.fromhex(v["cbor_hex"]))


@pytest.mark.parametrize("v", VECTORS["invalid_envelopes"], ids=lambda v: v["name"])
def test_invalid_envelope_vectors(v: dict[str, Any]) -> None:
    with pytest.raises(kvfence.MalformedEnvelopeError):
        kvfence.decode_envelope(bytes.fromhex(v["cbor_hex"]))


@pytest.mark.parametrize("v", VECTORS["entries"], ids=lambda v: v["name"])
def test_entry_vectors(v: dict[str, Any]) -> None:
    ev = Event.from_json(v["entry"])
    assert ev.encode().hex() == v["cbor_hex"]
    assert ev.hash.hex() == v["entry"]["hash"]
    # One changed field no longer hashes to the link hash.
    forged = dict(v["entry"], kind=v["entry"]["kind"] + "x")
    with pytest.raises(ValueError, match="hash to"):
        Event.from_json(forged)


@pytest.mark.parametrize("build,err", [
    (lambda: kvfence.Request(action="a", target="t"), "one of set or patch"),
    (lambda: kvfence.Request(action="a", target="t", set=b"x", patch=b"[]"), "mutually exclusive"),
    (lambda: kvfence.Request(action="", target="t", set=b"x"), "action is empty"),
    (lambda: kvfence.Request(action="a\x85", target="t", set=b"x"), "control character"),
    (lambda: kvfence.Request(action="a", target="t\u2067", set=b"x"), "control character"),
    (lambda: kvfence.Request(action="a" * 513, target="t", set=b"x"), "over the 512-byte limit"),
    (lambda: kvfence.Request(action="\ud800", target="t", set=b"x"), "not valid UTF-8"),
    (lambda: kvfence.Request(action="a", target="t", set=b"x", expect_revision=0), "expect_revision 0"),
    (lambda: kvfence.Request(action="a", target="t", set=b"x", expect_revision=True), "not an unsigned"),  # type: ignore[arg-type]
    (lambda: kvfence.Request(action="a", target="t", set=b"x", expect_revision=1 << 64), "not an unsigned 64-bit"),
    (lambda: kvfence.Request(action="a", target="t", set="text"), "not bytes"),  # type: ignore[arg-type]
    (lambda: kvfence.patch_request("a", "t", '{"op":"add"}'), "not a JSON array"),
    (lambda: kvfence.patch_request("a", "t", '[{"op":"add","path":"/a"}]'), "no 'value' member"),
    (lambda: kvfence.patch_request("a", "t", '[{"op":"remove","path":"a"}]'), "neither empty nor starts with /"),
    (lambda: kvfence.patch_request("a", "t", '[{"op":"test","path":"/a","value":NaN}]'), "malformed patch"),
    (lambda: kvfence.patch_request("a", "t", '[{"op":"test","path":"/a","value":"\\ud800"}]'), "malformed patch"),
])
def test_request_refused_before_encoding(build, err) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(kvfence.MalformedRequestError, match=err):
        kvfence.encode_request(build())


@pytest.mark.parametrize("env,err", [
    (dict(epoch=-1), "not an unsigned"),
    (dict(epoch=1.0), "not an unsigned"),
    (dict(request=b""), "request is empty"),
    (dict(claim=""), "claim is empty"),
    (dict(executor="w\n"), "control character"),
    (dict(v=2), "version 2"),
])
def test_envelope_refused_before_encoding(env, err) -> None:  # type: ignore[no-untyped-def]
    base = dict(scope="s", epoch=1, grant="g", executor="w", claim="c", request=b"\xa0")
    with pytest.raises(kvfence.MalformedEnvelopeError, match=err):
        kvfence.encode_envelope(kvfence.Envelope(**{**base, **env}))


def test_pure_python_cbor2_encodes_the_same() -> None:
    # cbor2 without its C extension (a pip install on a platform without a
    # wheel) must encode the vectors identically too.
    try:
        from cbor2 import encoder as pure  # cbor2 5.4
    except ImportError:  # pragma: no cover
        from cbor2 import _encoder as pure  # type: ignore[no-redef]  # cbor2 >= 5.5
    for v in VECTORS["requests"]:
        assert pure.dumps(_request(v).to_map(), canonical=True).hex() == v["cbor_hex"], v["name"]
    for v in VECTORS["envelopes"]:
        e = kvfence.Envelope(scope=v["scope"], epoch=v["epoch"], grant=v["grant"], executor=v["executor"],
                             claim=v["claim"], request=bytes.fromhex(v["request_hex"]))
        assert pure.dumps(e.to_map(), canonical=True).hex() == v["cbor_hex"], v["name"]
