"""Loading an Assignment file and TLS files: every file is hostile until
checked, and a bad one is a precise error."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import pytest

import kvfence
from conftest import Receiver

REQ = kvfence.set_request("a", "t", b"v").encode()
GOOD: dict[str, Any] = {"scope": "s", "epoch": 3, "grant": "0123456789abcdef0123456789abcdef",
                        "executor": "spiffe://example.org/agent/worker-a", "claim": "c",
                        "request_b64": base64.b64encode(REQ).decode()}


def test_load_assignment(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    p.write_text(json.dumps(GOOD, indent=2) + "\n")
    a = kvfence.load_assignment(p)
    assert a == kvfence.Assignment(scope="s", epoch=3, grant=GOOD["grant"], executor=GOOD["executor"], claim="c",
                                   request=REQ)
    assert kvfence.decode_envelope(a.envelope()).request == REQ


@pytest.mark.parametrize("text,match", [
    (json.dumps({k: v for k, v in GOOD.items() if k != "claim"}), "no claim"),
    (json.dumps({**GOOD, "epoch": 0}), "no epoch"),
    (json.dumps({**GOOD, "request_b64": ""}), "no request_b64"),
    (json.dumps({**GOOD, "epoch": -1}), "not an unsigned"),
    (json.dumps({**GOOD, "epoch": 1.5}), "not an unsigned"),
    (json.dumps({**GOOD, "epoch": "3"}), "not an unsigned"),
    (json.dumps({**GOOD, "scope": None}), "not a string"),
    (json.dumps({**GOOD, "extra": 1}), "unknown member 'extra'"),
    (json.dumps({**{k: v for k, v in GOOD.items() if k != "scope"}, "Scope": "s"}), "member 'Scope'"),
    ('{"scope":"x",' + json.dumps(GOOD)[1:], "given twice"),
    (json.dumps({**GOOD, "request_b64": "not base64!"}), "not padded standard base64"),
    (json.dumps({**GOOD, "request_b64": GOOD["request_b64"].rstrip("=")}), "base64"),
    (json.dumps(GOOD) + "{}", "not JSON"),
    ("[]", "not a JSON object"),
    ("", "not JSON"),
])
def test_bad_assignment(tmp_path: Path, text: str, match: str) -> None:
    p = tmp_path / "a.json"
    p.write_text(text)
    with pytest.raises(kvfence.AssignmentError, match=match) as ei:
        kvfence.load_assignment(p)
    assert str(p) in str(ei.value)


def test_oversized_and_missing_assignment(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    p.write_text(json.dumps({**GOOD, "claim": "c" * kvfence.MAX_ASSIGNMENT_SIZE}))
    with pytest.raises(kvfence.AssignmentError, match="over"):
        kvfence.load_assignment(p)
    with pytest.raises(FileNotFoundError):
        kvfence.load_assignment(tmp_path / "none.json")


def test_assignment_with_a_bad_name_cannot_be_enveloped(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    p.write_text(json.dumps({**GOOD, "executor": "w\u202e"}))
    a = kvfence.load_assignment(p)
    with pytest.raises(kvfence.MalformedEnvelopeError, match="control character"):
        a.envelope()


def test_load_tls(receiver: Receiver, tmp_path: Path) -> None:
    d = receiver.dir
    ctx = kvfence.load_tls(d / "worker-a.crt", d / "worker-a.key", d / "ca.crt")
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    ca = (d / "ca.crt").read_bytes()
    cases = {
        "key in the CA file": (ca + (d / "ca.key").read_bytes(), "not a CERTIFICATE"),
        "damaged block": (ca.replace(b"-----END CERTIFICATE-----", b"-----END CERTIFICATE"), "PEM block"),
        "empty": (b"", "no PEM certificate"),
        "garbage body": (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "CA file"),
    }
    for name, (body, match) in cases.items():
        bad = tmp_path / "bad-ca.crt"
        bad.write_bytes(body)
        with pytest.raises(kvfence.TLSFileError, match=match):
            kvfence.load_tls(d / "worker-a.crt", d / "worker-a.key", bad)
    with pytest.raises(kvfence.TLSFileError, match="CA file is required"):
        kvfence.load_tls(d / "worker-a.crt", d / "worker-a.key", "")
    with pytest.raises(kvfence.TLSFileError, match="key file"):
        kvfence.load_tls(d / "worker-a.crt", tmp_path / "none.key", d / "ca.crt")
    with pytest.raises(kvfence.TLSFileError, match="worker-b.key"):
        kvfence.load_tls(d / "worker-a.crt", d / "worker-b.key", d / "ca.crt")


def test_a_receiver_under_another_ca_is_refused(receiver: Receiver, tmp_path: Path) -> None:
    r = receiver.cli("cert", "ca", "--out", str(tmp_path / "other"))
    assert r.returncode == 0, r.stderr
    d = receiver.dir
    c = kvfence.Client(receiver.url, tls=kvfence.load_tls(d / "worker-a.crt", d / "worker-a.key", tmp_path / "other.crt"))
    with pytest.raises(kvfence.TransportError, match="nothing was sent"):
        c.healthz()


def test_client_urls() -> None:
    for bad in ("http://127.0.0.1:8443", "https://127.0.0.1:8443/v1", "unix://host/x.sock", "ftp://x"):
        with pytest.raises(ValueError):
            kvfence.Client(bad, tls=ssl.create_default_context())
    with pytest.raises(ValueError, match="needs an ssl.SSLContext"):
        kvfence.Client("https://127.0.0.1:8443")
