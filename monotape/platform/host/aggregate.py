"""Every process's /metrics as one: the host scrapes each role over loopback and re-exposes all
of it with a ``process`` label per sample (``process="writer-0"``).

A role serves its own registry on a port the kernel picked and writes the port to
``run_dir/<name>.port`` (telemetry.py). ``scrape_all`` reads those files and fetches every role
at once with a short timeout; a role that does not answer (starting, stopped, stuck) is left out
of that scrape and counted (``monotape_process_scrape_failures_total{process}``), never a 500:
the SRE's /metrics must not die with one process. ``merge`` is pure (texts in, families out),
parsed with Prometheus' own text-format parser; ``MergedCollector`` hands the last merge to
``generate_latest`` so the exposition comes out of prometheus_client like every other.

Totals: none are computed here. A ``process`` label on every sample is all Prometheus needs
(``sum without (process) (monotape_connections)`` is the host's terminal count;
``monotape_stage_duration_seconds`` buckets add across processes the same way), and a summed
series beside the labelled ones would double every ``sum``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from monotape.platform.host.telemetry import port_file

__all__ = [
    "MAX_BODY_BYTES",
    "MergedCollector",
    "Scrape",
    "loopback_request",
    "merge",
    "read_port",
    "scrape_all",
    "scrape_one",
]

MAX_BODY_BYTES = 32 * 1024 * 1024  # one role's exposition; past it the scrape is a failure
PROCESS_LABEL = "process"


def read_port(run_dir: str | Path, name: str) -> int | None:
    """The role's metrics port from its port file; None while it has not written one."""
    try:
        port = int(port_file(run_dir, name).read_text().strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65_536 else None


async def loopback_request(
    port: int,
    method: str,
    path: str,
    timeout_s: float,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes]:
    """One HTTP/1.0 request to 127.0.0.1:port (a role's telemetry port): (status, body). The
    one loopback client of the host, for /metrics and the roles' /state and /action. Raises
    OSError, TimeoutError or ValueError (no HTTP answer; a body over ``max_bytes``)."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    request = f"{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{extra}Content-Length: 0\r\n\r\n"

    async def exchange() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request.encode("ascii"))
            await writer.drain()
            chunks: list[bytes] = []
            size = 0
            while chunk := await reader.read(65_536):  # HTTP/1.0: the body ends at EOF
                chunks.append(chunk)
                size += len(chunk)
                if size > max_bytes + 65_536:  # the head's allowance
                    raise ValueError(f"answer larger than {max_bytes} bytes")
            return b"".join(chunks)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    raw = await asyncio.wait_for(exchange(), timeout_s)
    head, sep, body = raw.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status) < 2 or not status[1].isdigit():
        raise ValueError(f"not an HTTP answer: {head[:80]!r}")
    if len(body) > max_bytes:
        raise ValueError(f"answer larger than {max_bytes} bytes")
    return int(status[1]), body


async def scrape_one(port: int, timeout_s: float) -> str:
    """GET /metrics from 127.0.0.1:port; raises OSError, TimeoutError or ValueError."""
    status, body = await loopback_request(
        port, "GET", "/metrics", timeout_s, MAX_BODY_BYTES, {"Accept": "text/plain"}
    )
    if status != 200:
        raise ValueError(f"not a 200 answer: {status}")
    return body.decode("utf-8", errors="replace")


@dataclass
class Scrape:
    """One round: the text of every role that answered, the names of those that did not."""

    texts: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # name -> why (for the log)


async def scrape_all(run_dir: str | Path, names: list[str], timeout_s: float) -> Scrape:
    """Every role in ``names`` at once; a missing port file or a failed GET lands in ``failed``."""
    out = Scrape()
    ports = {name: read_port(run_dir, name) for name in names}

    async def one(name: str, port: int) -> None:
        try:
            out.texts[name] = await scrape_one(port, timeout_s)
        except (OSError, TimeoutError, ValueError) as exc:
            out.failed[name] = repr(exc)

    for name, port in ports.items():
        if port is None:
            out.failed[name] = "no port file"
    await asyncio.gather(*(one(n, p) for n, p in ports.items() if p is not None))
    return out


def _relabel(sample: Sample, process: str, honor: bool) -> Sample:
    labels = dict(sample.labels)
    if PROCESS_LABEL in labels and not honor:
        # Prometheus' own rule for a clash (honor_labels: false): keep theirs, renamed.
        labels["exported_process"] = labels.pop(PROCESS_LABEL)
    labels.setdefault(PROCESS_LABEL, process)
    return sample._replace(labels=labels)


def merge(
    texts: Mapping[str, str], honor: frozenset[str] = frozenset()
) -> tuple[list[Metric], list[str]]:
    """One family per name across every process's exposition, each sample labelled with its
    process. A process in ``honor`` keeps a ``process`` label it set itself (the host's own
    metrics about its roles); the others' are renamed ``exported_process``.

    Returns (families, problems): a text that does not parse, or a family whose type disagrees
    with the same name from another process, is left out and named in ``problems``."""
    families: dict[str, Metric] = {}
    problems: list[str] = []
    for process, text in texts.items():
        try:
            parsed = list(text_string_to_metric_families(text))
        except (ValueError, TypeError, IndexError) as exc:
            problems.append(f"{process}: unparsable exposition ({exc!r})")
            continue
        for fam in parsed:
            merged = families.get(fam.name)
            if merged is None:
                merged = families[fam.name] = Metric(
                    fam.name, fam.documentation, fam.type, fam.unit
                )
            elif merged.type != fam.type:
                problems.append(f"{process}: {fam.name} is a {fam.type}, elsewhere a {merged.type}")
                continue
            honored = process in honor
            merged.samples.extend(_relabel(s, process, honored) for s in fam.samples)
    return list(families.values()), problems


class MergedCollector:
    """Yields the families of the last merge (set by the host's /metrics before it renders)."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> Iterator[Metric]:
        yield from self.families
