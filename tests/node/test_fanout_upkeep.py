"""The fan-out's upkeep: which loops a config runs (the node's and a writer's alike), every one
of them restartable by the supervisor, and the heartbeat reaching the server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from monotape.platform.node.node import Node
from tests.conftest import node_config


def _names(loops: list[object]) -> set[str]:
    return {getattr(loop, "__qualname__", "") for loop in loops}


def test_the_config_decides_which_loops_run(tmp_path: Path) -> None:
    bare = Node(
        node_config(
            tmp_path / "bare",
            {
                "server.glass_share": 0,
                "server.keepalive_interval_s": 0,
                "server.gc_refreeze": False,
            },
        )
    )
    assert _names(list(bare.upkeep.loops())) == {
        "FanoutUpkeep.heartbeat_loop",
        "InvariantMonitor.run_forever",
        "StaleNotices.run",
    }
    full = Node(
        node_config(
            tmp_path / "full",
            {
                "server.glass_share": 0.01,
                "server.keepalive_interval_s": 5,
                "server.gc_freeze": True,
                "server.gc_refreeze": True,
            },
        )
    )
    loops = full.upkeep.loops()
    assert len(loops) == 6
    assert _names(list(loops)) <= _names(list(full.upkeep.restartable()))
    assert _names(list(loops)) <= set(full._restartable())  # the node restarts each by name


async def test_the_heartbeat_loop_publishes_the_wall_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(node_config(tmp_path, {"server.heartbeat_s": 0.01}))
    beats: list[int] = []
    monkeypatch.setattr(node.server, "publish_heartbeat", beats.append)
    task = asyncio.ensure_future(node.upkeep.heartbeat_loop())
    try:
        while len(beats) < 2:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert all(b > 0 for b in beats)
