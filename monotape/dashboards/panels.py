"""The one set of panel definitions: five dashboards an SRE reads at a glance.

Rendered two ways from these values: embedded in the admin server (``/dashboards``, live from
the node's own metrics, no Prometheus needed) and as Grafana dashboards (``monotape dashboards
build`` → deploy/grafana/dashboards/*.json). Every metric name comes from ``metric_names``, so
the service, these panels and the alert rules can never drift apart.

Units follow Grafana's ids: ``s`` seconds, ``bytes``, ``Bps`` bytes/s, ``ops`` per second,
``short`` a plain number.

Size: a declarative table (five dashboards, their panels and targets) read top to bottom; split
across files it would only hide one dashboard's panels from the next.
"""

from __future__ import annotations

from dataclasses import dataclass

from monotape import metric_names as m
from monotape.histograms.stages import ALL_STAGES

from .queries import Gauge, HistogramQuantile, Query, Rate, Ratio, promql, sample_names

__all__ = [
    "DASHBOARDS",
    "GC_PAUSE_THRESHOLD_MS",
    "PROMQL_WINDOW",
    "Dashboard",
    "GcOverlay",
    "Panel",
    "Target",
    "dashboard",
    "gc_annotation_expr",
    "promql_expressions",
    "sampled_names",
]

# A pause worth drawing over latency: every gen-2 collection, and anything of any generation
# longer than the priority path's 5 ms p99 budget. Gen 0/1 run ~128 times a minute and
# take well under a millisecond; drawn, they read as a barcode and hide the pauses that matter.
GC_PAUSE_THRESHOLD_MS = 5.0
PROMQL_WINDOW = "1m"  # the range of rate() when an expression is run outside Grafana


@dataclass(frozen=True)
class Target:
    query: Query
    legend: str  # Grafana's legendFormat: "{{venue}}" is replaced by the series' label


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]
    log_scale: bool = False
    gc_overlay: bool = False  # draw the GC pauses that matter over this panel
    upper_bound: bool = False  # the values bound the truth from above (glass: RTT/2)
    stepped: bool = False  # one value per 10 s interval: drawn as steps, not slopes
    headline: str = ""  # the legend whose latest value heads the panel (default: the first)


@dataclass(frozen=True)
class GcOverlay:
    """GC pauses that matter (gen 2, or longer than ``threshold_ms``), as annotations."""

    threshold_ms: float = GC_PAUSE_THRESHOLD_MS


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    gc_overlay: GcOverlay | None = None


def _quantiles(stage: str) -> tuple[Target, ...]:
    return tuple(
        Target(
            Gauge(m.STAGE_LATENCY, where=(("stage", stage), ("quantile", q)), agg="max"),
            label,
        )
        for q, label in (("0.5", "p50"), ("0.99", "p99"), ("0.999", "p99.9"), ("1", "max"))
    )


def _stage_panel(stage: str) -> Panel:
    if stage == "glass":
        return Panel(
            "glass (upper bound)",
            "Terminal-side RTT/2 of timed pings from a sampled cohort: an upper bound on what "
            "reached the glass, never a synchronized-clock measurement.",
            "s",
            _quantiles(stage),
            log_scale=True,
            gc_overlay=True,
            upper_bound=True,
            stepped=True,
            headline="p99",
        )
    return Panel(
        stage,
        f"Exact HDR percentiles of the {stage} stage over the latest closed 10 s interval.",
        "s",
        _quantiles(stage),
        log_scale=True,
        gc_overlay=True,
        stepped=True,
        headline="p99",
    )


_stages = [s for s in ALL_STAGES if s not in ("glass", "hydrate")] + ["glass"]

