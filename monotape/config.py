"""One typed configuration: defaults that run on a laptop.

Precedence: built-in defaults < optional TOML file (``--config``) < ``MONOTAPE_*`` environment
variables < command-line flags. Only ``monotape.cli`` reads argv and the environment; everything
else is handed a ``Config``. A few ``MONOTAPE_*`` variables belong to the client commands, not to
the node's configuration (``CLIENT_ENV``): the loader skips them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta

from monotape.config_source import FileError, file_source, parse_file

__all__ = [
    "CLIENT_ENV",
    "LOG_LEVELS",
    "MAX_WRITERS",
    "AuthConfig",
    "Config",
    "ConfigError",
    "FeedConfig",
    "HostConfig",
    "NatsConfig",
    "ServerConfig",
    "SimulatorConfig",
    "available_cores",
    "invalid_field",
    "load_config",
]


# Variables the client commands read themselves (a token is a credential, not a setting);
# the configuration loader never takes them as fields.
CLIENT_ENV: Final = frozenset({"MONOTAPE_CONFIG", "MONOTAPE_TOKEN", "MONOTAPE_ADMIN_TOKEN"})
LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")

Port = Annotated[int, Meta(ge=0, le=65_535)]  # 0 picks a free port
PositiveRate = Annotated[float, Meta(gt=0)]


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the field (``path``, dotted)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class SimulatorConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    venues: int = 6
    instruments: int = 2400
    rate: PositiveRate = 20_000.0  # ticks/s across all venues; the seed's peak is 120k, spikes 190k
    spike_rate: float = 190_000.0  # rate during a scheduled spike (a macro print)
    spike_every_s: float = 0.0  # 0: no scheduled spikes
    spike_duration_s: float = 0.5
    seed: int = 7


class FeedConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # Two handlers per venue, active/active, drifting 6-9 ms apart (docs/design.md).
    lag_min_ms: float = 6.0
    lag_max_ms: float = 9.0
    # A started handler's epoch takes effect at venue time now + this fence: it must exceed the
    # drift between the twins, so both stamp the same version on the same venue update.
    epoch_fence_ms: float = 250.0
    replay: str = ""  # an NDJSON tick file (docs/replay.md) replaces the simulator when set
    replay_speed: float = 1.0
    replay_start_delay_s: float = 0.0
    # Chaos for demos and tests: every N seconds one handler of every venue stops for
    # restart_down_s and starts again (alternating A and B). 0 disables it.
    restart_every_s: float = 0.0
    restart_down_s: float = 0.5


class ServerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    ws_port: Port = 8765
    admin_port: Port = 8081
    lanes: int = 4
    frame_ms: float = 40.0  # 40 ms conflation frames (25 Hz)
    outbox_frames: int = 64  # bounded per-connection ring, drop-oldest
    write_high_water: int = 64 * 1024  # bytes queued in a transport before frames go to the ring
    # Kernel send buffer per terminal socket. Bounded on purpose: autotuning would let 6,000
    # slow terminals pin up to 4 MB of kernel memory each, and hide a slow consumer for seconds.
    so_sndbuf: int = 128 * 1024
    # The per-terminal write loop in C (server/sendmany.py, issue 13): one send per terminal
    # with the GIL released, one call per payload group. Off: the pure-Python transport path.
    native_writer: bool = True
    # A ring in gap (it overran: 64 frames its socket could not take) this long without the
    # snapshot that ends the gap: teardown "slow_consumer" (docs/observability.md gives the
    # bound). A terminal that reads slowly gets its snapshot well within it and stays.
    slow_consumer_kick_s: float = 5.0
    max_subscriptions: int = 256
    max_priority: int = 8
    max_message_bytes: int = 16 * 1024
    requests_per_s: float = 20.0
    request_burst: int = 40
    heartbeat_s: float = 1.0
    # Keepalive: every terminal pinged once per interval (one loop, a slice a second) and torn
    # down ("keepalive_timeout") when its pong is this late. 0 disables it.
    keepalive_interval_s: float = 20.0
    keepalive_timeout_s: float = 20.0
    # Admission: a token bucket on the upgrade path, 503 + Retry-After when empty.
    admission_rate_per_s: float = 1_200.0
    admission_burst: int = 2_500
    listen_backlog: int = 4_096  # the kernel's accept queue: a storm waits here, not in RAM
    # Failed upgrades (401s) per source address: a bucket of this burst refilling at this rate;
    # past it the address gets 429 + Retry-After without any token work. 0 disables the cap.
    # Behind an L4 balancer without the PROXY protocol every terminal shares the balancer's
    # address (docs/auth.md). The table of addresses is bounded (least recently failed evicted).
    failed_upgrades_burst: Annotated[int, Meta(ge=0)] = 20
    failed_upgrades_per_s: PositiveRate = 1.0
    failed_upgrades_addresses: Annotated[int, Meta(ge=1)] = 65_536
    # Per-terminal control-frame budget (pings and pongs it sends) and the bytes that may be
    # queued for it (transport buffer, pongs included, plus its outbox); over either: close 1008.
    control_frames_per_s: PositiveRate = 10.0
    control_frames_burst: Annotated[int, Meta(ge=1)] = 50
    max_queued_bytes: Annotated[int, Meta(ge=1)] = 2 * 1024 * 1024
    # Load shedding: while the event loop runs this late, upgrades get 503 too. The bucket's
    # rate is a promise about a typical core; the loop's lag is the truth about this one
    # (measured: a busy 2-core host accepts ~200-1,000 upgrades/s, below the 1,200 budget,
    # and queued upgrades time out and come back as a larger wave). 0 disables it.
    admission_max_lag_ms: float = 100.0
    # glass: a sampled cohort of terminals answers timed pings; RTT/2 is an upper bound on
    # the one-way server -> glass delay (never synchronized-clock truth).
    glass_share: float = 0.005
    glass_interval_s: float = 5.0
    # Drain (POST /admin/drain, SIGTERM): 2% of connections every 250 ms (docs/design.md), each told
    # to come back after a random 0..spread ms.
    drain_fraction: float = 0.02
    drain_interval_s: float = 0.25
    drain_hint_spread_ms: int = 5_000
    drain_on_stop: bool = True
    drain_timeout_s: float = 20.0
    hdr_interval_s: float = 10.0  # histogram intervals rotate every 10 s
    hdr_max_age_s: float = 7 * 24 * 3600.0  # interval logs kept this long...
    hdr_max_bytes: int = 1 << 30  # ...and within this size, oldest deleted first
    # gc.freeze() after warm-up: long-lived state (dictionary, indexes, caches) leaves the
    # collector's view, so a gen-2 pause no longer scales with it (docs/observability.md).
    gc_freeze: bool = True
    # ...and again once new connections settle (none opened for gc_refreeze_settle_s), so a
    # gen-2 pause does not scale with the terminals either; the cycles closed connections leave
    # behind are reclaimed by one full collection every gc_reclaim_closed closes, also only
    # when settled (monotape/platform/core/gc_policy.py).
    gc_refreeze: bool = True
    gc_refreeze_settle_s: float = 1.0
    gc_reclaim_closed: int = 10_000
    # A trickle of opens never settles, so also refreeze every gc_refreeze_opened opens, every
    # gc_refreeze_every_s with any open, and after a gen-2 pause of gc_pause_budget_ms (0
    # disables each), while sessions last gc_min_lifetime_s or more (live / close rate);
    # reclaim, settled or not, every gc_reclaim_forced_closed closes: the bound on frozen
    # garbage (0: none). docs/observability.md, "GC and the event loop".
    gc_refreeze_opened: Annotated[int, Meta(ge=0)] = 64
    gc_refreeze_every_s: Annotated[float, Meta(ge=0)] = 10.0
    gc_pause_budget_ms: Annotated[float, Meta(ge=0)] = 2.0
    gc_min_lifetime_s: Annotated[float, Meta(ge=0)] = 60.0
    gc_reclaim_forced_closed: Annotated[int, Meta(ge=0)] = 5_000
    invariant_interval_s: float = 30.0  # issue: a dangling index entry visible within 30 s
    # POST /admin/faults/dangling-entry corrupts one index entry (alert drills, the alert
    # tests): never on unless asked for (`monotape run --enable-fault-injection`).
    fault_injection: bool = False

    def __post_init__(self) -> None:
        if self.keepalive_interval_s != 0 and self.keepalive_interval_s < 1:
            raise ValueError(
                "server.keepalive_interval_s must be 0 (off) or >= 1 (one slice a second), "
                f"got {self.keepalive_interval_s}"
            )
        if self.keepalive_timeout_s <= 0:
            raise ValueError(
                f"server.keepalive_timeout_s must be > 0, got {self.keepalive_timeout_s}"
            )
        if self.max_queued_bytes <= self.write_high_water:
            raise ValueError(
                f"server.max_queued_bytes ({self.max_queued_bytes}) must exceed "
                f"server.write_high_water ({self.write_high_water}): frames queue past it"
            )


# The upgrade's and the admin API's token check (docs/auth.md); monotape.platform.auth builds its
# verifier from this, so auth imports config and never the reverse.
class AuthConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    algorithm: str = "ES256"  # one asymmetric algorithm; ES256, RS256, EdDSA, ...
    public_key_file: str = ""  # PEM; empty: the dev key under <data_dir>/keys/
    jwks_file: str = ""  # a JWKS (RFC 7517 §5); wins over public_key_file; kid picks the key
    audience: str = "monotape"
    issuer: str = "monotape-dev"
    leeway_s: float = 5.0  # clock skew tolerated on exp and nbf
    cache_size: int = 100_000  # verified tokens memoized (~0.4 KB each)
    max_token_bytes: int = 8192  # larger tokens are refused before any parsing
    verify_threads: int = 2  # the verification pool; the GIL is released in the signature check
    # The watchlist page's dev sign-in (POST /watchlist/token: a 15-minute terminal token for a
    # name, minted from the dev key). Only ever on the embedded default key; env
    # MONOTAPE_AUTH__DEV_SIGN_IN=false turns it off there too.
    dev_sign_in: bool = True


class NatsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The cross-host tick bus (docs/nats.md): used when ``bus = "nats"``."""

    servers: str = "nats://127.0.0.1:4222"  # comma-separated
    subjects: Literal["batch", "symbol"] = "batch"  # md.<venue>.batch or md.<venue>.<symbol>
    max_pending_batches: int = 4_096  # bounded outbound queue; overflow is counted, never waits
    connect_timeout_s: float = 10.0


