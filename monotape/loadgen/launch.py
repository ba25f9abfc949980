"""The running node: ``monotape run`` as a child process on loopback, and everything around it.

The one launcher behind the end-to-end tests (``tests/conftest.py``), the storm and latency
benchmarks and the soak; nothing else starts a node, and nothing else reads ``/metrics``:

- free ports (``--ws-port 0 --admin-port 0``), learnt from the "terminals ws://…" and
  "metrics http://…" lines ``monotape run`` prints; its own data dir (a temporary one, removed
  at the stop, unless one is given);
- tokens minted with the dev key the node generated under that data dir (a terminal token and
  an admin token, or ``mint()`` for any other);
- GET and POST to the admin API, and ``/metrics`` scraped and summed with Prometheus' own
  text-format parser (``parse_samples``), never by hand;
- its output drained by a thread so the pipe never fills: the first ``keep_lines`` lines for
  failure reports, the last ``TAIL_LINES`` always, each line to ``on_line`` if given;
- a stop with a deadline: SIGINT (the first Ctrl-C: a drain), then SIGKILL if it overstays.

``writers=N`` starts the multi-process host (``monotape run --writers N``, docs/processes.md)
the same way: it prints the same two lines, and its /metrics is every process's under a
``process`` label (``sum_samples`` without one gives the host's total).

Sync by default; the ``a``-prefixed twins (``alaunch``, ``aget``, ``ametrics``, ``astop`` …)
run the same calls in a worker thread for callers on an event loop (the soak).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from monotape.platform.auth import ensure_dev_keys, mint_token
from monotape.platform.host.processes import lifeline

__all__ = [
    "ADMIN_LINE",
    "TAIL_LINES",
    "WS_LINE",
    "RunningNode",
    "Samples",
    "alaunch",
    "launch",
    "parse_samples",
    "scrape",
    "sum_samples",
]

WS_LINE: Final = re.compile(r"terminals\s+ws://127\.0\.0\.1:(\d+)/")
ADMIN_LINE: Final = re.compile(r"metrics\s+http://127\.0\.0\.1:(\d+)/")
TAIL_LINES: Final = 200  # the node's last lines, kept whatever keep_lines says (failure reports)
_ASYNC_SLACK_S: Final = 5.0  # an a-call waits this much past its own socket timeout

# Every sample of one /metrics body: (name, sorted label pairs) -> value.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


# -- /metrics ----------------------------------------------------------------------------------
def parse_samples(text: str) -> Samples:
    """Every sample of a /metrics body, parsed by Prometheus' own text-format parser."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def sum_samples(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over every series whose labels include ``labels`` (across the
    node's processes and label values: the fleet-wide figure)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def _request(
    url: str, *, method: str = "GET", token: str | None = None, timeout_s: float = 10.0
) -> bytes:
    """The body of one HTTP request on loopback; urllib's HTTPError for a non-2xx answer."""
    request = urllib.request.Request(url, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout_s) as r:
        body: bytes = r.read()
    return body


def scrape(admin_url: str, timeout_s: float = 5.0) -> Samples:
    """``/metrics`` of the admin API at ``admin_url`` (e.g. http://127.0.0.1:8081), parsed."""
    return parse_samples(_request(admin_url.rstrip("/") + "/metrics", timeout_s=timeout_s).decode())


