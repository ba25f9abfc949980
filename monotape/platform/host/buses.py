"""The tick bus a role of the host talks on, built one way for every role (issue 12): the host's
IPC bus (``bus/ipc.py``, ``run_dir/bus.sock``: the sequencer binds it, handlers and a replaying
venue connect) or NATS when ``cfg.bus == "nats"`` (``--nats``), named after the process so a
NATS monitor tells the host's clients apart."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable

from monotape.config import Config
from monotape.platform.bus.ipc import IpcTickBus, bus_path
from monotape.platform.bus.nats_bus import NatsTickBus
from monotape.platform.feeds.validate import TickGate
from monotape.platform.model import Instrument

__all__ = ["role_bus"]


def role_bus(
    cfg: Config,
    run_dir: str,
    name: str,
    universe: Iterable[Instrument],
    now_ns: Callable[[], int],
    *,
    gate: TickGate | None = None,
) -> IpcTickBus | NatsTickBus:
    """Not connected or bound yet: the role does that in its own start order. ``universe``
    names the NATS subjects (venue.symbol); ``gate``: the receiving end's (the sequencer's)."""
    if cfg.bus == "nats":
        return NatsTickBus(
            scheme=cfg.nats.subjects,
            symbols={i.iid: i.symbol for i in universe},
            max_pending_batches=cfg.nats.max_pending_batches,
            name=f"monotape-{socket.gethostname()}-{name}-{os.getpid()}",
            gate=gate,
        )
    return IpcTickBus(bus_path(run_dir), now_ns, gate=gate)
