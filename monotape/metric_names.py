"""Every metric name, defined once (design: Metric names).

The service, the dashboards and the alert rules import these constants, so the three can never
drift apart. Names are the Prometheus names as exposed; counters are declared here without the
``_total`` suffix only where prometheus_client appends it (see ``counter_base``).
"""

from __future__ import annotations

__all__ = [
    "ADMISSION_REJECTED",
    "ASYNCIO_TASKS",
    "AUTH_CACHE_HITS",
    "AUTH_CACHE_MISSES",
    "AUTH_REFUSED",
    "AUTH_VERIFY_SECONDS",
    "BATCHES_REFUSED",
    "BYTES_SENT",
    "CONNECTIONS",
    "CPU_WAIT",
    "DISCONNECTS",
    "DUPLICATE_TICKS",
    "EVENT_LOOP_LAG",
    "EVENT_LOOP_LAG_MAX",
    "FEED_BACKWARDS",
    "FEED_EPOCH",
    "FEED_HANDLER_UP",
    "FEED_LAG",
    "FRAMES_SENT",
    "FRAME_BOUNDARIES",
    "FRAME_BOUNDARIES_SKIPPED",
    "FRAME_GRID_STALLED",
    "FRAME_PAYLOADS",
    "GAP_SNAPSHOTS",
    "GC_FROZEN_OBJECTS",
    "GC_PAUSE",
    "GC_RECLAIMS",
    "GC_REFREEZES",
    "GLASS_GAPS",
    "GLASS_REGRESSING_TERMINALS",
    "GLASS_REGRESSIONS",
    "INDEX_ENTRIES",
    "INVARIANT_CHECK_SECONDS",
    "INVARIANT_VIOLATION",
    "IPC_CONNECTS",
    "IPC_DROPPED_ITEMS",
    "IPC_DROPPED_MESSAGES",
    "IPC_MALFORMED_MESSAGES",
    "IPC_PEERS",
    "IPC_RECEIVED_ITEMS",
    "IPC_RECEIVED_MESSAGES",
    "IPC_SENT_ITEMS",
    "IPC_SENT_MESSAGES",
    "MAX_HZ_RETRIED",
    "NATIVE_UNATTACHED",
    "NATIVE_WRITER",
    "NATS_BUS_PREFIX",
    "OUTBOX_FRAMES",
    "OUTBOX_FRAMES_MAX",
    "PRIORITY_UPDATES_SENT",
    "PROCESS_BEAT_SILENCE_MAX",
    "PROCESS_MAX_FDS",
    "PROCESS_OPEN_FDS",
    "PROCESS_RESTARTS",
    "PROCESS_RSS",
    "PROCESS_SCRAPE_FAILURES",
    "PROCESS_UP",
    "REQUEST_ERRORS",
    "RING_AGES_DROPPED",
    "RING_BELLS_DROPPED",
    "RING_GAPS",
    "RING_LAPS",
    "RING_MISSED",
    "RING_OVERSIZE",
    "RING_PUBLISHED",
    "RING_SNAPSHOTS_AHEAD",
    "RING_SNAPSHOTS_BUSY",
    "RING_SNAPSHOTS_REFUSED",
    "RING_TORN_READS",
    "SEQUENCE_REGRESSIONS",
    "SLOW_CONSUMER_DROPS",
    "STAGE_DURATION",
    "STAGE_FAILURES",
    "STAGE_LATENCY",
    "STALE_EPISODES",
    "STALE_TERMINALS",
    "STALE_VENUE",
    "STALE_VENUES",
    "TICKS_ADMITTED",
    "TICKS_RECEIVED",
    "TICKS_REJECTED",
    "UPGRADES",
    "UPGRADES_THROTTLED",
    "counter_base",
]

