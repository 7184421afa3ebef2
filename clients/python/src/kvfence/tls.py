"""The TLS configuration of a worker or operator that talks to a receiver
over mTLS, as Go's client.LoadTLS makes it."""

from __future__ import annotations

import os
import re
import ssl
from typing import Union

from .errors import TLSFileError

__all__ = ["load_tls"]

_Path = Union[str, "os.PathLike[str]"]
_BLOCK = re.compile(rb"-----BEGIN ([^-\r\n]+)-----\r?\n(.*?)-----END \1-----", re.S)


def _read(kind: str, path: _Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TLSFileError(f"{kind} file {os.fspath(path)}: {e.strerror or e}") from e


def load_tls(cert: _Path, key: _Path, ca: _Path) -> ssl.SSLContext:
    """Return an SSLContext with the client certificate and key (PEM) from
    cert and key, verifying the receiver's certificate against the CA
    certificates in ca (PEM, every block a certificate), TLS 1.3 at least.

    Nothing is left unverified: every file is required, and a CA file with
    a block that is not a certificate, or a damaged block, is refused
    rather than trusted for less than the operator meant. Raises
    TLSFileError naming the file.
    """
    if not ca:
        raise TLSFileError("a CA file is required to verify the receiver's certificate")
    if not cert or not key:
        raise TLSFileError("a client certificate and key file are required")
    ca_pem = _read("CA", ca)
    _read("certificate", cert)
    _read("key", key)
    begins = ca_pem.count(b"-----BEGIN ")
    blocks = _BLOCK.findall(ca_pem)
    if len(blocks) != begins:
        raise TLSFileError(f"CA file {os.fspath(ca)}: {begins} PEM blocks begin but {len(blocks)} decode: "
                           "a block is damaged")
    if not blocks:
        raise TLSFileError(f"CA file {os.fspath(ca)}: no PEM certificate in it")
    for i, (typ, _) in enumerate(blocks):
        if typ != b"CERTIFICATE":
            raise TLSFileError(f"CA file {os.fspath(ca)}: PEM block {i + 1} is {typ.decode(errors='replace')!r}, "
                               "not a CERTIFICATE")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.check_hostname = True
    try:
        ctx.load_verify_locations(cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError) as e:
        raise TLSFileError(f"CA file {os.fspath(ca)}: {e}") from None
    try:
        ctx.load_cert_chain(certfile=os.fspath(cert), keyfile=os.fspath(key))
    except (ssl.SSLError, ValueError) as e:
        raise TLSFileError(f"certificate {os.fspath(cert)} and key {os.fspath(key)}: {e}") from None
    return ctx
