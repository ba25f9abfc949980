"""The command line: the only reader of argv and os.environ (DESIGN: CLI)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from monotape.config import Config, ConfigError, load_config
from monotape.histograms import add_report_arguments, run_report
from monotape.platform.auth import add_token_arguments, run_token

__all__ = ["main"]

T = TypeVar("T")


def _runner(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML configuration file (env MONOTAPE_CONFIG)")
    p.add_argument(
        "--data-dir",
        help="state directory: epochs, dev keys, histogram logs "
        "(env MONOTAPE_DATA_DIR, default ./.monotape)",
    )


def _config(args: argparse.Namespace, overrides: dict[str, Any]) -> Config:
    overrides = {"data_dir": args.data_dir, **overrides}
    return load_config(args.config or os.environ.get("MONOTAPE_CONFIG"), os.environ, overrides)


async def _run(cfg: Config, duration: float | None) -> int:
    from monotape.platform.node import Node

    node = Node(cfg)
    await node.start()
    host = cfg.server.host
    source = f"replay {cfg.feeds.replay}" if node.replay else f"{len(node.handlers)} feed handlers"
    print(
        f"monotape is running: {len(node.universe)} instruments, {source}\n"
        f"  terminals  ws://{host}:{node.ws_port}/      (try: monotape tape XNAS:AAPL)\n"
        f"  metrics    http://{host}:{node.admin_port}/metrics\n"
        f"  health     http://{host}:{node.admin_port}/healthz\n"
        f"  admin      http://{host}:{node.admin_port}/admin/  "
        f"(Authorization: Bearer $(monotape token --sub you --admin))\n"
        f"  data dir   {cfg.data_dir}\n"
        "Ctrl-C stops it.",
        flush=True,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, node.request_stop)
    try:
        if duration:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(node.wait(), duration)
        else:
            await node.wait()
    finally:
        await node.stop()
    return 1 if node.failed else 0


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
    }
    cfg = _config(args, overrides)
    if args.print_config:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(cfg)).decode() + "\n")
        return 0
    return _runner(_run(cfg, args.duration))


async def _tape(url: str, keys: Sequence[str], priority: Sequence[str], count: int | None) -> int:
    from monotape.platform.sdk import ServerError, TerminalClient

    client = TerminalClient(url)
    try:
        await client.connect()
    except OSError as exc:
        print(f"cannot connect to {url}: {exc}", file=sys.stderr)
        return 2
    try:
        try:
            await client.subscribe(keys)
            if priority:
                await client.set_priority(priority)
        except ServerError as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return 2
        print(
            f"{'time':<12} {'symbol':<16} {'bid':>12} {'ask':>12} {'last':>12} {'size':>7}  "
            f"{'version':<26} path"
        )
        n = 0
        async for q in client.updates():
            stamp = datetime.now().strftime("%H:%M:%S.%f")[:-3]
            print(
                f"{stamp:<12} {q.key:<16} {q.price(q.bid):>12.{q.decimals}f} "
                f"{q.price(q.ask):>12.{q.decimals}f} {q.price(q.last):>12.{q.decimals}f} "
                f"{q.size:>7}  {q.epoch}:{q.seq:<24} {q.source}",
                flush=True,
            )
            n += 1
            if count is not None and n >= count:
                break
        if client.stats.regressions:
            print(f"REGRESSIONS SEEN: {client.stats.regressions}", file=sys.stderr)
            return 1
        return 0
    finally:
        await client.close()


def _terminal_url(args: argparse.Namespace, cfg: Config) -> str:
    """The server URL with a token: --token, else one minted from the dev key in the data
    directory (the embedded default: `monotape run` beside it verifies it)."""
    from urllib.parse import quote

    from monotape.platform.auth import ensure_dev_keys, mint_token

    url: str = args.url or f"ws://{cfg.server.host}:{cfg.server.ws_port}/"
    token = args.token or os.environ.get("MONOTAPE_TOKEN")
    if not token and cfg.auth.enabled and not (cfg.auth.public_key_file or cfg.auth.jwks_file):
        keys = ensure_dev_keys(cfg.data_dir)
        token = mint_token(
            keys.private_pem_path,
            sub="monotape-tape",
            ttl_s=8 * 3600,
            aud=cfg.auth.audience,
            iss=cfg.auth.issuer,
        )
    if token:
        url += ("&" if "?" in url else "?") + "token=" + quote(token)
    return url


def cmd_tape(args: argparse.Namespace) -> int:
    cfg = _config(args, {})
    url = _terminal_url(args, cfg)
    with contextlib.suppress(KeyboardInterrupt):
        return _runner(_tape(url, args.keys, args.priority or [], args.count))
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    cfg = _config(args, {})
    return run_token(args, cfg.data_dir, cfg.auth)


def cmd_hdr_report(args: argparse.Namespace) -> int:
    cfg = _config(args, {})
    return run_report(args, cfg.data_dir)


def cmd_load_churn(args: argparse.Namespace) -> int:
    from monotape.platform.churn import ChurnConfig, ChurnRefused, print_progress, run_churn

    cfg = _config(args, {})
    url = args.url or f"ws://{cfg.server.host}:{cfg.server.ws_port}/"
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
        report = _runner(run_churn(url, churn, print_progress))
    except ChurnRefused as exc:
        print(f"monotape load churn: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(report)).decode() + "\n")
    return 0 if report.errors == 0 else 1


def _add_churn(load_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from monotape.platform.churn import ChurnConfig

    churn = load_sub.add_parser(
        "churn",
        help="terminals that open, subscribe, change and leave (6%% by RST); loopback only",
    )
    _common(churn)
    churn.add_argument("--url", help="server URL (default ws://127.0.0.1:8765/)")
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
    from monotape.platform.load import LoadConfig

    knobs = {
        f: getattr(args, f)
        for f in LoadConfig.__struct_fields__
        if getattr(args, f, None) is not None
    }
    if "admin_url" not in knobs:
        knobs["admin_url"] = f"http://{cfg.server.host}:{cfg.server.admin_port}"
    return msgspec.convert(knobs, LoadConfig)


def cmd_load_replay(args: argparse.Namespace) -> int:
    from monotape.platform.load import (
        LoadRefused,
        TraceError,
        compare,
        load_trace,
        poisson_like,
        run_load,
        storm_trace,
    )

    cfg = _config(args, {})
    url = _terminal_url(args, cfg)  # mints a dev token from the data dir, like `monotape tape`
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


def _add_load_replay(load_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from monotape.platform.load import LoadConfig

    replay = load_sub.add_parser(
        "replay", help="replay an arrival trace (docs/load.md) over several processes; loopback"
    )
    replay.add_argument("trace", help="trace file (JSON, docs/load.md)")
    storm = load_sub.add_parser(
        "storm", help="a correlated open + data-release reconnect storm; loopback only"
    )
    storm.add_argument("--terminals", type=int, default=2000, help="connects at the open")
    storm.add_argument("--duration", type=int, default=30, help="trace length, s")
    storm.add_argument("--open-at", type=int, default=5, help="second of the open")
    storm.add_argument("--open-spread", type=int, default=1, choices=(1, 2), help="s")
    storm.add_argument("--release", type=int, action="append", help="data-release second")
    storm.add_argument("--release-share", type=float, default=0.5, help="share that reconnects")
    defaults = LoadConfig()
    for p in (replay, storm):
        _common(p)
        p.add_argument("--url", help="server URL (default ws://127.0.0.1:8765/)")
        p.add_argument("--token", help="JWT (env MONOTAPE_TOKEN; default: a dev-key token)")
        p.add_argument("--poisson", action="store_true", help="also run the Poisson contrast")
        p.add_argument("--json", action="store_true", help="msgspec JSON instead of a table")
        for field in LoadConfig.__struct_fields__:
            default = getattr(defaults, field)
            p.add_argument(
                "--" + field.replace("_", "-"),
                dest=field,
                type=str if default is None else type(default),
                help=f"default {default} (docs/load.md)",
            )
        p.set_defaults(func=cmd_load_replay)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monotape", description="Market-data fan-out: a price never moves backwards."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start the whole pipeline on loopback (simulated venues)")
    _common(run)
    run.add_argument("--host", help="listen address (default 127.0.0.1)")
    run.add_argument("--ws-port", type=int, help="WebSocket port (default 8765; 0 picks one)")
    run.add_argument("--admin-port", type=int, help="admin API port (default 8081; 0 picks one)")
    run.add_argument("--lanes", type=int, help="sequencer lanes (default 4)")
    run.add_argument("--rate", type=float, help="simulated ticks/s across venues (default 20000)")
    run.add_argument("--spike-every", type=float, help="seconds between 190k/s spikes (0: none)")
    run.add_argument("--replay", help="replay an NDJSON tick file instead of simulating")
    run.add_argument("--replay-speed", type=float, help="replay pacing factor (default 1.0)")
    run.add_argument("--replay-start-delay", type=float, help="seconds before the replay starts")
    run.add_argument("--restart-every", type=float, help="restart a handler per venue every N s")
    run.add_argument(
        "--nats", metavar="URL[,URL...]", help="use the NATS tick bus at these servers (bus=nats)"
    )
    run.add_argument("--duration", type=float, help="stop by itself after N seconds")
    run.add_argument("--print-config", action="store_true", help="print the effective config")
    run.set_defaults(func=cmd_run)

    tape = sub.add_parser("tape", help="show a live tape of some symbols in the terminal")
    _common(tape)
    tape.add_argument("keys", nargs="+", metavar="KEY", help="venue-qualified keys, e.g. XNAS:AAPL")
    tape.add_argument("--url", help="server URL (default ws://127.0.0.1:8765/)")
    tape.add_argument(
        "--token", help="JWT (env MONOTAPE_TOKEN; default: minted from the data dir's dev key)"
    )
    tape.add_argument("--priority", nargs="*", metavar="KEY", help="mark keys as order-ticket")
    tape.add_argument("--count", type=int, help="stop after N updates")
    tape.set_defaults(func=cmd_tape)
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

    load = sub.add_parser("load", help="load harnesses against a running server (loopback)")
    load_sub = load.add_subparsers(dest="load_command", required=True)
    _add_churn(load_sub)
    _add_load_replay(load_sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.func(args)
    except ConfigError as exc:
        print(f"monotape: {exc}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    sys.exit(main())
