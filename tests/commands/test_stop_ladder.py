"""commands/foreground.py's Ctrl-C ladder, one helper for the node and the host: the first
press stops in order, the second hurries, the third leaves without cleanup."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from monotape.commands import foreground
from tests.conftest import until


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_each_press_climbs_one_rung(
    sig: signal.Signals, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rungs: list[str] = []
    monkeypatch.setattr(os, "_exit", lambda code: rungs.append(f"exit {code}"))

    async def presses() -> None:
        foreground._stop_ladder(
            lambda s: rungs.append(f"stop {s.name}"), "hurrying", lambda: rungs.append("hurry")
        )
        for n in (1, 2, 3):
            os.kill(os.getpid(), sig)
            await until(lambda n=n: len(rungs) == n, f"press {n}")  # type: ignore[misc]

    asyncio.run(presses())  # closing the loop removes its handlers: pytest's SIGINT is back
    assert rungs == [f"stop {sig.name}", "hurry", "exit 130"]
    out = capsys.readouterr().out
    assert out.splitlines() == ["hurrying", "stopped without cleanup"]
    assert signal.getsignal(signal.SIGINT) is not None
