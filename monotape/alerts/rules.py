"""The alert rules, built in code from the metric names the node exports.

Every expression is written against ``metric_names`` constants, so a renamed metric breaks the
build here (and the test that regenerates the checked-in rule file), never silently a page at
03:00. Each rule carries a *signal*: the expression its threshold is applied to, which the
end-to-end test asks a real Prometheus for (it must return data while the node is healthy), and
a ``runbook_url`` pointing at its own section of docs/runbooks.md.

Thresholds are named constants with the figure they come from; ``for`` durations are chosen so
that the designed bursts (a reconnect storm of 1-2 s, a chaos restart of 0.5 s, one reclaim
pause per 10,000 closes) never page.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from monotape import metric_names as m
from monotape.histograms import STAGE_DURATION_BUCKETS_S
from monotape.histograms.gc import GC_PAUSE_BUCKETS_S

__all__ = [
    "DEFAULT_RUNBOOK_BASE",
    "GC_PAUSE_LONG_S",
    "GROUP",
    "PEAK_TICKS_PER_VENUE_S",
    "TICK_TO_GLASS_BUDGET_S",
    "AlertRule",
    "Severity",
    "alert_rules",
]

GROUP: Final = "monotape"
# The checked-in file links into the repository's own docs; `monotape alerts build
# --runbook-base https://.../docs/runbooks.md` points the links at wherever the desk hosts them.
DEFAULT_RUNBOOK_BASE: Final = "docs/runbooks.md"

# Tick to glass p99 <= 80 ms over a WAN is the desk's budget; the server-side part alone above
# it leaves nothing for the network. A bucket bound, so the alert reads exactly "more than 1% of
# ticks took longer than 80 ms".
TICK_TO_GLASS_BUDGET_S: Final = 0.08
# A pause longer than 50 ms stalls more than one whole 40 ms frame.
GC_PAUSE_LONG_S: Final = 0.05
GC_PAUSES_LONG_PER_15M: Final = 3  # the designed reclaim (once per 10,000 closes) is one
# "At peak": a venue admitting this many ticks a second always has late twin copies (the seed
# desk saw ~340 regressions a minute at 120k ticks/s; the simulator at 20k/s sees hundreds a
# second per venue). Below it, a quiet venue may legitimately show none for minutes.
PEAK_TICKS_PER_VENUE_S: Final = 1_000
SLOW_CONSUMER_DROP_SHARE: Final = 0.01  # of frames written
EVENT_LOOP_LAG_S: Final = 0.02  # half a frame, on average, for minutes
# A tenth of the 40 ms grid passed over: terminals get 22.5 frames a second or fewer. One late
# frame in a second (4%) is a storm or a pause; a tenth for ten minutes is a node short of CPU.
FRAME_SKIP_SHARE: Final = 0.1
# Seconds per second a process's loop waited for a core (Linux run-queue wait). Measured on a
# two-core box: an idle host at 20k ticks/s 0.04-0.08 per process; a 2,000-terminal storm with its
# load on the same cores 0.22-0.31 for every process, hydrations 8x their CPU time at p99.
CPU_WAIT_SHARE: Final = 0.25
STAGE_END_TO_END: Final = "tick_to_write"

if TICK_TO_GLASS_BUDGET_S not in STAGE_DURATION_BUCKETS_S:  # pragma: no cover - a build error
    raise RuntimeError("the tick-to-glass budget must be a bucket bound of the stage histogram")
if GC_PAUSE_LONG_S not in GC_PAUSE_BUCKETS_S:  # pragma: no cover - a build error
    raise RuntimeError("the long-GC threshold must be a bucket bound of the GC pause histogram")


class Severity(StrEnum):
    PAGE = "page"  # wake someone: a screen may show something wrong, or nothing
    WARNING = "warning"  # in hours: degraded, redundancy gone, or heading for a page


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One Prometheus alerting rule. ``expr`` is ``signal`` with its condition; ``for_`` is a
    Prometheus duration ("0s": fire at the first evaluation that matches)."""

    name: str
    signal: str
    condition: str
    for_: str
    severity: Severity
    summary: str
    description: str

    @property
    def expr(self) -> str:
        return f"{self.signal} {self.condition}"

    @property
    def anchor(self) -> str:
        """The runbook section: a ``## <name>`` heading, GitHub's anchor for it."""
        return self.name.lower()

    def runbook_url(self, base: str = DEFAULT_RUNBOOK_BASE) -> str:
        return f"{base}#{self.anchor}"


