"""A writer process runs the GC policy (issue #12 item 5): its ``server.gc_*`` config reaches the
policy, its upkeep loop is among the loops it supervises, and terminals it accepts are frozen in
batches while connections keep opening (no settle needed). Built without a host: a real shm ring,
the writer role's own objects, its server on a port the kernel picks."""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect

from monotape.platform.core.gc_policy import FreezeAction
from monotape.platform.host.spec import RoleSpec
from monotape.platform.host.writer import WriterRole
from monotape.platform.ring import RingConfig, ShmRing
from tests.conftest import node_config
from tests.ring.conftest import unique_tag

RING = RingConfig(total_bytes=16 * 1024 * 1024)


async def test_a_writer_freezes_its_terminals_while_they_keep_opening(tmp_path: Path) -> None:
    cfg = node_config(
        tmp_path,
        {
            "server.gc_refreeze_settle_s": 3600.0,  # never settles: only the batch can freeze
            "server.gc_refreeze_opened": 20,
            "server.gc_refreeze_every_s": 3600.0,
            "server.gc_min_lifetime_s": 60.0,
        },
    )
    ring = ShmRing.create(RING, tag=unique_tag())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = RoleSpec(
        role="writer",
        index=0,
        run_dir=str(run_dir),
        ring=ring.name,
        writers=1,
        host_pid=os.getpid(),
    )
    role = WriterRole(spec, cfg)
    clients: list[ClientConnection] = []
    try:
        policy = role.gc_upkeep.policy
        assert (policy.refreeze_opened, policy.refreeze_every_s, policy.min_lifetime_s) == (
            20,
            3600.0,
            60.0,
        )
        assert role.gc_upkeep.run in role._loops()
        port = await role.server.start()
        role.gc_monitor.install()
        role.gc_monitor.freeze_after_warmup()  # as WriterRole.run does, then...
        role.gc_upkeep.start()
        frozen0 = gc.get_freeze_count()
        url = f"ws://127.0.0.1:{port}/"
        for _ in range(19):
            clients.append(await connect(url, compression=None))
        assert role.gc_upkeep.step() is FreezeAction.NONE  # 19 opened: below the batch
        for _ in range(3):
            clients.append(await connect(url, compression=None))
        for _ in range(100):  # the server counts an open once the handshake is done
            if role.gc_upkeep.opened_closed()[0] >= 22:
                break
            await asyncio.sleep(0.05)
        assert role.gc_upkeep.step() is FreezeAction.FREEZE
        assert role.gc_monitor.freezes == 1
        assert gc.get_freeze_count() > frozen0 + 20 * 20  # ~100 tracked objects a terminal
        assert role.gc_monitor.frozen_now >= gc.get_freeze_count() - 1_000
    finally:
        for c in clients:
            await c.close()
        await role.server.stop()
        role.gc_monitor.uninstall()
        role.reader.close()
        ring.close()
        gc.unfreeze()
