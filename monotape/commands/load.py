"""``monotape load churn|soak|replay|storm``: the load tools (``monotape/loadgen``) on the
command line.

The one product module besides ``monotape.cli`` that reaches the load tools: it adds their
subparsers to the CLI's parser and runs them with the configuration the CLI read (the CLI stays
the only reader of argv and the environment). Loopback only, like the tools themselves.

``soak``, and ``churn --writers N``, start the node they load themselves (``monotape run``, or
``monotape run --writers N``: the multi-process host) and end with the soak's verdict on it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TypeVar

import msgspec

from monotape.commands.clientside import (
    ClientError,
    admin_url,
    client_token,
    connect_failure,
    terminal_url,
)
from monotape.commands.flags import (
    URL_HELP,
    SubParsers,
    add_common,
    add_token_flag,
    bounded,
    positive_int,
    run_loop,
)
from monotape.config import Config, invalid_field
from monotape.loadgen import LoadConfig

__all__ = ["add_churn", "add_replay", "add_soak", "churn", "replay", "soak"]

_WRITERS_RULE = "must be 0..16, got {text}"

S = TypeVar("S", bound=msgspec.Struct)


def churn(args: argparse.Namespace, cfg: Config) -> int:
    from monotape.loadgen.churn import (
        ChurnConfig,
        ChurnFailed,
        ChurnRefused,
        print_progress,
        run_churn,
    )

    if args.writers is not None:
        return _churn_own_node(args)
    knobs = _knobs(args, ChurnConfig)  # a bad flag first: it needs no node and no dev key
    url = terminal_url(args.url, cfg)
    token, minted = client_token(args.token, cfg, sub="monotape-churn")
    try:
        report = run_loop(run_churn(url, knobs, print_progress, token=token))
    except ChurnFailed as exc:  # refused, or nothing listening: the reason and what to do
        raise connect_failure(url, exc.failure, cfg, minted) from None
    except ChurnRefused as exc:
        print(f"monotape load churn: {exc}", file=sys.stderr)
        return 2
    sys.stderr.write("\n")
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(report)).decode() + "\n")
    return 0 if report.errors == 0 else 1


def _churn_own_node(args: argparse.Namespace) -> int:
    """``load churn --writers N``: the churn against a node of its own, judged by the soak's
    verdict (report lines and verdict on stderr, the churn's report on stdout)."""
    from monotape.loadgen.churn import ChurnConfig
    from monotape.loadgen.soak import SoakConfig, run_soak

    if args.url:
        print("monotape load churn: --writers starts its own node; drop --url", file=sys.stderr)
        return 2
    plan = SoakConfig(
        writers=args.writers,
        churn=_knobs(args, ChurnConfig),
        warmup_s=3.0,
        settle_s=8.0,  # 4 invariant checks at 2 s
        sample_every_s=2.0,
        report_every_s=10.0,
        invariant_interval_s=2.0,
    )
    try:
        verdict = run_loop(run_soak(plan, sys.stderr))
    except RuntimeError as exc:  # the node did not start
        print(f"monotape load churn: {exc}", file=sys.stderr)
        return 1
    if verdict.churn is not None:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(verdict.churn)).decode() + "\n")
    return 0 if verdict.passed else 1


def _add_writers(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--writers",
        type=bounded(int, "a whole number", lambda v: 0 <= v <= 16, _WRITERS_RULE),
        metavar="N",
        help=what,
    )


def add_churn(load_sub: SubParsers) -> argparse.ArgumentParser:
    from monotape.loadgen.churn import ChurnConfig

    parser = load_sub.add_parser(
        "churn",
        help="terminals that open, subscribe, change and leave (6%% by RST); loopback only",
    )
    add_common(parser)
    parser.add_argument("--url", help=URL_HELP)
    add_token_flag(parser)
    _add_writers(
        parser,
        "churn a node of its own, `monotape run --writers N` (0: one process), instead of the "
        "running one, and judge it with the soak's verdict (docs/churn.md)",
    )
    _add_knobs(parser, ChurnConfig(), "docs/churn.md")
    return parser


def soak(args: argparse.Namespace) -> int:
    """``load soak``: ``python -m monotape.loadgen.soak`` as a subcommand (docs/soak.md)."""
    from monotape.loadgen.soak import run_soak
    from monotape.loadgen.soak_plan import config_from_namespace

    plan = config_from_namespace(args)
    try:
        verdict = run_loop(run_soak(plan))
    except RuntimeError as exc:  # the node did not start
        print(f"monotape load soak: {exc}", file=sys.stderr)
        return 1
    return 0 if verdict.passed else 1


