"""wire/codes.py: close codes are written once; docs/wire.md's close table lists them all."""

from __future__ import annotations

import re
from pathlib import Path

from monotape.platform.wire.codes import CloseCode, ErrorCode, Kind

WIRE_MD = Path(__file__).resolve().parents[2] / "docs" / "wire.md"


def _table_codes(heading: str) -> list[int]:
    """The first column of the markdown table that follows the line ``heading``."""
    lines = WIRE_MD.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    codes = []
    for line in lines[start + 1 :]:
        m = re.match(r"^\| (\d+) \|", line)
        if m:
            codes.append(int(m.group(1)))
        elif codes and not line.startswith("|"):
            break
    return codes


def test_close_table_lists_every_close_code_once() -> None:
    assert _table_codes("Every close code the server sends") == sorted(int(c) for c in CloseCode)


def test_protocol_and_internal_errors_are_there() -> None:
    assert (int(CloseCode.PROTOCOL_ERROR), int(CloseCode.INTERNAL_ERROR)) == (1002, 1011)


def test_error_code_table_lists_every_error_code() -> None:
    assert _table_codes("### Error codes") == sorted(int(c) for c in ErrorCode)


def test_kinds_are_one_byte_and_distinct() -> None:
    # 1-9 are protocol 2 as it began; 10 (STALE) was added within it, which only the skip rule
    # for unknown kinds allows: a kind past the last one defined is skipped by older clients
    assert len({int(k) for k in Kind}) == len(Kind) and sorted(Kind) == list(range(1, 11))
