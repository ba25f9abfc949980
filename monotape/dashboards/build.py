"""``monotape dashboards build``: write the Grafana dashboards (or, with ``--check``, say
whether the checked-in ones are current)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .grafana import DEFAULT_OUT_DIR, build, stale_files
from .panels import DASHBOARDS

__all__ = ["add_build_arguments", "run_build"]


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default=str(DEFAULT_OUT_DIR),
        help=f"directory to write <uid>.json into (default {DEFAULT_OUT_DIR})",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a file differs from what would be written",
    )


def run_build(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.check:
        stale = stale_files(out)
        if stale:
            print(
                f"{out}: {', '.join(stale)} out of date: run `monotape dashboards build`",
                file=sys.stderr,
            )
            return 1
        print(f"{out} is up to date ({len(DASHBOARDS)} dashboards)")
        return 0
    try:
        written = build(out)
    except OSError as exc:
        print(f"monotape dashboards build: cannot write {out}: {exc.strerror}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0
