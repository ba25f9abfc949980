"""A config file read as what it is (TOML, or JSON for a ``.json`` file: what ``monotape run
--print-config`` writes, so a configuration saved from it loads back), and where in it a refused
setting was written (config.load_config's errors name ``file:line``): tomllib keeps no
positions, so the line is found by parsing."""

from __future__ import annotations

import tomllib
from typing import Any

import msgspec

__all__ = ["FileError", "file_source", "parse_file"]

# What parse_file raises for a document it cannot read: its message says where (line, column).
FileError = (tomllib.TOMLDecodeError, msgspec.DecodeError)


def parse_file(path: str, text: str) -> dict[str, Any]:
    """The settings tree of a config file's ``text``: JSON when ``path`` ends in ``.json``
    (one object), else TOML."""
    if path.endswith(".json"):
        return msgspec.json.decode(text, type=dict[str, Any])
    return tomllib.loads(text)


def _holds(doc: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return False
        doc = doc[part]
    return True


def _overlaps(a: str, b: str) -> bool:  # setting either dotted path replaces the other's value
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _line_of(text: str, dotted: str) -> int | None:
    """The line of the TOML document ``text`` defining ``dotted``. tomllib keeps no positions,
    and a scanner would have to know dotted tables, dotted, quoted and inline keys: parse ever
    longer runs of lines instead. The first run holding the key ends with its statement, which
    starts after the longest shorter run that parses (none stops inside a multi-line string or
    array). Quadratic in the lines, and only run on an error: a config is ~100 lines."""
    lines = text.split("\n")  # TOML's newline; str.splitlines also splits on \x0c and others
    parsed = 0  # the longest run so far that parses without the key
    for end in range(1, len(lines) + 1):
        try:
            doc = tomllib.loads("\n".join(lines[:end]))
        except tomllib.TOMLDecodeError:
            continue
        if _holds(doc, dotted):
            return parsed + 1
        parsed = end
    return None


def file_source(path: str | None, text: str, dotted: str, elsewhere: set[str]) -> str | None:
    """``file:line`` (or ``file``) if the value refused at ``dotted`` came from the config file
    at ``path``, None if a variable or a flag set any of it. A field the file lacks is still its
    doing when only the file changed the field's struct: a check across fields
    (``__post_init__``) passes defaults. A JSON file is named without a line: the search by
    parsing is TOML's."""
    if not path or not dotted or any(_overlaps(dotted, other) for other in elsewhere):
        return None
    doc = parse_file(path, text)
    if _holds(doc, dotted):
        line = None if path.endswith(".json") else _line_of(text, dotted)
        return f"{path}:{line}" if line is not None else path
    struct = dotted.rpartition(".")[0]
    alone = bool(struct) and not any(_overlaps(struct, other) for other in elsewhere)
    return path if alone and _holds(doc, struct) else None
