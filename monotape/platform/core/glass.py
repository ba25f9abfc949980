"""The glass audit: what terminals' own guards dropped, as they report it (``report`` requests).

The server counts what it dropped; only a terminal can count what reached it and had to be
dropped: a record at or below the version it held (a regression: the promise that a price never
goes backwards broke upstream of the glass) or a delta on a base it does not hold (a gap). Each
terminal reports cumulative counts (docs/wire.md, report); its session (core/session.py) turns
them into increases, capped per connection, and adds them here. One hostile terminal can add at
most ``REPORT_CAP`` of each and one terminal to ``terminals``, which is what the alert counts
(alerts/rules.py, GlassRegressions: distinct terminals, so one terminal cannot page).

Values only: plain ints read at scrape time (role/collectors.py) and the last offender, served
at ``GET /admin/glass``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = ["REPORT_CAP", "REPORT_INTERVAL_NS", "GlassLedger", "GlassOffender"]

REPORT_CAP: Final = 100  # regressions (and gaps) counted per connection, over its lifetime
REPORT_INTERVAL_NS: Final = 5 * 1_000_000_000  # a report sooner than this: RATE_LIMITED


@dataclass(frozen=True, slots=True)
class GlassOffender:
    """The last terminal that reported a regression, and what it dropped (if it said)."""

    conn_id: int
    subject: str | None  # the token's ``sub``; None on a node without auth
    key: str | None
    held: tuple[int, int] | None  # (epoch, seq) the terminal held
    got: tuple[int, int] | None  # (epoch, seq) that came and was dropped
    regressions: int  # the connection's cumulative count in that report
    wall_s: float  # when the report arrived (wall clock, s)

    def as_dict(self) -> dict[str, Any]:
        return {
            "conn_id": self.conn_id,
            "subject": self.subject,
            "key": self.key,
            "held": list(self.held) if self.held is not None else None,
            "got": list(self.got) if self.got is not None else None,
            "regressions": self.regressions,
            "wall_s": self.wall_s,
        }


class GlassLedger:
    """The node's totals of what terminals reported (one per server, shared by its sessions)."""

    __slots__ = ("gaps", "last", "regressions", "reports", "terminals")

    def __init__(self) -> None:
        self.regressions = 0  # monotape_glass_regressions_total
        self.gaps = 0  # monotape_glass_gaps_total
        self.terminals = 0  # monotape_glass_regressing_terminals_total: distinct connections
        self.reports = 0  # reports accepted (rate limited ones are not)
        self.last: GlassOffender | None = None

    def status(self) -> dict[str, Any]:
        """What ``GET /admin/glass`` shows."""
        return {
            "regressions": self.regressions,
            "gaps": self.gaps,
            "regressing_terminals": self.terminals,
            "reports": self.reports,
            "last": self.last.as_dict() if self.last is not None else None,
        }
