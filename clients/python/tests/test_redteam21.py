"""Attacks on the client: answers and channels it must not take for the
receiver's."""

from __future__ import annotations

import json
import os
import socketserver
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Iterator

import pytest

import kvfence
from kvfence.errors import error_for

JSON = "application/json"


class _Socket:
    """An HTTP server on the unix socket at path that answers every GET
    with {"scopes": []} and records that it was asked."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.asked = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.asked += 1
                body = json.dumps({"scopes": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", JSON)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True
            block_on_close = False

        self.server = Server(path, Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        os.unlink(self.path)


@pytest.fixture
def sockdir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="kvf")
    yield d
    os.rmdir(d)


def test_unix_url_names_the_socket_go_names(sockdir: str) -> None:
    # Go's client.New takes unix:///PATH through url.Parse, which decodes
    # percent-escapes: unix:///d/a%20b.sock is the socket "/d/a b.sock".
    # The client must talk to that socket, never to one whose name is the
    # URL's escaped text.
    real = _Socket(os.path.join(sockdir, "a b.sock"))
    other = _Socket(os.path.join(sockdir, "a%20b.sock"))
    try:
        kvfence.Client("unix://" + os.path.join(sockdir, "a%20b.sock"), timeout=5).healthz()
        assert (real.asked, other.asked) == (1, 0)
    finally:
        real.close()
        other.close()


@pytest.mark.parametrize("url", ["unix:///tmp/a%zz.sock", "unix:///tmp/a%2", "unix:///tmp/a%00b.sock",
                                 "unix:///tmp/a?b", "unix:///tmp/a#b"])
def test_unix_url_go_refuses_or_cannot_dial(url: str) -> None:
    # An escape Go's url.Parse refuses, a NUL no socket path can hold, a
    # query or fragment: refused before anything is dialled.
    with pytest.raises(ValueError):
        kvfence.Client(url)


@pytest.mark.parametrize("reason", ["receiver_held", "stale_or_unknown_epoch", "inactive_grant"])
def test_stale_denials_are_not_retryable(reason: str) -> None:
    # A fence denial is never an exception a worker retries on: not
    # OutcomeUnknownError, NotAcknowledgedError, UnavailableError or a
    # transport error, whatever code an error answer carries beside it.
    from kvfence.types import SubmitResult

    res = SubmitResult(outcome="denied", reason=reason, detail="", scope="s", epoch=1, grant="g", action="a",
                       target="t", revision=0, audit_seq=3)
    err = kvfence.StaleAuthorityError(res)
    assert isinstance(err, kvfence.DeniedError)
    assert not isinstance(err, (kvfence.OutcomeUnknownError, kvfence.NotAcknowledgedError,
                                kvfence.UnavailableError, kvfence.TransportError))
    # A role refusal is a 403 too, and is not a denial.
    f = error_for(403, "forbidden", "x", change=True)
    assert isinstance(f, kvfence.ForbiddenError) and not isinstance(f, kvfence.DeniedError)
