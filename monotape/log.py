"""Structured logs: one JSON line on stderr per event that matters (DESIGN: Configuration and logs).

Never one per tick or per frame; never a token or a secret (callers pass only what is safe).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

__all__ = ["log_event", "set_stream"]

_stream: TextIO = sys.stderr


def set_stream(stream: TextIO) -> None:
    global _stream
    _stream = stream


def log_event(event: str, level: str = "info", **fields: Any) -> None:
    record = {"ts": round(time.time(), 3), "level": level, "event": event, **fields}
    try:
        _stream.write(json.dumps(record, default=str) + "\n")
        _stream.flush()
    except (OSError, ValueError):
        pass  # a closed stderr must never take the pipeline down
