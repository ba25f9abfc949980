"""What the admin API reads and does of a running node: ``AdminView``, a narrow protocol.

The admin app is built from an ``AdminView`` (the ``Node`` is one), never from the node class
itself: the admin routes depend on the few questions they ask, not on the composition root that
answers them, so a test builds the app against a small fake and nothing imports its way back up.
Pure state of the rooms below (the subscription index, the GC and invariant monitors, the
dashboards' sample ring) is named by its own type; what lives in the server, the sequencer and
the feed handlers is named by the members the routes read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from monotape.clock import Clock
from monotape.dashboards.sampler import SampleRing
from monotape.histograms.gc import GcMonitor
from monotape.invariants import InvariantMonitor
from monotape.platform.auth import TokenVerifier
from monotape.platform.core.fanout import SubscriptionIndex
from monotape.platform.core.glass import GlassLedger
from monotape.platform.core.outbox import Outbox
from monotape.platform.model import Instrument, Tick

__all__ = [
    "AdminView",
    "ConnectionView",
    "DrainView",
    "EpochView",
    "FeedView",
    "LoopLagView",
    "QuoteBook",
    "StatsView",
    "TerminalTable",
]


class ConnectionView(Protocol):
    """One terminal connection, as ``GET /admin/connections`` lists it."""

    @property
    def conn_id(self) -> int: ...
    @property
    def peer(self) -> str: ...
    @property
    def opened_ns(self) -> int: ...
    @property
    def outbox(self) -> Outbox: ...
    @property
    def frames_sent(self) -> int: ...
    @property
    def bytes_sent(self) -> int: ...


class DrainView(Protocol):
    @property
    def done(self) -> bool: ...


class StatsView(Protocol):
    @property
    def disconnects(self) -> Mapping[str, int]: ...


class TerminalTable(Protocol):
    """The fan-out server's side: its connections, index, drain and the symbol table."""

    @property
    def connections(self) -> Mapping[int, ConnectionView]: ...
    @property
    def index(self) -> SubscriptionIndex: ...
    @property
    def stats(self) -> StatsView: ...
    @property
    def drain(self) -> DrainView | None: ...

    @property
    def glass(self) -> GlassLedger: ...

    def drain_status(self) -> dict[str, Any]: ...
    def start_drain(self) -> bool: ...
    def resume(self) -> bool: ...
    def iid_of(self, key: str) -> int | None: ...


class QuoteBook(Protocol):
    """The sequencer's answer for one symbol: its current tick and what the last frame showed."""

    def current(self, iid: int) -> Tick | None: ...
    def published(self, iid: int) -> Tick | None: ...


class EpochView(Protocol):
    @property
    def epoch(self) -> int: ...
    @property
    def fence_ts_ns(self) -> int: ...


class FeedView(Protocol):
    """One feed handler, as ``GET /admin/feeds`` and ``/readyz`` read it."""

    @property
    def venue(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def up(self) -> bool: ...
    @property
    def lag_ns(self) -> int: ...
    @property
    def delivered(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    @property
    def backwards(self) -> int: ...
    @property
    def records(self) -> Sequence[EpochView]: ...


class LoopLagView(Protocol):
    def snapshot(self) -> dict[str, Any]: ...


class AdminView(Protocol):
    """Everything ``build_admin_app`` needs; ``Node`` provides it."""

    @property
    def ready(self) -> bool:
        """Listening and started (``/readyz`` answers 503 until then)."""
        ...

    @property
    def verifier(self) -> TokenVerifier | None:
        """None: auth is off, and the /admin routes fail closed (403)."""
        ...

    @property
    def registry(self) -> CollectorRegistry: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def universe(self) -> Sequence[Instrument]: ...
    @property
    def handlers(self) -> Sequence[FeedView]: ...
    @property
    def source(self) -> str:
        """Where ticks come from: ``"simulator"`` or ``"replay"``."""
        ...

    @property
    def fault_injection(self) -> bool: ...
    @property
    def server(self) -> TerminalTable: ...
    @property
    def sequencer(self) -> QuoteBook: ...
    @property
    def invariants(self) -> InvariantMonitor: ...
    @property
    def gc_monitor(self) -> GcMonitor: ...
    @property
    def loop_lag(self) -> LoopLagView: ...
    @property
    def hdr_dir(self) -> Path:
        """Where the interval logs are written (``<data-dir>/hdr``)."""
        ...

    @property
    def dashboard_ring(self) -> SampleRing: ...
