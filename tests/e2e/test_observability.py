"""Observability end to end: `monotape run` for ~15-25 s with a terminal on it.

Every stage is in /admin/latency, every contract metric in /metrics (parsed by Prometheus' own
parser), interval files appear every 10 s, a provoked gen-2 collection shows in /admin/gc, in the
right interval of the timeline and as a band in the SVG, and the interval logs add up exactly to
the node's own accounting.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from monotape import metric_names as m
from monotape.histograms import STAGES
from monotape.platform.sdk.client import TerminalClient
from tests.conftest import RunningServer, ServerFactory, mint, until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

CONTRACT = [
    m.SEQUENCE_REGRESSIONS, m.DUPLICATE_TICKS, m.TICKS_ADMITTED, m.STAGE_LATENCY, m.GC_PAUSE,
    m.INVARIANT_VIOLATION, m.CONNECTIONS, m.FRAMES_SENT, m.BYTES_SENT, m.FRAME_PAYLOADS,
    m.SLOW_CONSUMER_DROPS, m.GAP_SNAPSHOTS, m.ADMISSION_REJECTED, m.AUTH_CACHE_HITS,
    m.AUTH_CACHE_MISSES, m.FEED_HANDLER_UP, m.EVENT_LOOP_LAG,
]  # fmt: skip


def get(server: RunningServer, path: str, token: str) -> str:
    return server.http(path, token)


def report_count(data_dir: Path, stage: str) -> int:
    out = subprocess.run(
        [sys.executable, "-m", "monotape", "hdr", "report", "--stage", stage, "--last", "1h",
         "--data-dir", str(data_dir), "--json"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    count: int = json.loads(out.stdout)["count"]
    return count


async def test_observability_end_to_end(server_factory: ServerFactory) -> None:
    server = server_factory.start("--rate", "5000")
    admin = mint(server.data_dir, admin=True)
    client = TerminalClient(server.url)
    hello = await client.connect()
    await client.subscribe([i.key for i in hello.instruments[:60]])
    await client.set_priority([i.key for i in hello.instruments[:4]])  # an order ticket

    await asyncio.sleep(3)
    provoked = server.post("/admin/gc/collect", admin)
    assert provoked["pauses"], "a full collection left no gen-2 pause in the monitor"
    pause = provoked["pauses"][-1]

    def interval_starts() -> set[str]:
        files = (server.data_dir / "hdr").glob("*.hlog")  # one per process per hour
        # interval lines: "Tag=stage=...;proc=...;host=...,<start s>,<length s>,<max>,<histogram>"
        return {
            line.split(",")[1]
            for f in files
            for line in f.read_text().splitlines()
            if line.startswith("Tag=")
        }

    def holding() -> list[dict[str, Any]]:
        """The timeline's intervals holding the provoked pause (once its interval closed)."""
        timeline = json.loads(get(server, "/admin/latency/timeline?window=5m", admin))
        return [
            row
            for row in timeline["intervals"]
            if row["start_ms"] <= pause["start_ms"] < row["end_ms"]
            and any(p["generation"] == 2 for p in row["gc_pauses"])
        ]

    # Two 10 s rotations (on the wall clock's grid), the pause's interval among them: waited
    # for, not slept (a busy machine writes them late; a quiet one within ~10-20 s).
    await until(lambda: len(interval_starts()) >= 2 and holding(), "two intervals, the pause's", 90)
    assert len(interval_starts()) >= 2, "interval files did not grow every 10 s"

    for stage in STAGES:
        body = json.loads(get(server, f"/admin/latency?stage={stage}&window=1m", admin))
        assert body["stage"] == stage and body["count"] > 0, body

    assert len(holding()) == 1, "the provoked pause is not in its interval of the timeline"
    gc_view = json.loads(get(server, "/admin/gc", admin))
    assert gc_view["gc"]["generations"]["2"]["collections"] >= 1
    svg = get(server, "/admin/plots/latency.svg?window=5m", admin)
    assert 'class="gc-pause"' in svg and "gen 2" in svg

    families = server.metric_families()
    for name in CONTRACT:
        base = name.removesuffix("_total")
        assert name in families or base in families, f"{name} missing from /metrics"
    stage_rows = [s for s in families[m.STAGE_LATENCY].samples]
    assert {s.labels["stage"] for s in stage_rows} >= {*STAGES, "priority"}
    assert {s.labels["quantile"] for s in stage_rows} == {"0.5", "0.99", "0.999", "1"}

    await client.close()
    assert server.stop() == 0  # SIGINT (the launcher's stop) writes the last partial interval too
    stopped = next(json.loads(line) for line in server.output if '"event": "stopped"' in line)
    # The interval logs add up exactly to what the node counted.
    assert report_count(server.data_dir, "decode") == stopped["ticks_decoded"]
    assert report_count(server.data_dir, "sequence") == stopped["ticks_admitted"]
    assert report_count(server.data_dir, "conflate") == stopped["ticks_framed"]
    assert report_count(server.data_dir, "encode") == stopped["ticks_framed"]
    assert report_count(server.data_dir, "write") == stopped["frame_writes"]
    assert report_count(server.data_dir, "priority") == stopped["priority_writes"] > 0
    assert stopped["ticks_framed"] <= stopped["ticks_admitted"]
    assert re.search(r"gc_frozen", "".join(server.output))
