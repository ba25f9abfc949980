"""What the command line's parsers share: the parser class, number flags, the common flags.

``monotape.cli`` builds the one parser and stays the only reader of argv; the commands that have
their own module (``commands/load.py``) add their subparsers with these pieces, so every command
reads a flag, and fails on a bad one, the same way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Literal, NoReturn, TypeAlias, TypeVar

from monotape.loops import run_loop

__all__ = [
    "URL_HELP",
    "Parser",
    "SubParsers",
    "add_common",
    "add_token_flag",
    "bounded",
    "port",
    "positive_float",
    "positive_int",
    "run_loop",
    "seconds",
    "writers_flag",
]

T = TypeVar("T")
N = TypeVar("N", int, float)


class Parser(argparse.ArgumentParser):
    """A bad flag is one line (what, and where to read more) and exit 2, without the usage
    block argparse prints by default."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """A subcommand refuses a flag it does not know itself, so the message names its own
        help (``monotape run --bogus``: see monotape run --help); argparse would hand the
        leftovers up to ``monotape``, whose help does not list the subcommand's flags. A
        subcommand's prog is its parent's plus its name: "monotape run", "monotape load churn"."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and " " in self.prog:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


# A string: argparse's action class is generic for the type checker only.
SubParsers: TypeAlias = "argparse._SubParsersAction[Parser]"


def bounded(
    parse: Callable[[str], N], kind: str, ok: Callable[[N], bool], rule: str
) -> Callable[[str], N]:
    """A number flag's type: ``parse`` the text (else "'x' is not <kind>"), then check ``ok``
    (else ``rule``, formatted with the flag's ``text`` and parsed ``value``)."""

    def convert(text: str) -> N:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(rule.format(text=text, value=value))
        return value

    return convert


_INF = float("inf")
port = bounded(
    int,
    "a port number",
    lambda v: 0 <= v <= 65_535,
    "{value} is not a port: use 1-65535, or 0 for a free one",
)
positive_int = bounded(int, "a whole number", lambda v: v >= 1, "{value} must be at least 1")
# A non-negative, finite number of seconds (0 usually means off).
seconds = bounded(
    float,
    "a number of seconds",
    lambda v: 0 <= v < _INF,
    "{text} must be 0 or a positive number of seconds",
)
positive_float = bounded(
    float, "a number", lambda v: 0 < v < _INF, "{text} must be a positive number"
)

_writer_number = bounded(
    int, "a whole number", lambda v: 0 <= v <= 16, "must be 0..16 or auto, got {text}"
)


def writers_flag(text: str) -> int | Literal["auto"]:
    """``--writers``: a number 0..16, or "auto" (a writer per core), as host.writers takes."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return _writer_number(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a writer count: use 0..16, or auto (one per core)"
        ) from None


URL_HELP = (
    "the node's terminals URL (default: the running node's, from its data dir; "
    "else ws://127.0.0.1:8765/)"
)


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        help="configuration file: TOML, or JSON if it ends in .json (what run --print-config "
        "writes) (env MONOTAPE_CONFIG)",
    )
    p.add_argument(
        "--data-dir",
        help="state directory: epochs, dev keys, histogram logs, and the endpoints of the "
        "node running on it (env MONOTAPE_DATA_DIR, default ./.monotape)",
    )


def add_token_flag(p: argparse.ArgumentParser, *, admin: bool = False) -> None:
    env = "MONOTAPE_ADMIN_TOKEN" if admin else "MONOTAPE_TOKEN"
    p.add_argument(
        "--token",
        help=f"JWT to present (env {env}; default: minted from the data dir's dev key, the "
        "one the monotape run beside it verifies); never printed",
    )