TICK_TO_GLASS = Dashboard(
    "monotape-tick-to-glass",
    "Tick to glass",
    "Where a tick's time goes, stage by stage: p50, p99, p99.9 and max of each 10 s interval. "
    "Shaded: GC pauses that matter (gen 2, or longer than 5 ms).",
    (
        *(_stage_panel(s) for s in _stages),
        Panel(
            "p99 by stage, summable histogram",
            f"p99 from {m.STAGE_DURATION}, the Prometheus histogram that sums across "
            "processes and hosts (bucket-interpolated: coarser than the HDR percentiles).",
            "s",
            (Target(HistogramQuantile(0.99, m.STAGE_DURATION, by=("stage",)), "{{stage}}"),),
            log_scale=True,
            gc_overlay=True,
        ),
    ),
    GcOverlay(),
)

ORDERING = Dashboard(
    "monotape-ordering",
    "Ordering",
    "The guard at work: regressions are the lagging twin's late copies (normal, steady while "
    "ticks flow; falling to zero at peak means a twin is gone); backwards feeds are faults.",
    (
        Panel(
            "regressions/s by venue (the guard's work)",
            "Ticks discarded as older than the admitted version: the lagging twin's late "
            "copies. Healthy: a steady rate per venue while both handlers are up.",
            "ops",
            (Target(Rate(m.SEQUENCE_REGRESSIONS, by=("venue",)), "{{venue}}"),),
        ),
        Panel(
            "duplicates/s by venue",
            "The same version again: the twin delivering what was already admitted. Normal.",
            "ops",
            (Target(Rate(m.DUPLICATE_TICKS, by=("venue",)), "{{venue}}"),),
        ),
        Panel(
            "backwards feeds/s by venue",
            "A handler whose own stream went backwards: a venue or handler fault. Must be 0.",
            "ops",
            (Target(Rate(m.FEED_BACKWARDS, by=("venue",), zero_if_absent=True), "{{venue}}"),),
        ),
        Panel(
            "glass regressions and gaps/s (terminals' reports)",
            "What terminals' own guards dropped, as they report it (capped at 100 per "
            "connection): regressions must stay 0; gaps are deltas on a base they lacked.",
            "ops",
            (
                Target(Rate(m.GLASS_REGRESSIONS, zero_if_absent=True), "regressions"),
                Target(Rate(m.GLASS_GAPS, zero_if_absent=True), "gaps"),
            ),
        ),
        Panel(
            "terminals reporting regressions/s",
            "Distinct connections that reported a regression: what GlassRegressions pages on "
            "(two within 10 minutes). Must be 0.",
            "ops",
            (Target(Rate(m.GLASS_REGRESSING_TERMINALS, zero_if_absent=True), "terminals"),),
        ),
        Panel(
            "admitted ticks/s by venue",
            "Ticks the sequencer applied: the load the guard's work is measured against.",
            "ops",
            (Target(Rate(m.TICKS_ADMITTED, by=("venue",)), "{{venue}}"),),
        ),
        Panel(
            "rejected ticks/s by reason",
            "Ticks refused where they enter (out of range, unknown instrument). Should be 0.",
            "ops",
            (Target(Rate(m.TICKS_REJECTED, by=("reason",), zero_if_absent=True), "{{reason}}"),),
        ),
        Panel(
            "epoch by venue",
            "The newest epoch each venue's handlers stamp with; a step is a handler restart.",
            "short",
            (Target(Gauge(m.FEED_EPOCH, by=("venue",), agg="max"), "{{venue}}"),),
        ),
        Panel(
            "feed handlers up by venue",
            "2 is a redundant pair; 1 means one twin is down (no cover left).",
            "short",
            (Target(Gauge(m.FEED_HANDLER_UP, by=("venue",)), "{{venue}}"),),
        ),
        Panel(
            "handler lag",
            "Each handler's delay behind its venue: the twins drift a few ms apart.",
            "s",
            (
                Target(
                    Gauge(m.FEED_LAG, by=("venue", "handler"), agg="max"), "{{venue}}/{{handler}}"
                ),
            ),
        ),
    ),
)

