"""The command line: the only reader of argv and os.environ.

Every mistake a person can make here ends in one line on stderr that says what was wrong and
what to do, and exit code 2 (``ClientError``, ``ConfigError``, a bad flag), never a traceback.
The client commands share how they find the node and which token they show it
(``commands/clientside.py``); ``monotape run`` records where it listens in its data dir for them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import msgspec

from monotape import log
from monotape.alerts import add_build_arguments as add_alert_build_arguments
from monotape.alerts import run_build as run_alerts_build
from monotape.commands.clientside import (
    ClientError,
    admin_url,
    check_data_dir,
    client_token,
    connect_failure,
    terminal_url,
)
from monotape.config import Config, ConfigError, load_config
from monotape.dashboards.build import add_build_arguments as add_dashboard_build_arguments
from monotape.dashboards.build import run_build as run_dashboards_build
from monotape.histograms import add_report_arguments, run_report
from monotape.platform.auth import add_token_arguments, run_token

__all__ = ["main"]

T = TypeVar("T")


class _Parser(argparse.ArgumentParser):
    """A bad flag is one line (what, and where to read more) and exit 2, without the usage
    block argparse prints by default."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65_535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: use 1-65535, or 0 for a free one")
    return port


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _seconds(text: str) -> float:
    """A non-negative, finite number of seconds (0 usually means off)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be 0 or a positive number of seconds")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def _runner(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


_URL_HELP = (
    "the node's terminals URL (default: the running node's, from its data dir; "
    "else ws://127.0.0.1:8765/)"
)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML configuration file (env MONOTAPE_CONFIG)")
    p.add_argument(
        "--data-dir",
        help="state directory: epochs, dev keys, histogram logs, and the endpoints of the "
        "node running on it (env MONOTAPE_DATA_DIR, default ./.monotape)",
    )


def _token_flag(p: argparse.ArgumentParser, *, admin: bool = False) -> None:
    env = "MONOTAPE_ADMIN_TOKEN" if admin else "MONOTAPE_TOKEN"
    p.add_argument(
        "--token",
        help=f"JWT to present (env {env}; default: minted from the data dir's dev key, the "
        "one the monotape run beside it verifies); never printed",
    )


def _config(args: argparse.Namespace, overrides: dict[str, Any]) -> Config:
    """The effective configuration; the process's one log handler is set up from it."""
    overrides = {"data_dir": args.data_dir, **overrides}
    cfg = load_config(args.config or os.environ.get("MONOTAPE_CONFIG"), os.environ, overrides)
    log.configure(cfg.log_level)
    return cfg


def cmd_run(args: argparse.Namespace) -> int:
    overrides = {
        "server.ws_port": args.ws_port,
        "server.admin_port": args.admin_port,
        "server.host": args.host,
        "server.lanes": args.lanes,
        "simulator.rate": args.rate,
        "simulator.spike_every_s": args.spike_every,
        "feeds.replay": args.replay,
        "feeds.replay_speed": args.replay_speed,
        "feeds.replay_start_delay_s": args.replay_start_delay,
        "feeds.restart_every_s": args.restart_every,
        "bus": "nats" if args.nats else None,
        "nats.servers": args.nats,
        # off unless asked for: a node that can corrupt its own index must say so at start
        "server.fault_injection": True if args.enable_fault_injection else None,
    }
    cfg = _config(args, overrides)
    if args.print_config:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(cfg)).decode() + "\n")
        return 0
    if cfg.feeds.replay and not Path(cfg.feeds.replay).is_file():
        raise ClientError(
            f"--replay {cfg.feeds.replay}: no such file (docs/replay.md describes the format)"
        )
    check_data_dir(cfg.data_dir)
    from monotape.commands.foreground import run_node

    return _runner(run_node(cfg, args.duration))


def cmd_tape(args: argparse.Namespace) -> int:
    from monotape.commands.tape import run_tape

    cfg = _config(args, {})
    url = terminal_url(args.url, cfg)
    token, minted = client_token(args.token, cfg, sub="monotape-tape")
    with contextlib.suppress(KeyboardInterrupt):
        return _runner(
            run_tape(url, token, args.keys, args.priority or [], args.count, cfg, minted=minted)
        )
    return 0


