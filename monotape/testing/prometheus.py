"""Prometheus' own tools for the alert and scrape tests: find them (skip with the Debian package's
name when missing, fail when CI=true: .ci/run installs them), and run a real Prometheus and
Alertmanager on free loopback ports, stopped when the test ends. Both start the same way
(``_daemon``: the argv, a readiness URL polled until 200, a log file for failure reports)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from monotape.alerts.yaml_writer import dump
from monotape.testing.tools import require_tool

__all__ = [
    "Alertmanager",
    "Prometheus",
    "free_port",
    "require_tool",
    "run_alertmanager",
    "run_prometheus",
    "until",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def until(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after timeout."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; last: {last!r}")


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@contextmanager
def _daemon(
    argv: Sequence[str], ready_url: str, log: Path, timeout_s: float = 30.0
) -> Iterator[None]:
    """Run ``argv`` (output to ``log``) until ``ready_url`` answers 200; stop it at the end
    (SIGTERM, then SIGKILL after 10 s). A daemon that exits or is not ready in time fails the
    test with the tail of its log."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{ready_url} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() >= deadline:
                pytest.fail(f"{ready_url} not ready in {timeout_s} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class Prometheus:
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (raises on an API error)."""
        body = _get_json(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = _get_json(f"{self.url}/api/v1/alerts")["data"]["alerts"]
        return alerts

    def rules(self) -> dict[str, Any]:
        data: dict[str, Any] = _get_json(f"{self.url}/api/v1/rules")["data"]
        return data

    def targets_up(self) -> bool:
        active = _get_json(f"{self.url}/api/v1/targets")["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


@contextmanager
def run_prometheus(
    workdir: Path,
    scrape_targets: list[str],
    *,
    rule_files: Sequence[Path] = (),
    alertmanager: str | None = None,
    interval: str = "1s",
) -> Iterator[Prometheus]:
    """A real Prometheus scraping ``scrape_targets`` (host:port, /metrics) every ``interval``."""
    binary = require_tool("prometheus", "prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": "monotape", "static_configs": [{"targets": scrape_targets}]}
        ],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    (workdir / "prometheus.yml").write_text(dump(config))
    port = free_port()
    argv = [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        # alerts go out at once when they fire (the default waits up to a minute)
        "--rules.alert.resend-delay=1s",
    ]
    log = workdir / "prometheus.log"
    with _daemon(argv, f"http://127.0.0.1:{port}/-/ready", log):
        yield Prometheus(port, log)


@dataclass
class Alertmanager:
    port: int
    log: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextmanager
def run_alertmanager(workdir: Path, config: dict[str, Any]) -> Iterator[Alertmanager]:
    binary = require_tool("prometheus-alertmanager", "prometheus-alertmanager")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "alertmanager.yml").write_text(dump(config))
    port = free_port()
    argv = [
        binary,
        f"--config.file={workdir / 'alertmanager.yml'}",
        f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # no gossip port: one instance, loopback only
    ]
    log = workdir / "alertmanager.log"
    with _daemon(argv, f"http://127.0.0.1:{port}/-/ready", log):
        yield Alertmanager(port, log)
