"""Stage histograms through the real server: a value for every tick at every stage, rotated
into interval logs that `monotape hdr report` merges exactly."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from monotape import metric_names as m
from monotape.histograms import STAGES
from monotape.platform.feeds.replay import expected_outcome, load_replay
from monotape.platform.sdk.client import TerminalClient
from tests.conftest import ServerFactory

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
REPLAY = ROOT / "tests" / "replays" / "adversarial.ndjson"


def report(data_dir: Path, stage: str) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-m", "monotape", "hdr", "report", "--stage", stage, "--last", "1h",
         "--data-dir", str(data_dir), "--json"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    result: dict[str, int] = json.loads(out.stdout)
    return result


async def test_every_tick_is_measured_at_every_stage(server_factory: ServerFactory) -> None:
    _, lines = load_replay(REPLAY)
    applied = sum(a for a, _, _ in expected_outcome(lines).values())
    server = server_factory.start(
        "--replay", str(REPLAY), "--replay-start-delay", "1",
        env={"MONOTAPE_SERVER__HDR_INTERVAL_S": "1"},
    )  # fmt: skip
    client = TerminalClient(server.url)
    hello = await client.connect()
    await client.subscribe([i.key for i in hello.instruments])
    await asyncio.sleep(4.0)  # the ~0.5 s file, then at least two 1 s rotations
    metrics = server.metrics()
    await client.close()
    assert server.stop() == 0  # the stop writes the last partial interval too

    files = list((server.data_dir / "hdr").glob("*.hlog"))
    assert files, "no interval log written"
    assert sum(1 for _ in files[0].open() if "Tag=stage=sequence" in _) >= 3, "no rotations"

    counts = {stage: report(server.data_dir, stage)["count"] for stage in STAGES}
    assert counts["decode"] == len(lines)  # every tick a handler delivered
    assert counts["sequence"] == applied  # every tick admitted
    assert counts["conflate"] == applied  # every admitted tick reached a frame
    assert counts["encode"] == applied
    # One write per frame per connection; this terminal got at least one frame.
    assert counts["write"] >= 1

    stages_seen = {dict(labels)["stage"] for (name, labels) in metrics if name == m.STAGE_LATENCY}
    assert set(STAGES) <= stages_seen
    for (name, _), value in metrics.items():
        if name == m.STAGE_LATENCY:
            assert 0 <= value < 60


def test_report_flags_are_checked() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "monotape", "hdr", "report", "--stage", "write", "--last", "x"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 2 and "--last" in out.stderr