def cmd_symbols(args: argparse.Namespace) -> int:
    from monotape.commands.symbols import run_symbols

    cfg = _config(args, {})
    return run_symbols(
        args.pattern or "", cfg, url=args.admin_url, token=args.token, as_json=args.json
    )


def cmd_token(args: argparse.Namespace) -> int:
    from monotape.commands.clientside import dev_key_path

    cfg = _config(args, {})
    fresh = not args.key and not dev_key_path(cfg).exists()
    if fresh:
        check_data_dir(cfg.data_dir)  # the key goes there: an unwritable one is one line
    code = run_token(args, cfg.data_dir, cfg.auth)
    if fresh and code == 0:
        # A key made just now is one no running node knows: say so, or the token's 401 would
        # be a mystery.
        print(
            f"monotape token: made a new dev key in {Path(cfg.data_dir).resolve()}; only a "
            "monotape run on this data dir accepts its tokens (--data-dir picks another)",
            file=sys.stderr,
        )
    return code


def cmd_hdr_report(args: argparse.Namespace) -> int:
    cfg = _config(args, {})
    return run_report(args, cfg.data_dir)


def cmd_load_churn(args: argparse.Namespace) -> int:
    from monotape.loadgen.churn import (
        ChurnConfig,
        ChurnFailed,
        ChurnRefused,
        print_progress,
        run_churn,
    )

    cfg = _config(args, {})
    url = terminal_url(args.url, cfg)
    token, minted = client_token(args.token, cfg, sub="monotape-churn")
    knobs = {
        f: getattr(args, f)
        for f in ChurnConfig.__struct_fields__
        if getattr(args, f, None) is not None
    }
    try:
        churn = msgspec.convert(knobs, ChurnConfig)
    except msgspec.ValidationError as exc:
        print(f"monotape load churn: {exc}", file=sys.stderr)
        return 2
    try:
        report = _runner(run_churn(url, churn, print_progress, token=token))
    except ChurnFailed as exc:  # refused, or nothing listening: the reason and what to do
        raise connect_failure(url, exc.failure, cfg, minted) from None
    except ChurnRefused as exc:
        print(f"monotape load churn: {exc}", file=sys.stderr)
        return 2
    sys.stderr.write("\n")
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(report)).decode() + "\n")
    return 0 if report.errors == 0 else 1


def _add_churn(load_sub: argparse._SubParsersAction[_Parser]) -> None:
    from monotape.loadgen.churn import ChurnConfig

    churn = load_sub.add_parser(
        "churn",
        help="terminals that open, subscribe, change and leave (6%% by RST); loopback only",
    )
    _common(churn)
    churn.add_argument("--url", help=_URL_HELP)
    _token_flag(churn)
    defaults = ChurnConfig()
    for name in ChurnConfig.__struct_fields__:
        default = getattr(defaults, name)
        churn.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=type(default),
            help=f"default {default} (docs/churn.md)",
        )
    churn.set_defaults(func=cmd_load_churn)


def _load_knobs(args: argparse.Namespace, cfg: Config) -> Any:
    from monotape.loadgen import LoadConfig

    knobs = {
        f: getattr(args, f)
        for f in LoadConfig.__struct_fields__
        if getattr(args, f, None) is not None
    }
    knobs["admin_url"] = admin_url(knobs.get("admin_url"), cfg)
    return msgspec.convert(knobs, LoadConfig)