def add_soak(load_sub: SubParsers) -> argparse.ArgumentParser:
    from monotape.loadgen.soak_plan import add_soak_flags

    parser = load_sub.add_parser(
        "soak",
        help="start `monotape run` (--writers N: the multi-process host), churn it for hours, "
        "then judge it: PASS/FAIL (docs/soak.md); loopback only",
    )
    add_soak_flags(parser)
    return parser


def _add_knobs(
    p: argparse.ArgumentParser,
    defaults: msgspec.Struct,
    doc: str,
    shown: dict[str, str] | None = None,
) -> None:
    """A flag per knob of a tool's config struct (``--drain-s`` for ``drain_s``), each of the
    field's type and defaulting to None: a flag not given leaves the struct's default."""
    for field in defaults.__struct_fields__:
        default = getattr(defaults, field)
        p.add_argument(
            "--" + field.replace("_", "-"),
            dest=field,
            type=str if default is None else type(default),
            help=f"default {(shown or {}).get(field, default)} ({doc})",
        )


def _given(args: argparse.Namespace, struct: type[msgspec.Struct]) -> dict[str, Any]:
    """The knobs of ``struct`` that the command line gave (see ``_add_knobs``)."""
    return {
        f: getattr(args, f) for f in struct.__struct_fields__ if getattr(args, f, None) is not None
    }


def _knobs(args: argparse.Namespace, struct: type[S], **derived: Any) -> S:
    """The knobs of ``struct`` the command line gave, and ``derived`` ones, as ``struct``. A
    value a field refuses names its flag, as argparse names a flag it refuses: msgspec's
    "at `$.duration_s`" is the struct's word for ``--duration-s`` (``_add_knobs``)."""
    given = _given(args, struct)
    try:
        return msgspec.convert({**given, **derived}, struct)
    except msgspec.ValidationError as exc:
        field, why = invalid_field(exc)
        if field not in given or field in derived:  # not a flag's value: msgspec's own words
            raise ClientError(str(exc)) from None
        flag = "--" + field.replace("_", "-")
        raise ClientError(f"argument {flag}: {why}, got {given[field]}") from None


def _load_knobs(args: argparse.Namespace, cfg: Config) -> LoadConfig:
    return _knobs(args, LoadConfig, admin_url=admin_url(args.admin_url, cfg))


def replay(args: argparse.Namespace, cfg: Config) -> int:
    """``load replay TRACE`` and ``load storm``: a trace replayed by the load harness."""
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

    load = _load_knobs(args, cfg)  # a bad flag first: it needs no node and no dev key
    bare = terminal_url(args.url, cfg)
    token, minted = client_token(args.token, cfg, sub="monotape-load")
    url = bare
    if token:  # the workers dial this URL; every report and message strips the query
        url += ("&" if "?" in url else "?") + "token=" + quote(token)
    name = f"monotape load {args.load_command}"
    try:
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


def add_replay(load_sub: SubParsers) -> tuple[argparse.ArgumentParser, ...]:
    """The ``replay`` and ``storm`` subparsers (both run ``replay``)."""
    replay_parser = load_sub.add_parser(
        "replay", help="replay an arrival trace (docs/load.md) over several processes; loopback"
    )
    replay_parser.add_argument(
        "trace", help="trace file (JSON, docs/load.md; e.g. tests/traces/open_storm_small.json)"
    )
    storm = load_sub.add_parser(
        "storm",
        help="a correlated reconnect storm at the open; --release SECOND adds a data-release "
        "storm; loopback only",
    )
    storm.add_argument(
        "--terminals", type=positive_int, default=2000, help="connects at the open (default 2000)"
    )
    storm.add_argument("--duration", type=positive_int, default=30, help="trace length, s")
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
    shown = {
        "admin_url": "the running node's admin URL (from its data dir), else http://127.0.0.1:8081"
    }
    for p in (replay_parser, storm):
        add_common(p)
        p.add_argument("--url", help=URL_HELP)
        add_token_flag(p)
        p.add_argument("--poisson", action="store_true", help="also run the Poisson contrast")
        p.add_argument("--json", action="store_true", help="msgspec JSON instead of a table")
        _add_knobs(p, LoadConfig(), "docs/load.md", shown)
    return replay_parser, storm
