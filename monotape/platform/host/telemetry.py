"""How a role shows its metrics to the host: its own registry on a loopback port, the port in a
file the host reads (``run_dir/<name>.port``). The host scrapes every role and serves them as
one ``/metrics`` (a ``process`` label on each sample)."""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server

__all__ = ["port_file", "serve_metrics"]


def port_file(run_dir: str | Path, name: str) -> Path:
    return Path(run_dir) / f"{name}.port"


def serve_metrics(registry: CollectorRegistry, run_dir: str | Path, name: str) -> int:
    """Serve ``registry`` on 127.0.0.1 (a port the kernel picks) and publish the port."""
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = int(server.server_address[1])
    path = port_file(run_dir, name)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(f"{port}\n")
    tmp.replace(path)  # atomic: the host never reads half a port
    return port
