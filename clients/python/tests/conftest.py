"""Fixtures: the kvfence binary, built once from this repository, and a
real ``kvfence serve`` with a test CA, SPIFFE client certificates and an
admin socket, in a temporary directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

import kvfence

REPO = Path(__file__).resolve().parents[3]
ADMIN = "spiffe://example.org/ops/alice"
WORKER_A = "spiffe://example.org/agent/worker-a"
WORKER_B = "spiffe://example.org/agent/worker-b"


@pytest.fixture(scope="session")
def kvfence_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kvfence binary: $KVFENCE_BIN, or built from this repository."""
    given = os.environ.get("KVFENCE_BIN")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("bin") / "kvfence"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/kvfence"], cwd=REPO, check=True)
    return out


@dataclass
class Receiver:
    """A running kvfence serve and what its callers need."""

    bin: Path
    dir: Path
    url: str
    socket: str
    env: dict[str, str]

    def tls(self, name: str) -> "kvfence.tls.ssl.SSLContext":
        """The mTLS context of a client certificate made for name."""
        return kvfence.load_tls(self.dir / f"{name}.crt", self.dir / f"{name}.key", self.dir / "ca.crt")

    def client(self, name: str) -> kvfence.Client:
        """An mTLS client as name (alice, worker-a, worker-b)."""
        return kvfence.Client(self.url, tls=self.tls(name))

    def admin(self) -> kvfence.Client:
        """A client of the admin socket, as this process's uid."""
        return kvfence.Client("unix://" + self.socket)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the kvfence CLI with the receiver's environment."""
        return subprocess.run([str(self.bin), *args], env=self.env, capture_output=True, text=True, timeout=60)


def _run(bin: Path, env: dict[str, str], cwd: Path, *args: str) -> None:
    subprocess.run([str(bin), *args], env=env, cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def receiver(kvfence_bin: Path) -> Iterator[Receiver]:
    """A kvfence serve on 127.0.0.1 (any port) with alice as admin and a
    unix admin socket for this uid; stopped with SIGTERM afterwards."""
    d = Path(tempfile.mkdtemp(prefix="kvf"))  # short: a socket path has at most 108 bytes
    try:
        (d / "anchor").mkdir(mode=0o700)
        (d / "recovery").mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KVFENCE_")}
        env.update(KVFENCE_DB=str(d / "r.db"), KVFENCE_ANCHOR=str(d / "anchor" / "r.anchor"),
                   KVFENCE_KEY=str(d / "receiver.key"))
        _run(kvfence_bin, env, d, "keygen", "--out", "recovery/recovery.key")
        _run(kvfence_bin, env, d, "keygen", "--out", "receiver.key")
        _run(kvfence_bin, env, d, "init", "--id", "r1", "--recovery-pub", "recovery/recovery.key.pub")
        _run(kvfence_bin, env, d, "cert", "ca", "--out", "ca")
        _run(kvfence_bin, env, d, "cert", "server", "--ca", "ca", "--ip", "127.0.0.1", "--out", "server")
        for name, spiffe in (("alice", ADMIN), ("worker-a", WORKER_A), ("worker-b", WORKER_B)):
            _run(kvfence_bin, env, d, "cert", "client", "--ca", "ca", "--spiffe-id", spiffe, "--out", name)
        sock = str(d / "run" / "admin.sock")
        out = open(d / "serve.out", "w+b")
        err = open(d / "serve.err", "w+b")
        proc = subprocess.Popen([str(kvfence_bin), "serve", "--json", "--listen", "127.0.0.1:0",
                                 "--tls-cert", "server.crt", "--tls-key", "server.key", "--client-ca", "ca.crt",
                                 "--admin", ADMIN, "--admin-socket", sock, "--admin-uid", str(os.getuid())],
                                env=env, cwd=d, stdout=out, stderr=err)
        try:
            deadline = time.monotonic() + 30
            addrs = None
            while addrs is None:
                try:
                    addrs = json.loads((d / "serve.out").read_bytes())
                except ValueError:
                    if proc.poll() is not None:
                        pytest.fail(f"kvfence serve exited {proc.returncode}:\n{(d / 'serve.err').read_text()}")
                    if time.monotonic() > deadline:
                        pytest.fail(f"kvfence serve did not start in 30 s:\n{(d / 'serve.err').read_text()}")
                    time.sleep(0.05)
            yield Receiver(bin=kvfence_bin, dir=d, url="https://" + addrs["listen"], socket=addrs["admin_socket"],
                           env=env)
        finally:
            proc.terminate()  # SIGTERM to the process this fixture started: it drains and exits 0
            try:
                code = proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                pytest.fail("kvfence serve did not stop within 40 s of SIGTERM")
            out.close()
            err.close()
            assert code == 0, f"kvfence serve exited {code}"
    finally:
        shutil.rmtree(d, ignore_errors=True)
