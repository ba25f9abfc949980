"""The command line: the only reader of argv and os.environ.

Every mistake a person can make here ends in one line on stderr that says what was wrong and
what to do, and exit code 2 (``ClientError``, ``ConfigError``, a bad flag), never a traceback.
The client commands share how they find the node and which token they show it
(``commands/clientside.py``); ``monotape run`` records where it listens in its data dir for them.
The flags' types and the common flags are in ``commands/flags.py``; ``monotape load``'s
subcommands in ``commands/load.py`` (they get the configuration read here).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from monotape import log
from monotape.alerts import add_build_arguments as add_alert_build_arguments
from monotape.alerts import run_build as run_alerts_build
from monotape.commands import load as load_commands
from monotape.commands.clientside import ClientError, check_data_dir, client_token, terminal_url
from monotape.commands.flags import (
    URL_HELP,
    Parser,
    add_common,
    add_token_flag,
    port,
    positive_float,
    positive_int,
    run_loop,
    seconds,
    writers_flag,
)
from monotape.config import Config, ConfigError, load_config
from monotape.dashboards.build import add_build_arguments as add_dashboard_build_arguments
from monotape.dashboards.build import run_build as run_dashboards_build
from monotape.histograms import add_report_arguments, run_report
from monotape.platform.auth import add_token_arguments, run_token

__all__ = ["main"]


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
        "server.native_writer": args.native_writer,
        # --single-process is --writers 0: today's one-process node
        "host.writers": 0 if args.single_process else args.writers,
    }
    from monotape.commands.foreground import node_only_reason, process_model, run_node

    cfg = _config(args, overrides)
    if args.print_config:
        resolved = process_model(cfg)  # refuses what run would refuse
        # As configured ("auto" stays "auto": a config saved from this fits any machine); the
        # number run starts here goes to stderr, so stdout stays the config alone.
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(cfg)).decode() + "\n")
        if cfg.host.writers == "auto":
            n = resolved.host.writers
            why = node_only_reason(cfg) or "one writer process per core, at most 16"
            print(f'# host.writers = "auto" resolves to {n} here: {why}', file=sys.stderr)
        return 0
    if cfg.feeds.replay and not Path(cfg.feeds.replay).is_file():
        raise ClientError(
            f"--replay {cfg.feeds.replay}: no such file (docs/replay.md describes the format)"
        )
    check_data_dir(cfg.data_dir)
    return run_loop(run_node(cfg, args.duration))


def cmd_tape(args: argparse.Namespace) -> int:
    from monotape.commands.tape import run_tape

    cfg = _config(args, {})
    url = terminal_url(args.url, cfg)
    token, minted = client_token(args.token, cfg, sub="monotape-tape")
    with contextlib.suppress(KeyboardInterrupt):
        return run_loop(
            run_tape(
                url,
                token,
                args.keys,
                args.priority or [],
                args.count,
                cfg,
                minted=minted,
                max_hz=args.max_hz,
                refresh=args.refresh,
            )
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
    return load_commands.churn(args, _config(args, {}))


def cmd_load_soak(args: argparse.Namespace) -> int:
    return load_commands.soak(args)


def cmd_load_replay(args: argparse.Namespace) -> int:
    return load_commands.replay(args, _config(args, {}))


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="monotape", description="Market-data fan-out: a price never moves backwards."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start the whole pipeline on loopback (simulated venues)")
    add_common(run)
    run.add_argument("--host", help="listen address (default 127.0.0.1)")
    run.add_argument("--ws-port", type=port, help="WebSocket port (default 8765; 0 picks one)")
    run.add_argument("--admin-port", type=port, help="admin API port (default 8081; 0 picks one)")
    run.add_argument("--lanes", type=positive_int, help="sequencer lanes (default 4)")
    run.add_argument(
        "--rate", type=positive_float, help="simulated ticks/s across venues (default 20000)"
    )
    run.add_argument("--spike-every", type=seconds, help="seconds between 190k/s spikes (0: none)")
    run.add_argument("--replay", help="replay an NDJSON tick file instead of simulating")
    run.add_argument(
        "--replay-speed", type=positive_float, help="replay pacing factor (default 1.0)"
    )
    run.add_argument("--replay-start-delay", type=seconds, help="seconds before the replay starts")
    run.add_argument(
        "--restart-every", type=seconds, help="restart a handler per venue every N s (0: never)"
    )
    run.add_argument(
        "--nats", metavar="URL[,URL...]", help="use the NATS tick bus at these servers (bus=nats)"
    )
    run.add_argument("--duration", type=positive_float, help="stop by itself after N seconds")
    run.add_argument("--print-config", action="store_true", help="print the effective config")
    run.add_argument(
        "--enable-fault-injection",
        action="store_true",
        help="allow POST /admin/faults/dangling-entry (corrupts one index entry: for alert "
        "drills and tests; off by default, server.fault_injection)",
    )
    run.add_argument(
        "--native-writer",
        action=argparse.BooleanOptionalAction,
        help="write frames with the native send loop, or the pure-Python transport path "
        "(default on when built; server.native_writer, env MONOTAPE_SERVER__NATIVE_WRITER)",
    )
    model = run.add_mutually_exclusive_group()
    model.add_argument(
        "--writers",
        type=writers_flag,
        metavar="N|auto",
        help="N writer processes sharing the WebSocket port, fed by a sequencer process, with a "
        "process per feed handler and one for the venues (docs/processes.md); 0: everything "
        'in one process (default: one writer per core, at most 16; host.writers = "auto", '
        "env MONOTAPE_HOST__WRITERS)",
    )
    model.add_argument(
        "--single-process",
        action="store_true",
        help="everything in one process (the same as --writers 0)",
    )
    run.set_defaults(func=cmd_run)

    tape = sub.add_parser("tape", help="show a live tape of some symbols in the terminal")
    add_common(tape)
    tape.add_argument("keys", nargs="+", metavar="KEY", help="venue-qualified keys, e.g. XNAS:AAPL")
    tape.add_argument("--url", help=URL_HELP)
    add_token_flag(tape)
    # one key per flag, repeatable: a list-taking flag would swallow the keys typed after it
    tape.add_argument(
        "--priority",
        action="append",
        metavar="KEY",
        help="put KEY in an order ticket (its ticks at once, not conflated); repeat for more",
    )
    tape.add_argument("--count", type=positive_int, help="stop after N updates")
    tape.add_argument(
        "--max-hz",
        type=float,
        choices=(25.0, 12.5, 5.0, 2.5, 1.0),
        default=25.0,
        metavar="HZ",
        help="frames per second at most: 25 (default), 12.5, 5, 2.5 or 1",
    )
    tape.add_argument(
        "--refresh",
        action="store_true",
        help="refresh the token on the open connection before it expires (a token minted "
        "from the data dir's dev key; not with --token)",
    )
    tape.set_defaults(func=cmd_tape)

    symbols = sub.add_parser(
        "symbols",
        help="list symbol keys (and prices): from the running node, else the built-in universe",
    )
    add_common(symbols)
    symbols.add_argument(
        "pattern", nargs="?", metavar="PATTERN", help="glob (XNAS:*) or substring (AAPL)"
    )
    symbols.add_argument(
        "--admin-url", help="the node's admin API (default: the running node's, from its data dir)"
    )
    add_token_flag(symbols, admin=True)
    symbols.add_argument("--json", action="store_true", help="JSON instead of a table")
    symbols.set_defaults(func=cmd_symbols)
    token = sub.add_parser("token", help="mint a token signed by the data dir's dev key")
    add_common(token)
    add_token_arguments(token)
    token.set_defaults(func=cmd_token)

    hdr = sub.add_parser("hdr", help="latency histograms from the interval logs")
    hdr_sub = hdr.add_subparsers(dest="hdr_command", required=True)
    report = hdr_sub.add_parser(
        "report", help="exact percentiles of one stage over any window (merged HDR intervals)"
    )
    add_common(report)
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
    load_commands.add_churn(load_sub).set_defaults(func=cmd_load_churn)
    load_commands.add_soak(load_sub).set_defaults(func=cmd_load_soak)
    for p in load_commands.add_replay(load_sub):
        p.set_defaults(func=cmd_load_replay)
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
    except BrokenPipeError:
        # The reader left early (`monotape symbols | head`): not a mistake, and not a traceback.
        # Point stdout at /dev/null so the interpreter's flush at exit cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell shows for a tool the pipe stopped
    return result


if __name__ == "__main__":
    sys.exit(main())
