"""commands/foreground.py's Ctrl-C ladder, one helper for the node and the host: the first
press stops in order, the second hurries, the third leaves without cleanup; a signal within
PRESS_WINDOW_S of the press before it is that press again."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from collections.abc import Callable

import pytest

from monotape.commands import foreground
from tests.conftest import until


def _seconds_apart() -> Callable[[], float]:
    """A clock a second later at each read: every signal is a press of its own."""
    return itertools.count(0.0, 1.0).__next__


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_each_press_climbs_one_rung(
    sig: signal.Signals, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rungs: list[str] = []
    monkeypatch.setattr(os, "_exit", lambda code: rungs.append(f"exit {code}"))

    async def presses() -> None:
        foreground._stop_ladder(
            lambda s: rungs.append(f"stop {s.name}"),
            "hurrying",
            lambda: rungs.append("hurry"),
            _seconds_apart(),
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
        foreground._stop_ladder(first, "hurrying", lambda: rungs.append("hurry"), _seconds_apart())
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


@pytest.mark.parametrize(
    ("apart_s", "second"),
    [(0.001, None), (0.5, 2)],
    ids=["1 ms apart: timeout's copy of the tty's SIGINT", "0.5 s apart: pressed again"],
)
def test_a_signal_within_the_window_is_the_same_press(apart_s: float, second: int | None) -> None:
    presses = foreground.Presses()
    assert presses.press(10.0) == 1  # the ordered stop
    assert presses.press(10.0 + apart_s) == second  # 2: kill everything now


def test_a_copy_of_the_second_press_is_not_a_third() -> None:
    presses = foreground.Presses()
    assert [presses.press(t) for t in (0.0, 0.5, 0.501, 0.7)] == [1, 2, None, 3]
    assert presses.count == 3  # 3: leave without cleanup only when pressed a third time


def test_two_signals_at_once_stop_in_order_without_hurrying(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two SIGINTs back to back (GNU timeout forwarding the tty's): one ordered stop; a press
    after the window hurries. Real signals on the monotonic clock slowed SLOW times, so the
    window is SLOW x 0.1 s of real time: a busy box that deschedules the loop between the two
    handlers for less than that cannot split them."""
    rungs: list[str] = []
    monkeypatch.setattr(os, "_exit", lambda code: rungs.append(f"exit {code}"))
    slow = 10.0
    window_s = foreground.PRESS_WINDOW_S * slow

    async def presses() -> None:
        foreground._stop_ladder(
            lambda s: rungs.append(f"stop {s.name}"),
            "hurrying",
            lambda: rungs.append("hurry"),
            lambda: time.monotonic() / slow,
        )
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        await until(lambda: rungs, "the first press")
        await asyncio.sleep(window_s / 2)  # the copy had every chance to land
        assert rungs == ["stop SIGINT"]
        await asyncio.sleep(window_s)
        os.kill(os.getpid(), signal.SIGINT)
        await until(lambda: len(rungs) == 2, "the second press")

    asyncio.run(presses())
    assert rungs == ["stop SIGINT", "hurry"]
    assert capsys.readouterr().out.splitlines() == ["hurrying"]
