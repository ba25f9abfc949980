"""The glass report, Sans-I/O: what this terminal's guard dropped, for the node to count.

The node counts what it drops; only the terminal can count what the terminal had to drop: a
record at or below the version on screen (a regression: a server bug, it must stay 0) or a
delta on a base it does not hold (a gap). A terminal that drops a regression is an incident the
node cannot see, so every ``REPORT_EVERY_S`` while connected the terminal sends ``report``
(docs/wire.md): its regression and gap counts, CUMULATIVE since the connection opened, and the
last offending record (the last regression if there was one on this connection, else the last
gap). Only when a count changed since the report the node last accepted: a healthy terminal
sends nothing, ever. Nothing is sent on close (the node caps and rate-limits reports, and a
report racing a close would only be refused).

``upkeep.py`` is the driver: it wakes every ``REPORT_EVERY_S``, asks ``due`` and sends what it
answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from monotape.platform.sdk.view import Offence, ViewStats
from monotape.platform.wire.requests import Report

__all__ = ["REPORT_EVERY_S", "GlassReport"]

# Twice the node's floor between accepted reports (5 s; sooner is RATE_LIMITED): a report is
# never refused for coming too soon, even when one is delayed.
REPORT_EVERY_S: Final = 10.0


class GlassReport:
    """The glass report of one connection: its baseline (the view's counts when it opened, as
    the view's counters span connections) and the counts the node last accepted."""

    def __init__(self, stats: ViewStats) -> None:
        self._base = (stats.regressions, stats.gaps)
        self.accepted_counts = (0, 0)  # (regressions, gaps) of the last report the node took
        self.stopped = False  # the node does not take reports (an older node): send no more

    def counts(self, stats: ViewStats) -> tuple[int, int]:
        """(regressions, gaps) since this connection opened."""
        return (stats.regressions - self._base[0], stats.gaps - self._base[1])

    def due(
        self,
        stats: ViewStats,
        last_regression: Offence | None,
        last_gap: Offence | None,
        next_req: Callable[[], int],
    ) -> Report | None:
        """The report to send now, or None when no count changed since the node last accepted
        one (or the node does not take reports). ``next_req`` numbers it."""
        regressions, gaps = self.counts(stats)
        if self.stopped or (regressions, gaps) == self.accepted_counts:
            return None
        # Counts on this connection only grow when an offence happens on it, so an offence
        # named here is this connection's.
        last = last_regression if regressions > 0 else last_gap if gaps > 0 else None
        detail = None
        if last is not None:
            detail = (last.key, last.held[0], last.held[1], last.got[0], last.got[1])
        return Report(req=next_req(), regressions=regressions, gaps=gaps, last=detail)

    def accepted(self, report: Report) -> None:
        """The node took ``report``: the next one is due only when a count moves past it."""
        self.accepted_counts = (report.regressions, report.gaps)

    def unsupported(self) -> None:
        """The node answered INVALID_REQUEST: it does not know ``report``; stop asking."""
        self.stopped = True
