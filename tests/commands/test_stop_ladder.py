"""commands/foreground.py's Ctrl-C ladder, one helper for the node and the host: the first
press stops in order, the second hurries, the third leaves without cleanup."""

from __future__ import annotations

import asyncio
import contextlib
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


def test_a_console_that_is_gone_does_not_stop_the_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """stdout a pipe nobody reads (the launcher died, ``| head`` ended): every rung still runs.
    A BrokenPipeError from the first rung's line left a SIGTERMed node running."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    broken = os.fdopen(write_end, "w")
    monkeypatch.setattr("sys.stdout", broken)
    rungs: list[str] = []
    monkeypatch.setattr(os, "_exit", lambda code: rungs.append(f"exit {code}"))

    def first(sig: signal.Signals) -> None:
        foreground._say(f"stopping ({sig.name})")  # what the node's and the host's first say
        rungs.append("stop")

    async def presses() -> None:
        foreground._stop_ladder(first, "hurrying", lambda: rungs.append("hurry"))
        for n in (1, 2, 3):
            os.kill(os.getpid(), signal.SIGTERM)
            await until(lambda n=n: len(rungs) == n, f"press {n}")  # type: ignore[misc]

    try:
        asyncio.run(presses())
    finally:
        monkeypatch.undo()
        with contextlib.suppress(OSError):
            broken.close()
    assert rungs == ["stop", "hurry", "exit 130"]