SEQUENCE_REGRESSIONS = "monotape_sequence_regressions_total"  # {venue}
DUPLICATE_TICKS = "monotape_duplicate_ticks_total"  # {venue}
TICKS_ADMITTED = "monotape_ticks_admitted_total"  # {venue}
TICKS_RECEIVED = "monotape_ticks_received_total"  # {venue,handler}: what handlers delivered
STAGE_LATENCY = "monotape_stage_latency_seconds"  # {stage,quantile}: exact HDR quantiles per node
# {stage}: a Prometheus histogram with buckets around the budgets; sums across processes and hosts
STAGE_DURATION = "monotape_stage_duration_seconds"
# {stage}: a frame, symbol or batch whose processing raised; contained, counted, logged, skipped
STAGE_FAILURES = "monotape_stage_failures_total"
TICKS_REJECTED = "monotape_ticks_rejected_total"  # {venue,reason}: refused where ticks enter
# {reason}: bus or feed buffers that were not a tick batch of this format, refused whole
BATCHES_REFUSED = "monotape_batches_refused_total"
FEED_BACKWARDS = "monotape_feed_backwards_total"  # {venue,handler}: its own stream went back
GLASS_REGRESSIONS = "monotape_glass_regressions_total"  # terminals' own guard drops (must stay 0)
# what terminals report (``report``), capped at 100 per connection: deltas on a base not held
GLASS_GAPS = "monotape_glass_gaps_total"
# distinct connections that reported a regression: what GlassRegressions pages on (>= 2 in 10 m)
GLASS_REGRESSING_TERMINALS = "monotape_glass_regressing_terminals_total"
GC_PAUSE = "monotape_gc_pause_seconds"  # histogram {generation}
INDEX_ENTRIES = "monotape_index_entries"  # {index}
INVARIANT_VIOLATION = "monotape_invariant_violation"  # {invariant}
INVARIANT_CHECK_SECONDS = "monotape_invariant_check_seconds"  # {invariant}
CONNECTIONS = "monotape_connections"
FRAMES_SENT = "monotape_frames_sent_total"
FRAME_BOUNDARIES = "monotape_frame_boundaries_total"  # 40 ms boundaries the frame loop took
# grid boundaries the frame loop passed over because it was late (conflated into the next frame)
FRAME_BOUNDARIES_SKIPPED = "monotape_frame_boundaries_skipped_total"
# full records a max_hz boundary owed its terminals that the snapshots did not have (a writer
# process's ring table only newer than its frame): asked for again at that rate's next boundary
MAX_HZ_RETRIED = "monotape_max_hz_retried_total"
BYTES_SENT = "monotape_bytes_sent_total"
FRAME_PAYLOADS = "monotape_frame_payloads"
NATIVE_WRITER = "monotape_native_writer"  # 1: frames go out through the native send loop
# terminals served on the transport path alone: no descriptor left to duplicate their socket
# for the native writer's table
NATIVE_UNATTACHED = "monotape_native_unattached_total"
OUTBOX_FRAMES = "monotape_outbox_frames"
OUTBOX_FRAMES_MAX = "monotape_outbox_frames_max"
PRIORITY_UPDATES_SENT = "monotape_priority_updates_sent_total"
SLOW_CONSUMER_DROPS = "monotape_slow_consumer_drops_total"
GAP_SNAPSHOTS = "monotape_gap_snapshots_total"
# STALE (docs/wire.md): terminals whose screen holds a stale symbol now (every terminal while the
# grid is stalled; else those subscribed to a down venue's symbol), per process: sum them
STALE_TERMINALS = "monotape_stale_terminals"
STALE_VENUES = "monotape_stale_venues"  # venues whose handlers are all down, as a writer knows
STALE_VENUE = "monotape_stale_venue"  # {venue}: 1 while its symbols are marked stale
FRAME_GRID_STALLED = "monotape_frame_grid_stalled"  # 1: no frame for > 2 frame intervals
STALE_EPISODES = "monotape_stale_episodes_total"  # {cause}: grid stalls, venues found down
ADMISSION_REJECTED = "monotape_admission_rejected_total"
AUTH_CACHE_HITS = "monotape_auth_cache_hits_total"
AUTH_CACHE_MISSES = "monotape_auth_cache_misses_total"
AUTH_REFUSED = "monotape_auth_refused_total"  # {reason}
FEED_HANDLER_UP = "monotape_feed_handler_up"  # {venue,handler}
ASYNCIO_TASKS = "monotape_asyncio_tasks"
EVENT_LOOP_LAG = "monotape_event_loop_lag_seconds"
EVENT_LOOP_LAG_MAX = "monotape_event_loop_lag_max_seconds"  # max since the last scrape
# counter: the event loop's thread runnable but waiting for a CPU (Linux schedstat), per process
CPU_WAIT = "monotape_cpu_wait_seconds_total"
GC_FROZEN_OBJECTS = "monotape_gc_frozen_objects"
GC_REFREEZES = "monotape_gc_refreezes_total"  # counter: gc.freeze() after connections settled
GC_RECLAIMS = "monotape_gc_reclaims_total"  # counter: unfreeze + full collect + freeze
DISCONNECTS = "monotape_disconnects_total"  # {reason}
# The NATS tick bus's own counters: <prefix><counter>_total and two gauges
# (bus/nats_collector.py lists the counters: published/sent/dropped/received batches and ticks,
# decode/sink errors, slow consumer drops; gauges pending_batches, connected).
NATS_BUS_PREFIX = "monotape_bus_"
# The host's Unix-socket links (bus/link.py), each end per process, label {link}: "bus" (handlers
# -> sequencer) or "feed-<venue>-<handler>" (venue -> one handler). Items are ticks on the bus,
# venue updates on a feed. Dropped {link,reason}: receiver_down, receiver_full, oversize, closed.
IPC_SENT_MESSAGES = "monotape_ipc_sent_messages_total"
IPC_SENT_ITEMS = "monotape_ipc_sent_items_total"
IPC_DROPPED_MESSAGES = "monotape_ipc_dropped_messages_total"
IPC_DROPPED_ITEMS = "monotape_ipc_dropped_items_total"
IPC_RECEIVED_MESSAGES = "monotape_ipc_received_messages_total"
IPC_RECEIVED_ITEMS = "monotape_ipc_received_items_total"
IPC_MALFORMED_MESSAGES = "monotape_ipc_malformed_messages_total"  # truncated or undecodable
IPC_CONNECTS = "monotape_ipc_connects_total"  # sender: (re)connects; receiver: senders accepted
IPC_PEERS = "monotape_ipc_peers"  # sender: 1 while connected; receiver: senders connected now
REQUEST_ERRORS = "monotape_request_errors_total"  # {code}
# upgrades refused with 429: their source address failed too many (no token work was done)
UPGRADES_THROTTLED = "monotape_upgrades_throttled_total"
UPGRADES = "monotape_upgrades_total"  # terminals admitted: upgrades that became connections
AUTH_VERIFY_SECONDS = "monotape_auth_verify_seconds_total"  # time in full (uncached) verifies
FEED_EPOCH = "monotape_feed_epoch"  # {venue,handler}: the newest epoch the handler stamps with
FEED_LAG = "monotape_feed_lag_seconds"  # {venue,handler}: the handler's delay behind the venue
# The frame ring (platform/ring, docs/ring.md): the producer's counters, then each reader's
# ({writer}: the reader index). A lap or a gap sends that writer's terminals a snapshot.
RING_PUBLISHED = "monotape_ring_published_total"
RING_OVERSIZE = "monotape_ring_oversize_total"  # frames larger than a slot, published as gaps
# frames published without their tick ages (with them they did not fit a slot): no tick_to_write
RING_AGES_DROPPED = "monotape_ring_ages_dropped_total"
RING_BELLS_DROPPED = "monotape_ring_bells_dropped_total"  # a doorbell full (reader stopped) or gone
RING_SNAPSHOTS_REFUSED = "monotape_ring_snapshots_refused_total"  # chunk too large, iid too high
RING_LAPS = "monotape_ring_laps_total"  # {writer}
RING_MISSED = "monotape_ring_missed_entries_total"  # {writer}: entries lost to laps
RING_TORN_READS = "monotape_ring_torn_reads_total"  # {writer}: laps seen by the re-check
RING_GAPS = "monotape_ring_gaps_total"  # {writer}: oversize gap entries, producer restarts
# {writer}: symbols left out of a snapshot, the table only holding records of frames this writer
# has not read yet (it was more than a frame behind): the terminal resyncs on its next delta
RING_SNAPSHOTS_AHEAD = "monotape_ring_snapshots_ahead_total"
# {writer}: reads of a symbol's newest snapshot-table record that found the sequencer's put in
# progress for over 0.1 s: read as absent (reads bounded by a frame never wait)
# (a max_hz boundary then retries that full record at the next one: MAX_HZ_RETRIED)
RING_SNAPSHOTS_BUSY = "monotape_ring_snapshots_busy_total"
# The multi-process host (platform/host, docs/processes.md), about each role process it runs:
# {role,process} (process: "writer-0"). Every role's own samples carry process="<name>" too.
PROCESS_UP = "monotape_process_up"  # 1 while running
# {role,process,reason}: exit_1, SIGKILL..., hung (its liveness beat stopped: docs/processes.md)
PROCESS_RESTARTS = "monotape_process_restarts_total"
# {role,process}: the longest the host saw a role go without a beat (outside a hold: a GC or a
# disk wait) since the host started: what each role's liveness limit is chosen against
PROCESS_BEAT_SILENCE_MAX = "monotape_process_beat_silence_max_seconds"
# {process}: a role that did not answer the host's scrape (left out of that /metrics)
PROCESS_SCRAPE_FAILURES = "monotape_process_scrape_failures_total"
# prometheus_client's ProcessCollector (no monotape_ prefix: the standard process metrics)
PROCESS_RSS = "process_resident_memory_bytes"
PROCESS_OPEN_FDS = "process_open_fds"
PROCESS_MAX_FDS = "process_max_fds"


def counter_base(name: str) -> str:
    """The name to give a prometheus_client ``Counter``: it appends ``_total`` itself."""
    return name.removesuffix("_total")
