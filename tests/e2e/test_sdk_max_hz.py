"""The SDK's ``max_hz`` against the real node: a ``max_hz=5`` terminal and a 25 Hz one on the
same symbols. The 5 Hz one renders frames numbered only by multiples of 5 (exactly the 25 Hz
one's boundaries with frame_no % 5 == 0), never a gap (no delta against a version it skipped),
and what it holds after each of its frames is never older than what the 25 Hz one holds after
the same frame. Every quote names its frame number (``Quote.frame_no``): frames are counted,
never timed. ``monotape tape --max-hz 5`` streams too."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from monotape.platform.sdk.client import Quote, TerminalClient
from monotape.platform.sdk.view import Source
from tests.conftest import ROOT, RunningServer, ServerFactory, until

pytestmark = [pytest.mark.e2e]

Version = tuple[int, int]


class Glass:
    """What one terminal rendered, and what it held after each FRAME, by frame number."""

    def __init__(self) -> None:
        self.held: dict[str, Version] = {}
        self.after: dict[int, dict[str, Version]] = {}  # frame_no -> held after that frame
        self.frame_nos: list[int] = []  # of every rendered FRAME quote, in render order

    def __call__(self, q: Quote) -> None:
        self.held[q.key] = q.version
        if q.source is Source.FRAME:
            assert q.frame_no is not None
            self.frame_nos.append(q.frame_no)
            self.after[q.frame_no] = dict(self.held)


async def terminal(server: RunningServer, glass: Glass, max_hz: float) -> TerminalClient:
    c = TerminalClient(server.bare_url, max_hz=max_hz, on_render=glass)
    auth = {"Authorization": f"Bearer {server.token}"}
    await asyncio.wait_for(c.connect(additional_headers=auth), 20)
    return c


async def test_a_5_hz_terminal_sees_every_fifth_frame_never_older(
    server_factory: ServerFactory,
) -> None:
    server = server_factory.start("--rate", "20000")
    fast_glass, slow_glass = Glass(), Glass()
    fast = await terminal(server, fast_glass, 25)
    slow = await terminal(server, slow_glass, 5)  # its rate goes before its subscription
    assert fast.hello is not None
    keys = [i.key for i in fast.hello.instruments[:120]]  # busy: every frame moves some
    await fast.subscribe(keys)
    await slow.subscribe(keys)
    await until(lambda: len(fast_glass.after) >= 110, "~110 frames at 25 Hz", timeout_s=60)
    await until(lambda: len(slow_glass.after) >= 12, "a dozen frames at 5 Hz", timeout_s=60)
    await slow.close()
    await fast.close()

    got = sorted(slow_glass.after)
    assert slow_glass.frame_nos == sorted(slow_glass.frame_nos)  # in order, as sent
    assert all(f % 5 == 0 for f in got), f"off-boundary frames: {[f for f in got if f % 5]}"
    # exactly the 25 Hz terminal's boundaries with frame_no % 5 == 0, over the span both saw
    lo, hi = got[0], min(got[-1], max(fast_glass.after))
    expected = [f for f in sorted(fast_glass.after) if lo <= f <= hi and f % 5 == 0]
    assert [f for f in got if f <= hi] == expected
    assert len(expected) >= 10
    # never older than the 25 Hz terminal at the same boundary
    for f in expected:
        slow_held, fast_held = slow_glass.after[f], fast_glass.after[f]
        for key, version in fast_held.items():
            assert slow_held.get(key, (0, 0)) >= version, (f, key, slow_held.get(key), version)
    # the latest version, deltas only on the base it holds: never a gap, never backwards
    assert slow.stats.gaps == 0 and slow.stats.regressions == 0
    assert fast.stats.regressions == 0
    assert slow.stats.rate_refused == 0 and fast.stats.frames > 3 * slow.stats.frames


def test_the_tape_at_5_hz(server_factory: ServerFactory) -> None:
    server = server_factory.start("--rate", "20000")
    flags = ["--data-dir", str(server.data_dir), "--max-hz", "5", "--refresh", "--count", "5"]
    out = subprocess.run(
        [sys.executable, "-m", "monotape", "tape", "--url", server.bare_url, *flags, "XNAS:AAPL"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:2] == ["time", "symbol"] and len(lines) == 6
    assert all("XNAS:AAPL" in line for line in lines[1:])