# -- the node ----------------------------------------------------------------------------------
@dataclass(eq=False)
class RunningNode:
    """One ``monotape run`` child: where it listens, its tokens, its output, its admin API."""

    proc: subprocess.Popen[str]
    ws_port: int
    admin_port: int
    data_dir: Path
    output: list[str] = field(default_factory=list)  # the first keep_lines lines
    tail: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=TAIL_LINES)
    )
    token: str = ""  # a terminal token ("" if the node's keys are not the dev pair)
    admin_token: str = ""
    _tmp: tempfile.TemporaryDirectory[str] | None = None
    _drainer: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The terminals' URL, with a valid token in the query (the browser form)."""
        return f"ws://127.0.0.1:{self.ws_port}/?token={self.token}"

    @property
    def bare_url(self) -> str:
        """The terminals' URL without a token: what reports print."""
        return f"ws://127.0.0.1:{self.ws_port}/"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def mint(self, *, admin: bool = False, ttl_s: float = 3600.0, sub: str = "tests") -> str:
        """A token signed by the dev key the node generated under its data dir."""
        pem = ensure_dev_keys(self.data_dir).private_pem_path
        return mint_token(pem, sub=sub, ttl_s=ttl_s, admin=admin)

    # -- the admin API (sync) ------------------------------------------------------------------
    def get(self, path: str, token: str | None = None, timeout: float = 10.0) -> bytes:
        return _request(self.admin_url + path, token=token, timeout_s=timeout)

    def http(self, path: str, token: str | None = None, timeout: float = 10.0) -> str:
        """GET ``path`` (with a bearer token if given); the body as text."""
        return self.get(path, token, timeout).decode()

    def post(self, path: str, token: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
        """POST to the admin API with a bearer token; the JSON body."""
        body: dict[str, Any] = json.loads(
            _request(self.admin_url + path, method="POST", token=token, timeout_s=timeout)
        )
        return body

    def metrics(self, timeout: float = 10.0) -> Samples:
        """Every sample of /metrics (``parse_samples``)."""
        return scrape(self.admin_url, timeout)

    def metric_sum(self, name: str, **labels: str) -> float:
        return sum_samples(self.metrics(), name, **labels)

    def metric_families(self, timeout: float = 10.0) -> dict[str, Metric]:
        """Every family of /metrics by name, with what it declares (TYPE, HELP) as well as its
        samples: for checks on the exposition itself rather than on values."""
        text = self.get("/metrics", timeout=timeout).decode()
        return {f.name: f for f in text_string_to_metric_families(text)}

    # -- the admin API (on an event loop) ------------------------------------------------------
    async def aget(self, path: str, token: str | None = None, timeout: float = 10.0) -> bytes:
        return await asyncio.wait_for(
            asyncio.to_thread(self.get, path, token, timeout), timeout + _ASYNC_SLACK_S
        )

    async def ametrics(self, timeout: float = 10.0) -> Samples:
        return await asyncio.wait_for(
            asyncio.to_thread(self.metrics, timeout), timeout + _ASYNC_SLACK_S
        )

    # -- the stop ------------------------------------------------------------------------------
    def stop(self, timeout: float = 40.0, sig: signal.Signals = signal.SIGINT) -> int | None:
        """``sig`` (the first Ctrl-C drains the terminals, staggered), wait up to ``timeout``,
        then SIGKILL. The exit code, or None if it overstayed and was killed. Idempotent."""
        code: int | None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                code = None
        else:
            code = self.proc.returncode
        if self._drainer is not None:
            self._drainer.join(5.0)  # the last lines ("stopped") are read before we return
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return code

    async def astop(self, timeout: float = 40.0, sig: signal.Signals = signal.SIGINT) -> int | None:
        return await asyncio.to_thread(self.stop, timeout, sig)

    def __enter__(self) -> RunningNode:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> RunningNode:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.astop()


def _dies_with_launcher(then: Callable[[], None] | None) -> Callable[[], None]:
    """The child's pre-exec: SIGTERM when the launcher dies (``PR_SET_PDEATHSIG``, the host's
    own ``lifeline`` for its roles: a node stops, a host stops its tree), then ``then``. A
    bench or test killed mid-run must not leave a node feeding 20k ticks/s behind it (seen:
    one ran on for 20 minutes after its bench was killed). The signal follows the launching
    *thread*: ``alaunch`` launches from a worker thread, which lives as long as the loop's
    executor, past the node's own stop."""
    dies = lifeline(os.getpid())

    def preexec() -> None:
        dies()
        if then is not None:
            then()

    return preexec


def launch(
    data_dir: Path | str | None = None,
    *args: str,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    timeout_s: float = 30.0,
    keep_lines: int = 100_000,
    on_line: Callable[[str], None] | None = None,
    token_ttl_s: float = 3600.0,
    sub: str = "tests",
    writers: int | None = None,
) -> RunningNode:
    """Start the node; RuntimeError (with its output) if it does not say where it listens within
    ``timeout_s``. ``data_dir`` None: a temporary one, removed at the stop. ``preexec_fn`` runs
    in the child before exec (e.g. CPU pinning, so every thread of the node inherits it).
    ``on_line`` sees every output line, from the drain thread. ``writers``: ``--writers N``
    (0: the one-process node, N > 0: the multi-process host); None leaves it to ``args``."""
    tmp = tempfile.TemporaryDirectory(prefix="monotape-node-") if data_dir is None else None
    where = Path(tmp.name if tmp is not None else str(data_dir))
    where.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "monotape", "run",
        "--ws-port", "0", "--admin-port", "0", "--data-dir", str(where), *args,
    ]  # fmt: skip
    if writers is not None:
        cmd += ["--writers", str(writers)]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=_dies_with_launcher(preexec_fn),
    )
    node = RunningNode(proc, 0, 0, where, _tmp=tmp)
    listening = threading.Event()  # both ports seen, or the output ended

    def keep(line: str) -> None:
        if len(node.output) < keep_lines:
            node.output.append(line)
        node.tail.append(line)
        if not listening.is_set():
            if m := WS_LINE.search(line):
                node.ws_port = int(m.group(1))
            if m := ADMIN_LINE.search(line):
                node.admin_port = int(m.group(1))
            if node.ws_port and node.admin_port:
                listening.set()
        if on_line is not None:
            on_line(line)

    def drain() -> None:
        # From the first line on, so a node that hangs silently cannot hang the launcher.
        assert proc.stdout is not None
        for line in proc.stdout:
            keep(line)
        listening.set()

    node._drainer = threading.Thread(target=drain, name="monotape-run-output", daemon=True)
    node._drainer.start()
    listening.wait(timeout_s)
    if not (node.ws_port and node.admin_port):
        proc.kill()
        proc.wait(5)
        node._drainer.join(5)
        if tmp is not None:
            tmp.cleanup()
        raise RuntimeError("monotape run did not say what it listens on:\n" + "".join(node.tail))
    try:
        node.token = node.mint(ttl_s=token_ttl_s, sub=sub)
        node.admin_token = node.mint(admin=True, ttl_s=token_ttl_s, sub=sub)
    except (OSError, ValueError) as exc:  # other keys configured: the caller mints its own
        keep(f"launch: no token minted: {exc!r}\n")
    return node


async def alaunch(data_dir: Path | str | None = None, *args: str, **kwargs: Any) -> RunningNode:
    """``launch`` from an event loop (the startup's blocking reads run in a worker thread)."""
    return await asyncio.to_thread(launch, data_dir, *args, **kwargs)