FANOUT = Dashboard(
    "monotape-fanout",
    "Fan-out",
    "Terminals, what they are sent, and what slow terminals cost them.",
    (
        Panel(
            "terminals",
            "Open terminal connections.",
            "short",
            (Target(Gauge(m.CONNECTIONS), "terminals"),),
        ),
        Panel(
            "frames/s",
            "Messages written to terminals (frames, snapshots, priority updates).",
            "ops",
            (Target(Rate(m.FRAMES_SENT), "frames/s"),),
        ),
        Panel(
            "frame boundaries/s",
            "The 40 ms grid as the frame loop kept it: 25 taken a second when on time; "
            "skipped ones were passed over while late, their ticks in the next frame.",
            "ops",
            (
                Target(Rate(m.FRAME_BOUNDARIES), "taken"),
                Target(Rate(m.FRAME_BOUNDARIES_SKIPPED), "skipped"),
            ),
        ),
        Panel(
            "bytes/s",
            "Bytes written to terminals.",
            "Bps",
            (Target(Rate(m.BYTES_SENT), "bytes/s"),),
        ),
        Panel(
            "payloads per frame",
            "Distinct payloads built for the last frame: connections with the same watchlist "
            "share one.",
            "short",
            (Target(Gauge(m.FRAME_PAYLOADS), "payloads"),),
        ),
        Panel(
            "slow-consumer drops/s",
            "Frames dropped from full outbound rings; the terminal gets a snapshot next.",
            "ops",
            (Target(Rate(m.SLOW_CONSUMER_DROPS), "drops/s"),),
        ),
        Panel(
            "gap snapshots/s",
            "Snapshots sent to resolve a gap (after drops).",
            "ops",
            (Target(Rate(m.GAP_SNAPSHOTS), "snapshots/s"),),
        ),
        Panel(
            "hydration",
            "Time to join cached snapshot chunks for a (re)subscription.",
            "s",
            _quantiles("hydrate"),
            log_scale=True,
            stepped=True,
            headline="p99",
        ),
        Panel(
            "fullest outbound ring",
            "Frames waiting in the fullest per-connection ring (drop-oldest at the bound).",
            "short",
            (Target(Gauge(m.OUTBOX_FRAMES_MAX), "frames"),),
        ),
    ),
)

ADMISSION = Dashboard(
    "monotape-admission",
    "Admission and auth",
    "Who gets in: upgrades admitted, refused with 503, and what token checks cost.",
    (
        Panel(
            "upgrades/s",
            "Upgrades admitted as terminal connections.",
            "ops",
            (Target(Rate(m.UPGRADES), "admitted/s"),),
        ),
        Panel(
            "503s/s by reason",
            "Upgrades refused with 503 and Retry-After (rate limit, overload, drain).",
            "ops",
            (Target(Rate(m.ADMISSION_REJECTED, by=("reason",)), "{{reason}}"),),
        ),
        Panel(
            "verify cache",
            "Tokens answered from the verified-claims cache vs fully verified. A storm should "
            "be mostly hits.",
            "ops",
            (
                Target(Rate(m.AUTH_CACHE_HITS), "hits/s"),
                Target(Rate(m.AUTH_CACHE_MISSES), "misses/s"),
            ),
        ),
        Panel(
            "verify time",
            "Mean time of one full token verification (signature checked, off the loop).",
            "s",
            (
                Target(
                    Ratio(Rate(m.AUTH_VERIFY_SECONDS), Rate(m.AUTH_CACHE_MISSES)),
                    "per verification",
                ),
            ),
        ),
        Panel(
            "tokens refused/s by reason",
            "Upgrades turned away at the token check.",
            "ops",
            (Target(Rate(m.AUTH_REFUSED, by=("reason",), zero_if_absent=True), "{{reason}}"),),
        ),
        Panel(
            "disconnects/s by reason",
            "Connections torn down, by the named reason of their teardown.",
            "ops",
            (Target(Rate(m.DISCONNECTS, by=("reason",), zero_if_absent=True), "{{reason}}"),),
        ),
    ),
)