MAX_WRITERS: Final = 16  # the frame ring's reader slots


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


# "auto" runs the host (a tree of processes) from this many cores, the one-process node below.
# Measured on 2 cores (bench_latency --writers 2 --rates 120000, 4,200 terminals, 3 runs
# alternated; docs/benchmarks.md "Which placement on 2 cores"): the node's tick_to_write p99
# 58 ms against the host's 257, its priority p99 0.6 ms against 244, 23.2 frames/s a terminal
# against 13.6: on two cores the host's six processes wait for each other's core. From three
# cores the host has one for ingest, and its writers the rest (not measured here: this box has
# two).
HOST_FROM_CORES = 3


def auto_placement(cores: int) -> int:
    """The writers "auto" gives on ``cores`` cores: 0 (the one-process node) below
    ``HOST_FROM_CORES``, else one per core, at most 16."""
    return 0 if cores < HOST_FROM_CORES else min(MAX_WRITERS, cores)


class HostConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The process model (docs/processes.md): ``writers = N`` runs a host that supervises a
    sequencer, N writer processes sharing the WebSocket port (SO_REUSEPORT), two feed handler
    processes per venue and the venue; ``"auto"`` (the default) is the placement faster on this
    machine (``writer_count``: the node below ``HOST_FROM_CORES`` cores, else a writer per
    core); ``0`` runs everything in one process (the node).
    Flags: ``monotape run --writers N`` / ``--single-process``."""

    # At most 16: the frame ring's reader slots.
    writers: Annotated[int, Meta(ge=0, le=16)] | Literal["auto"] = "auto"
    # The ordered stop, then SIGKILL the rest. The writers stop first and drain (2% every
    # 250 ms: 12.25 s for all), the three stages after them are owed 2 s each: 24 s lets a
    # full drain finish (systemd's TimeoutStopSec in deploy/ is 45).
    stop_timeout_s: Annotated[float, Meta(gt=0)] = 24.0
    start_timeout_s: Annotated[float, Meta(gt=0)] = 30.0  # a stage not ready by then: go on
    restart_cap_s: Annotated[float, Meta(gt=0)] = 5.0  # crash-loop backoff's longest wait
    scrape_timeout_s: Annotated[float, Meta(gt=0)] = 2.0  # one role's /metrics, from the host
    # The frame ring's size in /dev/shm (docs/ring.md): 13 MiB of it is the snapshot table, the
    # rest 256 KiB slots; 64 MiB holds 203 slots, ~8 s of frames at 25/s. The chaos test makes
    # it small (24 MiB: 43 slots, ~1.7 s) so that a writer stopped for 3 s is lapped.
    ring_mib: Annotated[int, Meta(ge=16, le=4096)] = 64
    # Liveness (docs/processes.md, Liveness): a role whose beat (every 50 ms, from its event
    # loop) stops for longer than its limit is SIGKILLed and started again (reason "hung"); 0
    # turns it off for that role. During a garbage collection or a write to a slow disk a role
    # holds its beat and is judged by beat_held_limit_ms instead; before its first beat, by
    # start_timeout_s. The sequencer's limit is the budget of a stall terminals may see before
    # it is replaced (issue 40: <= 300 ms); the others are their worst measured silence under
    # load with a margin (docs/processes.md says how they were chosen).
    sequencer_beat_limit_ms: Annotated[int, Meta(ge=0)] = 300
    writer_beat_limit_ms: Annotated[int, Meta(ge=0)] = 1_500
    handler_beat_limit_ms: Annotated[int, Meta(ge=0)] = 1_000
    venue_beat_limit_ms: Annotated[int, Meta(ge=0)] = 2_000
    beat_held_limit_ms: Annotated[int, Meta(ge=0)] = 10_000
    # A second sequencer process kept imported and idle: a restart attaches it to the ring at
    # once instead of starting Python from nothing (docs/processes.md, Warm start).
    sequencer_standby: bool = True
    # Where run dirs go (sockets, port files, config.json): short, since a Unix socket path
    # has at most 107 bytes. "": the system's temporary directory.
    run_base: str = ""

    @property
    def writer_count(self) -> int:
        """``writers`` as a number. "auto" is the placement that is faster on this machine
        (``auto_placement``): on fewer than ``HOST_FROM_CORES`` cores the one-process node (0),
        else a writer per core this process may run on (its CPU affinity, which a container or
        ``taskset`` narrows; ``os.cpu_count()`` where there is none), at most 16."""
        if self.writers != "auto":
            return self.writers
        return auto_placement(available_cores())


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    data_dir: str = ".monotape"
    log_level: str = "info"  # one of LOG_LEVELS (any case); env MONOTAPE_LOG_LEVEL
    simulator: SimulatorConfig = msgspec.field(default_factory=SimulatorConfig)
    feeds: FeedConfig = msgspec.field(default_factory=FeedConfig)
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    auth: AuthConfig = msgspec.field(default_factory=AuthConfig)
    bus: Literal["inprocess", "nats"] = "inprocess"
    nats: NatsConfig = msgspec.field(default_factory=NatsConfig)
    host: HostConfig = msgspec.field(default_factory=HostConfig)

    def __post_init__(self) -> None:
        level = self.log_level.strip().lower()
        if level not in LOG_LEVELS:
            raise ValueError(f"log_level {self.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
        self.log_level = level


# What a field takes, in one line, where msgspec's own error would not say it.
_RULES: Final[dict[str, str]] = {
    "host.writers": 'must be "auto" (the placement faster on this machine) or a whole number 0-16 '
    "(0: everything in one process)",
}

_AT = re.compile(r"\s*-\s*at `\$\.?([^`]*)`\s*$")
# A __post_init__ names its field first ("server.keepalive_interval_s must be ...", "log_level
# 'loud' is not ..."): msgspec places the error at the struct, the message at the field.
_NAMED = re.compile(r"([a-z_][a-z0-9_.]*) ")


def invalid_field(exc: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec's "Expected `int` <= 65535 - at `$.server.ws_port`" as ``("server.ws_port",
    "Expected `int` <= 65535")``: the field's dotted path ("" when msgspec names none) and what
    is wrong with it, so a caller can name the field in its own words (a flag, a file line)."""
    text = str(exc)
    match = _AT.search(text)
    if not match:
        return "", text
    return match.group(1).replace("[", ".").replace("]", ""), text[: match.start()]


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def load_config(
    toml_path: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build the effective configuration.

    ``env``: ``MONOTAPE_SERVER__WS_PORT=9000`` sets ``server.ws_port`` (``__`` separates levels);
    ``MONOTAPE_DATA_DIR`` sets ``data_dir``. ``overrides`` maps dotted paths to values (flags).
    A refused value names its source: ``file:line: field: why``, or the variable's name.
    """
    tree: dict[str, Any] = {}
    document = ""
    if toml_path:
        try:
            document = Path(toml_path).read_text(encoding="utf-8")  # TOML and JSON are UTF-8
            tree = parse_file(toml_path, document)
        except (OSError, UnicodeDecodeError, *FileError) as exc:
            raise ConfigError(f"config file {toml_path}: {exc}") from exc
    from_env: dict[str, str] = {}
    for name, raw in (env or {}).items():
        if not name.startswith("MONOTAPE_") or name in CLIENT_ENV:
            continue
        dotted = name.removeprefix("MONOTAPE_").lower().replace("__", ".")
        from_env[dotted] = name
        _set_path(tree, dotted, raw)
    from_flags: set[str] = set()
    for dotted, value in (overrides or {}).items():
        if value is not None:
            from_flags.add(dotted)
            from_env.pop(dotted, None)  # the flag's value is the one validated, not the variable's
            _set_path(tree, dotted, value)
    try:
        # strict=False: environment values arrive as strings ("9000" -> 9000).
        return msgspec.convert(tree, Config, strict=False)
    except msgspec.ValidationError as exc:
        # msgspec says "Expected `int` <= 65535 - at `$.server.ws_port`": lead with the field.
        path, text = invalid_field(exc)
        unknown = re.search(r"unknown field `([^`]*)`", text)
        named = _NAMED.match(text)
        if unknown:
            path = f"{path}.{unknown.group(1)}" if path else unknown.group(1)
            text = "no such setting"
        elif named and named.group(1).startswith(path):
            path, text = named.group(1), text[named.end() :]
        if path in _RULES:  # msgspec's words for a union ("Invalid enum value") name no choice
            text = _RULES[path]
        if path in from_env:
            text += f" (environment variable {from_env[path]})"
        where = f"{path}: " if path else ""
        source = file_source(toml_path, document, path, {*from_env, *from_flags})
        raise ConfigError(f"{source or 'invalid configuration'}: {where}{text}", path) from exc