def cmd_load_replay(args: argparse.Namespace) -> int:
    from urllib.parse import quote

    from monotape.loadgen import (
        LoadRefused,
        TraceError,
        compare,
        load_trace,
        poisson_like,
        run_load,
        storm_trace,
    )
    from monotape.loadgen.harness import LoadFailed

    cfg = _config(args, {})
    bare = terminal_url(args.url, cfg)
    token, minted = client_token(args.token, cfg, sub="monotape-load")
    url = bare
    if token:  # the workers dial this URL; every report and message strips the query
        url += ("&" if "?" in url else "?") + "token=" + quote(token)
    name = f"monotape load {args.load_command}"
    try:
        load = _load_knobs(args, cfg)
        if args.load_command == "storm":
            trace = storm_trace(
                terminals=args.terminals,
                duration_s=args.duration,
                open_at_s=args.open_at,
                open_spread_s=args.open_spread,
                releases=tuple(args.release or ()),
                release_share=args.release_share,
                seed=load.seed,
            )
        else:
            trace = load_trace(args.trace)
    except (msgspec.ValidationError, TraceError, ValueError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    try:
        report = run_load(url, trace, load)
        contrast = run_load(url, poisson_like(trace, load.seed), load) if args.poisson else None
    except LoadFailed as exc:  # refused, or nothing listening: the reason and what to do
        raise connect_failure(bare, exc.failure, cfg, minted) from None
    except LoadRefused as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    sys.stderr.write("\n")
    if args.json:
        sys.stdout.write(msgspec.json.format(report.to_json()).decode() + "\n")
        if contrast is not None:
            sys.stdout.write(msgspec.json.format(contrast.to_json()).decode() + "\n")
    else:
        print(report.format_table())
        if contrast is not None:
            print("\ncorrelated (A) vs Poisson with the same mean (B):")
            print(compare(report, contrast))
    return 0 if report.errors == 0 and report.all_connected_at_end else 1


def _add_load_replay(load_sub: argparse._SubParsersAction[_Parser]) -> None:
    from monotape.loadgen import LoadConfig

    replay = load_sub.add_parser(
        "replay", help="replay an arrival trace (docs/load.md) over several processes; loopback"
    )
    replay.add_argument(
        "trace", help="trace file (JSON, docs/load.md; e.g. tests/traces/open_storm_small.json)"
    )
    storm = load_sub.add_parser(
        "storm",
        help="a correlated reconnect storm at the open; --release SECOND adds a data-release "
        "storm; loopback only",
    )
    storm.add_argument(
        "--terminals", type=_positive_int, default=2000, help="connects at the open (default 2000)"
    )
    storm.add_argument("--duration", type=_positive_int, default=30, help="trace length, s")
    storm.add_argument("--open-at", type=int, default=5, help="second of the open")
    storm.add_argument("--open-spread", type=int, default=1, choices=(1, 2), help="s")
    storm.add_argument(
        "--release",
        type=int,
        action="append",
        metavar="SECOND",
        help="a data release at this second: --release-share of the terminals reconnect "
        "(repeatable; none by default)",
    )
    storm.add_argument("--release-share", type=float, default=0.5, help="share that reconnects")
    defaults = LoadConfig()
    for p in (replay, storm):
        _common(p)
        p.add_argument("--url", help=_URL_HELP)
        _token_flag(p)
        p.add_argument("--poisson", action="store_true", help="also run the Poisson contrast")
        p.add_argument("--json", action="store_true", help="msgspec JSON instead of a table")
        for field in LoadConfig.__struct_fields__:
            default = getattr(defaults, field)
            shown = (
                "the running node's admin URL (from its data dir), else http://127.0.0.1:8081"
                if field == "admin_url"
                else default
            )
            p.add_argument(
                "--" + field.replace("_", "-"),
                dest=field,
                type=str if default is None else type(default),
                help=f"default {shown} (docs/load.md)",
            )
        p.set_defaults(func=cmd_load_replay)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="monotape", description="Market-data fan-out: a price never moves backwards."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start the whole pipeline on loopback (simulated venues)")
    _common(run)
    run.add_argument("--host", help="listen address (default 127.0.0.1)")
    run.add_argument("--ws-port", type=_port, help="WebSocket port (default 8765; 0 picks one)")
    run.add_argument("--admin-port", type=_port, help="admin API port (default 8081; 0 picks one)")
    run.add_argument("--lanes", type=_positive_int, help="sequencer lanes (default 4)")
    run.add_argument(
        "--rate", type=_positive_float, help="simulated ticks/s across venues (default 20000)"
    )
    run.add_argument("--spike-every", type=_seconds, help="seconds between 190k/s spikes (0: none)")
    run.add_argument("--replay", help="replay an NDJSON tick file instead of simulating")
    run.add_argument(
        "--replay-speed", type=_positive_float, help="replay pacing factor (default 1.0)"
    )
    run.add_argument("--replay-start-delay", type=_seconds, help="seconds before the replay starts")
    run.add_argument(
        "--restart-every", type=_seconds, help="restart a handler per venue every N s (0: never)"
    )
    run.add_argument(
        "--nats", metavar="URL[,URL...]", help="use the NATS tick bus at these servers (bus=nats)"
    )
    run.add_argument("--duration", type=_positive_float, help="stop by itself after N seconds")
    run.add_argument("--print-config", action="store_true", help="print the effective config")
    run.add_argument(
        "--enable-fault-injection",
        action="store_true",
        help="allow POST /admin/faults/dangling-entry (corrupts one index entry: for alert "
        "drills and tests; off by default, server.fault_injection)",
    )
    run.set_defaults(func=cmd_run)

    tape = sub.add_parser("tape", help="show a live tape of some symbols in the terminal")
    _common(tape)
    tape.add_argument("keys", nargs="+", metavar="KEY", help="venue-qualified keys, e.g. XNAS:AAPL")
    tape.add_argument("--url", help=_URL_HELP)
    _token_flag(tape)
    tape.add_argument("--priority", nargs="*", metavar="KEY", help="mark keys as order-ticket")
    tape.add_argument("--count", type=_positive_int, help="stop after N updates")
    tape.set_defaults(func=cmd_tape)

    symbols = sub.add_parser(
        "symbols",
        help="list symbol keys (and prices): from the running node, else the built-in universe",
    )
    _common(symbols)
    symbols.add_argument(
        "pattern", nargs="?", metavar="PATTERN", help="glob (XNAS:*) or substring (AAPL)"
    )
    symbols.add_argument(
        "--admin-url", help="the node's admin API (default: the running node's, from its data dir)"
    )
    _token_flag(symbols, admin=True)
    symbols.add_argument("--json", action="store_true", help="JSON instead of a table")
    symbols.set_defaults(func=cmd_symbols)
    token = sub.add_parser("token", help="mint a token signed by the data dir's dev key")
    _common(token)
    add_token_arguments(token)
    token.set_defaults(func=cmd_token)

    hdr = sub.add_parser("hdr", help="latency histograms from the interval logs")
    hdr_sub = hdr.add_subparsers(dest="hdr_command", required=True)
    report = hdr_sub.add_parser(
        "report", help="exact percentiles of one stage over any window (merged HDR intervals)"
    )
    _common(report)
    add_report_arguments(report)
    report.set_defaults(func=cmd_hdr_report)

    alerts = sub.add_parser("alerts", help="Prometheus alert rules, built from the code")
    alerts_sub = alerts.add_subparsers(dest="alerts_command", required=True)
    alerts_build = alerts_sub.add_parser(
        "build", help="write deploy/prometheus/rules/monotape.yml (docs/runbooks.md per alert)"
    )
    add_alert_build_arguments(alerts_build)
    alerts_build.set_defaults(func=run_alerts_build)

    dashboards = sub.add_parser("dashboards", help="Grafana dashboards, built from the code")
    dashboards_sub = dashboards.add_subparsers(dest="dashboards_command", required=True)
    dashboards_build = dashboards_sub.add_parser(
        "build", help="write deploy/grafana/dashboards/*.json (the panels of /dashboards)"
    )
    add_dashboard_build_arguments(dashboards_build)
    dashboards_build.set_defaults(func=run_dashboards_build)

    load = sub.add_parser("load", help="load harnesses against a running server (loopback)")
    load_sub = load.add_subparsers(dest="load_command", required=True)
    _add_churn(load_sub)
    _add_load_replay(load_sub)
    return parser


def _prog(args: argparse.Namespace) -> str:
    words = ["monotape", args.command]
    for sub in ("load_command", "hdr_command", "alerts_command", "dashboards_command"):
        if getattr(args, sub, None):
            words.append(getattr(args, sub))
    return " ".join(words)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.func(args)
    except (ConfigError, ClientError) as exc:
        print(f"{_prog(args)}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return result


if __name__ == "__main__":
    sys.exit(main())