HEALTH = Dashboard(
    "monotape-health",
    "Health",
    "The process under the tape: invariants, memory, GC, event loop, CPU wait, file descriptors.",
    (
        Panel(
            "invariant violations",
            "0 while each invariant holds (checked every 30 s). Anything else pages.",
            "short",
            (Target(Gauge(m.INVARIANT_VIOLATION, by=("invariant",), agg="max"), "{{invariant}}"),),
        ),
        Panel(
            "RSS",
            "Resident memory of the node process.",
            "bytes",
            (Target(Gauge(m.PROCESS_RSS), "RSS"),),
        ),
        Panel(
            "GC collections/s by generation",
            "Gen 0 runs hundreds of times a minute and is cheap; gen 2 is the one to watch.",
            "ops",
            (Target(Rate(m.GC_PAUSE + "_count", by=("generation",)), "gen {{generation}}"),),
        ),
        Panel(
            "GC time per second by generation",
            "Seconds paused in collections per second of wall time.",
            "s",
            (Target(Rate(m.GC_PAUSE + "_sum", by=("generation",)), "gen {{generation}}"),),
        ),
        Panel(
            "event-loop lag",
            "How late the loop wakes (everything on the node shares it): the latest probe, and "
            "the largest since the previous sample (in Grafana: since the previous scrape).",
            "s",
            (
                Target(Gauge(m.EVENT_LOOP_LAG), "lag"),
                Target(Gauge(m.EVENT_LOOP_LAG_MAX), "max"),
            ),
        ),
        Panel(
            "CPU wait by process",
            "Share of the time each process's event loop was ready to run with no core free "
            "(Linux run-queue wait). A few % on a host with cores to spare (4-8% idle, "
            "measured); above 25% the box is short of cores and every latency grows with it.",
            "percentunit",
            (Target(Rate(m.CPU_WAIT, by=("process",)), "wait {{process}}"),),
        ),
        Panel(
            "file descriptors",
            "Open fds against the limit: two per terminal with the native writer (its socket "
            "and the writer's duplicate of it), one without, plus a few. Log scale.",
            "short",
            (
                Target(Gauge(m.PROCESS_OPEN_FDS), "open"),
                Target(Gauge(m.PROCESS_MAX_FDS), "limit"),
            ),
            log_scale=True,
        ),
        Panel(
            "asyncio tasks",
            "Tasks alive in the node's loop: a leak of per-connection tasks shows here first.",
            "short",
            (Target(Gauge(m.ASYNCIO_TASKS), "tasks"),),
        ),
    ),
)

DASHBOARDS: tuple[Dashboard, ...] = (TICK_TO_GLASS, ORDERING, FANOUT, ADMISSION, HEALTH)


def dashboard(uid: str) -> Dashboard:
    """The dashboard with this uid; ``KeyError`` naming the choices otherwise."""
    for d in DASHBOARDS:
        if d.uid == uid:
            return d
    raise KeyError(f"unknown dashboard {uid!r}; one of {', '.join(d.uid for d in DASHBOARDS)}")


def gc_annotation_expr(overlay: GcOverlay, window: str) -> str:
    """Collections that matter in the last ``window``: gen 2, plus any longer than the
    threshold (the histogram has a bucket at 5 ms: the count above it)."""
    le = f"{overlay.threshold_ms / 1000:g}"
    count, bucket = m.GC_PAUSE + "_count", m.GC_PAUSE + "_bucket"
    return (
        f'sum(increase({count}{{generation="2"}}[{window}])) + '
        f'sum(increase({count}{{generation!="2"}}[{window}])) - '
        f'sum(increase({bucket}{{generation!="2",le="{le}"}}[{window}])) > 0'
    )


def promql_expressions(window: str = PROMQL_WINDOW) -> list[tuple[str, str]]:
    """(dashboard / panel title, PromQL) for every target of every panel, with rate windows
    of ``window``: what a real Prometheus must answer for the Grafana dashboards to draw."""
    return [
        (f"{d.title} / {p.title}", promql(t.query, window))
        for d in DASHBOARDS
        for p in d.panels
        for t in p.targets
    ]


def sampled_names() -> set[str]:
    """Every exposition sample name some panel reads: what the embedded sampler keeps."""
    return {
        n for d in DASHBOARDS for p in d.panels for t in p.targets for n in sample_names(t.query)
    }