# (summary, description) of the two STALE alerts (docs/runbooks.md, TerminalsStale, VenueStale)
_TERMINALS_STALE: Final = (
    "Terminals show stale prices on {{ $labels.instance }} for a minute",
    "Terminals have been told STALE for a minute: their frame grid stalled (the sequencer is "
    "down, restarting in a loop or hung) or a venue they watch has every feed handler down. "
    "Their screens are greyed, not wrong, but traders cannot trade on them.",
)
_VENUE_STALE: Final = (
    "A venue has every feed handler down on {{ $labels.instance }}",
    "Every feed handler of a venue is down: its symbols are greyed as stale on every screen "
    "that watches them (monotape_stale_venue names the venue). FeedStale pages too after two "
    "minutes of silence.",
)


def _le(bound: float) -> str:
    # The `le` label exactly as the node's collectors write it (repr of the float bound).
    return repr(float(bound))


def alert_rules() -> list[AlertRule]:
    """Every rule, in the order of docs/runbooks.md."""
    regressions = m.SEQUENCE_REGRESSIONS
    admitted = m.TICKS_ADMITTED
    e2e = f'{m.STAGE_DURATION}_bucket{{stage="{STAGE_END_TO_END}"}}'
    gc_count = f"{m.GC_PAUSE}_count"
    glass_terminals = m.GLASS_REGRESSING_TERMINALS
    gc_fast = f'{m.GC_PAUSE}_bucket{{le="{_le(GC_PAUSE_LONG_S)}"}}'
    skipped = f"sum by (instance) (rate({m.FRAME_BOUNDARIES_SKIPPED}[5m]))"
    taken = f"sum by (instance) (rate({m.FRAME_BOUNDARIES}[5m]))"
    return [
        AlertRule(
            name="InvariantViolated",
            signal=m.INVARIANT_VIOLATION,
            condition="> 0",
            for_="0s",  # a check compares two numbers on the loop: no transient to wait out
            severity=Severity.PAGE,
            summary="Invariant {{ $labels.invariant }} failed on {{ $labels.instance }}",
            description=(
                "The node's own bookkeeping is inconsistent: an index entry names a connection "
                "that is gone, or subscriber sets disagree with what terminals asked for. "
                "Frames may go to the wrong terminals or nowhere; left alone it grows (the seed "
                "desk's 60-hour leak doubled p99)."
            ),
        ),
        # Distinct terminals, fleet-wide, not records: a terminal's report is capped (100 per
        # connection) and counts it once, so one hostile or broken terminal cannot page anyone.
        AlertRule(
            name="GlassRegressions",
            signal=f"sum by (job) (increase({glass_terminals}[10m]))",
            condition=">= 2",
            for_="0s",
            severity=Severity.PAGE,
            summary="Two or more terminals dropped an older price within 10 minutes",
            description=(
                "Terminals' own guards dropped records at or below the version they held: the "
                "server sent something that would have moved a price backwards on a screen. The "
                "SDKs caught it; the promise was broken upstream of the glass. Must stay 0."
            ),
        ),
        AlertRule(
            name="GlassRegressionOneTerminal",
            signal=f"sum by (job) (increase({glass_terminals}[10m]))",
            condition="> 0 < 2",
            for_="0s",
            severity=Severity.WARNING,
            summary="One terminal reported dropping an older price within 10 minutes",
            description=(
                "A single terminal reported regressions: a server bug that so far reached one "
                "screen, or a broken or hostile terminal (its report is capped). GET "
                "/admin/glass names it; a second terminal pages."
            ),
        ),
        AlertRule(
            name="TickToGlassP99High",
            signal=(f"histogram_quantile(0.99, sum by (instance, le) (rate({e2e}[5m])))"),
            condition=f"> {TICK_TO_GLASS_BUDGET_S:g}",
            for_="5m",
            severity=Severity.WARNING,
            summary="Tick to write p99 above 80 ms on {{ $labels.instance }}",
            description=(
                "More than 1% of ticks took longer than 80 ms from decoding to being handed to "
                "the kernel, before any WAN: the desk's tick-to-glass budget (p99 <= 80 ms) is "
                "spent inside the node. Read per tick from the tick_to_write stage (on a host "
                "with several writers, per tick and writer that sent it), not a sum of stage "
                "p99s."
            ),
        ),
        AlertRule(
            name="GCPauseLong",
            signal=(
                f"sum by (instance) (increase({gc_count}[15m]))"
                f" - sum by (instance) (increase({gc_fast}[15m]))"
            ),
            condition=f"> {GC_PAUSES_LONG_PER_15M}",
            for_="0s",
            severity=Severity.WARNING,
            summary="Garbage-collection pauses over 50 ms keep recurring on {{ $labels.instance }}",
            description=(
                "More than three collections in 15 minutes each stopped the interpreter for "
                "longer than a 40 ms frame: every terminal's frames were late by as much. One "
                "reclaim per 10,000 closed connections is by design; a pattern is not."
            ),
        ),
        AlertRule(
            name="FeedRedundancyLost",
            signal=(
                f"count by (instance, venue) ({m.FEED_HANDLER_UP})"
                f" - sum by (instance, venue) ({m.FEED_HANDLER_UP})"
            ),
            condition="> 0",
            for_="1m",  # a chaos or supervised restart is down for ~0.5 s
            severity=Severity.WARNING,
            summary="{{ $labels.venue }} is down to one feed handler on {{ $labels.instance }}",
            description=(
                "A handler of the venue's active/active pair has been down for a minute. Prices "
                "still flow through its twin, but one more fault freezes every symbol of the "
                "venue."
            ),
        ),
        AlertRule(
            name="FeedStale",
            signal=f"sum by (instance, venue) (rate({admitted}[1m]))",
            condition="== 0",
            for_="2m",
            severity=Severity.PAGE,
            summary=(
                "No tick from {{ $labels.venue }} admitted for 2 minutes on {{ $labels.instance }}"
            ),
            description=(
                "Every symbol of the venue is frozen on every screen: both handlers are down, "
                "or up and delivering nothing new. Outside the venue's trading hours this is "
                "expected: silence it for the closed session."
            ),
        ),
        # STALE (docs/wire.md): terminals are told, so no price looks live; these say how many
        # screens are greyed and for how long. A sequencer restart greys them for 0.5-3 s.
        AlertRule(
            "TerminalsStale",
            f"sum by (instance) ({m.STALE_TERMINALS})",
            "> 0",
            "1m",
            Severity.PAGE,
            *_TERMINALS_STALE,
        ),
        # both handlers of a pair down at once (30 s): never a designed restart
        AlertRule(
            "VenueStale",
            f"max by (instance) ({m.STALE_VENUES})",
            "> 0",
            "30s",
            Severity.PAGE,
            *_VENUE_STALE,
        ),
        AlertRule(
            name="FeedBackwards",
            signal=f"sum by (instance, venue, handler) (increase({m.FEED_BACKWARDS}[5m]))",
            condition="> 0",
            for_="0s",
            severity=Severity.WARNING,
            summary=(
                "Feed handler {{ $labels.venue }}/{{ $labels.handler }} delivered updates older "
                "than its own"
            ),
            description=(
                "The handler's own stream went backwards: a venue replay, re-issued sequence "
                "numbers, or a handler restarted below its own epoch. The sequencer's guard "
                "keeps them off the screens, but the handler is not trustworthy."
            ),
        ),
        AlertRule(
            name="RegressionsStoppedAtPeak",
            signal=f"sum by (instance, venue) (rate({regressions}[10m]))",
            condition=(
                f"== 0 and on (instance, venue) "
                f"sum by (instance, venue) (rate({admitted}[10m])) > {PEAK_TICKS_PER_VENUE_S}"
            ),
            for_="5m",
            severity=Severity.WARNING,
            summary=(
                "The guard stopped discarding late copies for {{ $labels.venue }} while ticks "
                "flow ({{ $labels.instance }})"
            ),
            description=(
                "Sequence regressions are the guard's normal work: the lagging twin's copies of "
                "updates already superseded. Their rate falling to zero while the venue is busy "
                "means there is no lagging twin any more: one handler of the pair is gone or "
                "silent, even if it still reports up."
            ),
        ),
        AlertRule(
            name="AdmissionRejectingSustained",
            signal=(f'sum by (instance) (rate({m.ADMISSION_REJECTED}{{reason!="draining"}}[1m]))'),
            condition="> 0",
            for_="5m",
            severity=Severity.WARNING,
            summary="Upgrades refused with 503 for 5 minutes on {{ $labels.instance }}",
            description=(
                "The node has been shedding terminal connections (token bucket or event-loop "
                "lag) for 5 minutes. A storm at the open lasts seconds; this is a host short "
                "of capacity or a client reconnecting in a loop."
            ),
        ),
        AlertRule(
            name="SlowConsumerDropsHigh",
            signal=(
                f"sum by (instance) (rate({m.SLOW_CONSUMER_DROPS}[5m]))"
                f" / clamp_min(sum by (instance) (rate({m.FRAMES_SENT}[5m])), 1)"
            ),
            condition=f"> {SLOW_CONSUMER_DROP_SHARE:g}",
            for_="10m",
            severity=Severity.WARNING,
            summary="More than 1% of frames dropped for slow terminals on {{ $labels.instance }}",
            description=(
                "Terminals are not reading fast enough: their bounded rings drop the oldest "
                "frames and they get snapshots instead (a lower refresh rate, never a wrong "
                "price). Sustained, it is the network or the terminals' hosts, or the node "
                "writing too slowly."
            ),
        ),
        AlertRule(
            name="EventLoopLagHigh",
            signal=f"avg_over_time({m.EVENT_LOOP_LAG}[2m])",
            condition=f"> {EVENT_LOOP_LAG_S:g}",
            for_="5m",
            severity=Severity.WARNING,
            summary="Event loop late by 20 ms on average on {{ $labels.instance }}",
            description=(
                "Every frame boundary, write and upgrade of the node waits this long: the "
                "loop is saturated (CPU), blocked (a synchronous call) or paused (GC). The "
                "node sheds upgrades at 100 ms of lag."
            ),
        ),
        AlertRule(
            name="CpuStarved",
            signal=f"max by (instance, process) (rate({m.CPU_WAIT}[5m]))",
            condition=f"> {CPU_WAIT_SHARE:g}",
            for_="10m",
            severity=Severity.WARNING,
            summary=(
                "{{ $labels.process }} waits for a CPU a quarter of the time on "
                "{{ $labels.instance }}"
            ),
            description=(
                "For ten minutes the process's event loop spent more than a quarter of its time "
                "ready to run with no core to run on. Every latency of that process grows by "
                "as much (hydrations, frame boundaries, writes), and the cause is the machine, "
                "not the code: more runnable processes than cores."
            ),
        ),
        AlertRule(
            name="FrameRateBelowGrid",
            signal=f"{skipped} / clamp_min({taken} + {skipped}, 1)",
            condition=f"> {FRAME_SKIP_SHARE:g}",
            for_="10m",
            severity=Severity.WARNING,
            summary="The tape runs below 25 frames a second on {{ $labels.instance }}",
            description=(
                "The frame loop (the sequencer's, on a host) keeps taking its 40 ms boundaries "
                "late and passes over more than a tenth of them: their ticks go into the next "
                "frame, so every terminal sees fewer than 22.5 frames a second. No price is "
                "wrong, but screens refresh late. The loop is short of CPU (ingest, the "
                "publish, or the writers beside it)."
            ),
        ),
    ]
