"""One log: events and library records through stdlib logging, one handler, one format."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from monotape import log


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Broken(io.StringIO):
    def write(self, s: str) -> int:
        raise OSError("stderr closed")


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    root = logging.getLogger()
    levels = {n: logging.getLogger(n).level for n in ("", "monotape", "websockets", "uvicorn")}
    yield
    log.set_stream(sys.stderr)  # back to the library default: JSON on stderr, monotape only
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    assert all(
        not isinstance(h, logging.StreamHandler) or h.stream is not None for h in root.handlers
    )


def test_events_are_json_lines_through_logging() -> None:
    buf = io.StringIO()
    log.configure("info", stream=buf, human=False)
    seen: list[logging.LogRecord] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    catcher = Catch()
    logging.getLogger().addHandler(catcher)  # anything on the root sees our events
    try:
        log.log_event("drain_progress", closed=4, remaining=196)
    finally:
        logging.getLogger().removeHandler(catcher)
    line = buf.getvalue().strip()
    assert '"event": "drain_progress"' in line  # the form tests and operators grep for
    body = json.loads(line)
    assert body["level"] == "info" and body["closed"] == 4 and body["remaining"] == 196
    assert [r.name for r in seen] == ["monotape"] and seen[0].levelname == "INFO"


def test_library_records_share_the_handler_and_the_format() -> None:
    buf = io.StringIO()
    log.configure("info", stream=buf, human=False)
    logging.getLogger("websockets.server").warning("opening handshake failed")
    logging.getLogger("uvicorn.error").error("boom %d", 7)
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert [(x["event"], x["logger"], x["message"]) for x in lines] == [
        ("log", "websockets.server", "opening handshake failed"),
        ("log", "uvicorn.error", "boom 7"),
    ]
    assert [x["level"] for x in lines] == ["warning", "error"]


def test_the_level_filters_events_and_libraries() -> None:
    buf = io.StringIO()
    log.configure("warning", stream=buf, human=False)
    log.log_event("listening", ws="ws://127.0.0.1:1/")
    log.log_event("rotation_failed", level="error", error="disk full")
    logging.getLogger("websockets.client").info("chatty")
    events = [json.loads(x)["event"] for x in buf.getvalue().splitlines()]
    assert events == ["rotation_failed"]

    buf = io.StringIO()
    log.configure("debug", stream=buf, human=False)
    log.log_event("listening")
    logging.getLogger("websockets.client").debug("frame")
    assert len(buf.getvalue().splitlines()) == 2


def test_a_terminal_gets_human_lines() -> None:
    tty = Tty()
    log.configure("info", stream=tty)  # human=None: decided by isatty()
    log.log_event("drain_progress", closed=4, remaining=196)
    line = tty.getvalue().strip()
    assert "{" not in line
    assert line.split(" ", 1)[1].split() == ["info", "drain_progress", "closed=4", "remaining=196"]


def test_a_broken_stream_never_raises() -> None:
    log.configure("info", stream=Broken(), human=False)
    log.log_event("stopped", frames=1)  # must not raise
    logging.getLogger("uvicorn.error").error("still fine")


def test_set_stream_keeps_json_for_a_test_reader() -> None:
    buf = io.StringIO()
    log.configure("info", stream=Tty())
    log.set_stream(buf)
    log.log_event("invariant_tripped", invariant="no_dangling_entries")
    assert json.loads(buf.getvalue())["invariant"] == "no_dangling_entries"


def test_a_role_names_its_process_in_every_line() -> None:
    """``set_process``: a host's role (writer-0, sequencer...) says which process wrote each
    line, ours and the libraries' alike; None takes it away again."""
    buf = io.StringIO()
    log.configure("info", stream=buf, human=False)
    log.set_process("sequencer")
    try:
        log.log_event("role_started", role="sequencer")
        logging.getLogger("asyncio").warning("slow callback")
    finally:
        log.set_process(None)
    log.log_event("after")
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert [(x["event"], x.get("process")) for x in lines] == [
        ("role_started", "sequencer"),
        ("log", "sequencer"),
        ("after", None),
    ]
    assert lines[0]["role"] == "sequencer"
