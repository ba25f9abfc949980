"""Start ``monotape run`` as a child process on loopback and learn what it listens on.

The one launcher behind the end-to-end tests, the storm and latency benchmarks and the soak:
it passes ``--ws-port 0 --admin-port 0`` (free ports), reads the "terminals ws://…" and
"metrics http://…" lines that ``monotape run`` prints, and keeps draining the child's output
so its pipe never fills (the lines are kept for failure reports).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["ADMIN_LINE", "WS_LINE", "Launched", "launch"]

WS_LINE: Final = re.compile(r"terminals\s+ws://127\.0\.0\.1:(\d+)/")
ADMIN_LINE: Final = re.compile(r"metrics\s+http://127\.0\.0\.1:(\d+)/")


@dataclass
class Launched:
    proc: subprocess.Popen[str]
    ws_port: int
    admin_port: int
    output: list[str] = field(default_factory=list)


def launch(
    data_dir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    timeout_s: float = 30.0,
    keep_lines: int = 100_000,
) -> Launched:
    """Start the node; raise RuntimeError (with its output) if it does not say where it listens
    within ``timeout_s``. ``preexec_fn`` runs in the child before exec (e.g. CPU pinning)."""
    cmd = [
        sys.executable, "-m", "monotape", "run",
        "--ws-port", "0", "--admin-port", "0", "--data-dir", str(data_dir), *args,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=preexec_fn,
    )
    assert proc.stdout is not None
    output: list[str] = []
    deadline = time.monotonic() + timeout_s
    ws_port = admin_port = 0
    while time.monotonic() < deadline and not (ws_port and admin_port):
        line = proc.stdout.readline()
        if not line:
            break
        output.append(line)
        if m := WS_LINE.search(line):
            ws_port = int(m.group(1))
        if m := ADMIN_LINE.search(line):
            admin_port = int(m.group(1))
    if not (ws_port and admin_port):
        proc.kill()
        proc.wait(5)
        raise RuntimeError("monotape run did not say what it listens on:\n" + "".join(output))

    def drain() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if len(output) < keep_lines:
                output.append(line)

    threading.Thread(target=drain, daemon=True).start()
    return Launched(proc, ws_port, admin_port, output)
