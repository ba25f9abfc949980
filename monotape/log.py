"""One log: every event goes through stdlib ``logging``, one handler, one format per process.

``log_event(event, **fields)`` is the call-site API: one record per event that matters (start,
listening, handler restart, epoch bump, invariant tripped, drain progress), never one per tick or
per frame, and never a token or a secret (callers pass only what is safe). The record goes to the
``monotape`` logger; ``configure()`` (the CLI calls it once) puts one handler on the root logger,
so the libraries' records (websockets, uvicorn, asyncio) come out of the same handler in the same
format: a JSON line each on stderr, or a human line when stderr is a terminal. Levels come from
``MONOTAPE_LOG_LEVEL`` / ``log_level``.

Used as a library (a node inside a test, no ``configure()``), the first event installs the JSON
handler on the ``monotape`` logger only, so events are still JSON lines on stderr as before.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, Final, TextIO
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "LOG_EVERY_S",
    "HumanFormatter",
    "JsonFormatter",
    "LogFn",
    "Throttle",
    "configure",
    "log_event",
    "redact",
    "set_process",
    "set_stream",
]

LOGGER: Final = logging.getLogger("monotape")
_FIELDS: Final = "monotape_fields"
_EVENT: Final = "monotape_event"
# Library loggers that speak for the process: quiet below WARNING unless asked for debug.
_LIBRARIES: Final = ("websockets", "uvicorn", "uvicorn.error", "uvicorn.access", "asyncio")
_LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


# The process's name in every line (``set_process``): a role of the multi-process host.
_process: str | None = None


def set_process(name: str | None) -> None:
    """Every line from now on carries ``process=name`` (ours and the libraries'), so the lines
    of a host's roles (``writer-0``, ``sequencer``...) tell which process wrote them."""
    global _process
    _process = name or None


def _fields(record: logging.LogRecord) -> tuple[str, dict[str, Any]]:
    """(event, fields) of a record: ours carry them; a library's becomes event "log"."""
    fields: dict[str, Any] | None = getattr(record, _FIELDS, None)
    if fields is not None:
        event = str(getattr(record, _EVENT, record.msg))
        return event, fields if _process is None else {"process": _process, **fields}
    out: dict[str, Any] = {"logger": record.name, "message": record.getMessage()}
    if _process is not None:
        out = {"process": _process, **out}
    if record.exc_info:
        out["error"] = logging.Formatter().formatException(record.exc_info).splitlines()[-1]
    return "log", out


class JsonFormatter(logging.Formatter):
    """``{"ts": …, "level": …, "event": …, <fields>}``: one JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        event, fields = _fields(record)
        body = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "event": event,
            **fields,
        }
        return json.dumps(body, default=str)


class HumanFormatter(logging.Formatter):
    """``12:00:01.250 info  drain_progress closed=40 remaining=160`` for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        event, fields = _fields(record)
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        ms = int(record.msecs)
        parts = " ".join(f"{k}={v}" for k, v in fields.items())
        level = record.levelname.lower()
        return f"{stamp}.{ms:03d} {level:<7} {event} {parts}".rstrip()


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the stream it was given, or to whatever ``sys.stderr`` is at the time (pytest
    swaps it); a closed or broken stream never takes the pipeline down."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self._fixed = stream

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = self._fixed if self._fixed is not None else sys.stderr
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        pass  # nowhere to report a failed log write that would not fail the same way


_handler: _StderrHandler | None = None


def _install(handler: _StderrHandler, *, root: bool) -> None:
    global _handler
    if _handler is not None:
        for name in ("", "monotape"):
            logging.getLogger(name).removeHandler(_handler)
    _handler = handler
    if root:
        logging.getLogger().addHandler(handler)
        LOGGER.propagate = True
    else:
        LOGGER.addHandler(handler)
        LOGGER.propagate = False


def configure(
    level: str = "info", *, stream: TextIO | None = None, human: bool | None = None
) -> None:
    """One handler on the root logger for the whole process: ours and the libraries' records.

    ``human`` None: a human format when the stream is a terminal, JSON lines otherwise."""
    target = stream if stream is not None else sys.stderr
    if human is None:
        try:
            human = target.isatty()
        except (AttributeError, ValueError):
            human = False
    handler = _StderrHandler(stream)
    handler.setFormatter(HumanFormatter() if human else JsonFormatter())
    _install(handler, root=True)
    numeric = _LEVELS.get(level.lower(), logging.INFO)
    logging.getLogger().setLevel(numeric)
    LOGGER.setLevel(numeric)
    library = logging.DEBUG if numeric <= logging.DEBUG else max(numeric, logging.WARNING)
    for name in _LIBRARIES:
        logging.getLogger(name).setLevel(library)


def set_stream(stream: TextIO) -> None:
    """Events as JSON lines on ``stream`` (tests read them back); the level stays."""
    handler = _StderrHandler(None if stream is sys.stderr else stream)
    handler.setFormatter(JsonFormatter())
    _install(handler, root=False)
    if LOGGER.level == logging.NOTSET:
        LOGGER.setLevel(logging.INFO)


def log_event(event: str, level: str = "info", **fields: Any) -> None:
    """One event with its fields (JSON-able, or rendered with ``str``)."""
    if _handler is None:
        set_stream(sys.stderr)
    numeric = _LEVELS.get(level, logging.INFO)
    if LOGGER.isEnabledFor(numeric):
        LOGGER.log(numeric, event, extra={_FIELDS: fields, _EVENT: event})


# A failure or a refusal that can repeat every 40 ms frame is logged at most once per key per
# 10 s (with how many were held back): counted always, logged once in a while.
LOG_EVERY_S = 10.0  # one line per key per 10 s, carrying how many were not logged since

LogFn = Callable[..., None]


class Throttle:
    """Lets one event per key through every ``every_ns``; counts the ones it held back.

    A state machine: the caller passes the (monotonic) time in."""

    def __init__(self, every_ns: int) -> None:
        if every_ns < 0:
            raise ValueError(f"every_ns must be >= 0, got {every_ns}")
        self.every_ns = every_ns
        self._last: dict[str, int] = {}
        self._held: dict[str, int] = {}

    def allow(self, key: str, now_ns: int) -> int | None:
        """None: hold this one back. Otherwise let it through; the int is how many events of
        ``key`` were held back since the last one let through."""
        last = self._last.get(key)
        if last is not None and now_ns - last < self.every_ns:
            self._held[key] = self._held.get(key, 0) + 1
            return None
        self._last[key] = now_ns
        return self._held.pop(key, 0)


def redact(url: str) -> str:
    """The URL without its query (where a browser-style ``?token=`` would sit): what a log line
    or a report may show of a URL."""
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, p.path, "", ""))
