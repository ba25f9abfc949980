"""The replay adapter: ticks from an NDJSON file (docs/replay.md) instead of the simulator.

Users replay recorded data; tests inject exact adversarial sequences (duplicates from both
handlers, late copies, stale epochs, restarts). Each line is one tick *as a handler delivered
it*, so the file bypasses the feed handlers and feeds the sequencer directly.

Two kinds of trouble, two answers. A malformed file (not UTF-8, not JSON, a wrong type, a key
outside the one key grammar, a ``t_ms`` that is not an offset of at most a week) is refused whole:
a ``ReplayError`` whose ``str()`` is one line naming the file, the line number and the field. A
well-formed line whose values the wire cannot carry (a price that overflows int64 once scaled,
an id, epoch, size or timestamp out of range) is the replay's door for poison ticks: that tick is
left out (``Refused``), and the node counts it in ``monotape_ticks_rejected_total`` and logs it
with its line, then replays the rest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated

import msgspec

from monotape.clock import Clock
from monotape.platform.core.admit import DUPLICATE, REGRESSION, admit
from monotape.platform.feeds.validate import Refusal, tick_problem
from monotape.platform.model import Instrument, Tick, Version, key_problem

__all__ = [
    "LONG_GAP_MS",
    "MAX_T_MS",
    "Refused",
    "ReplayAdapter",
    "ReplayError",
    "ReplayLine",
    "expected_outcome",
    "load_replay",
]

_MAX_INSTRUMENTS = 65_536  # the wire dictionary's ids are uint16
_MAX_DECIMALS = 9
_DECIMAL = r"^-?[0-9]{1,15}(\.[0-9]{1,9})?$"
# t_ms is an offset from the start of the replay, not a date: a file that spans more than a week
# at speed 1 is almost surely absolute timestamps (1.7e12 ms would wait 55 years, silently).
MAX_T_MS = 7 * 24 * 3600 * 1000
LONG_GAP_MS = 60_000  # a pause this long between two lines is logged at start, not sat through
_AT_FIELD = re.compile(r"^(.*) - at `\$\.?(.*)`$")

Price = Annotated[str, msgspec.Meta(pattern=_DECIMAL)]
Text = Annotated[str, msgspec.Meta(max_length=64)]  # the key grammar is checked after decoding


class ReplayError(ValueError):
    """A replay file is wrong. ``str()`` is one line naming the file, the line number and the
    field (``monotape run --replay`` prints it and exits 2)."""


class Refused(msgspec.Struct, frozen=True):
    """A well-formed line whose tick the pipeline cannot carry: skipped, counted, logged."""

    lineno: int
    venue: str
    reason: Refusal
    detail: str


class _Record(msgspec.Struct, forbid_unknown_fields=True):
    t_ms: float
    venue: Text
    symbol: Text
    venue_ts_ns: int
    bid: Price
    ask: Price
    last: Price
    size: int
    # Plain ints: a value out of the wire's range refuses that tick (``Refused``), not the file.
    update_id: int | None = None
    epoch: int = 0
    # a tick batch's header holds the handler's name in 8 ASCII bytes (docs/batches.md)
    handler: Annotated[str, msgspec.Meta(max_length=8, pattern="^[ -~]*$")] = ""


class _Declared(msgspec.Struct, forbid_unknown_fields=True):
    key: Text
    decimals: Annotated[int, msgspec.Meta(ge=0, le=_MAX_DECIMALS)]
    tick_size: Price


class _Header(msgspec.Struct, forbid_unknown_fields=True):
    instruments: Annotated[list[_Declared], msgspec.Meta(max_length=_MAX_INSTRUMENTS)]


class ReplayLine(msgspec.Struct, gc=False):
    """One parsed line: its pacing offset and the tick it delivers."""

    lineno: int
    t_ns: int
    tick: Tick


_record_decoder = msgspec.json.Decoder(_Record)


def _error(where: str, exc: Exception) -> ReplayError:
    """msgspec's "Expected `int`, got `str` - at `$.size`" as "field `size`: Expected ..."."""
    text = " ".join(str(exc).split())  # one line, whatever the cause said
    found = _AT_FIELD.match(text)
    if found and found.group(2):
        return ReplayError(f"{where}: field `{found.group(2)}`: {found.group(1)}")
    return ReplayError(f"{where}: {text}")


def _decimals(text: str) -> int:
    return len(text.partition(".")[2])


def _scaled(text: str, decimals: int, where: str) -> int:
    try:
        value = Decimal(text).scaleb(decimals)
    except InvalidOperation as exc:  # unreachable past the pattern; kept for a clear message
        raise ReplayError(f"{where}: not a decimal: {text!r}") from exc
    if value != value.to_integral_value():
        raise ReplayError(f"{where}: {text!r} has more than {decimals} decimals")
    return int(value)


def _parse_header(obj: object, where: str) -> dict[str, tuple[int, int]]:
    try:
        header = msgspec.convert(obj, _Header)
    except msgspec.ValidationError as exc:
        raise _error(where, exc) from exc
    declared: dict[str, tuple[int, int]] = {}
    for i, inst in enumerate(header.instruments):
        field = f"{where}: field `instruments[{i}]"
        problem = key_problem(inst.key)
        if problem is not None:
            # One grammar with the subscribe request: a key the replay accepts can be watched.
            raise ReplayError(f"{field}.key`: {inst.key!r} cannot be subscribed: {problem}")
        if inst.key in declared:
            raise ReplayError(f"{field}.key`: duplicate key {inst.key!r}")
        tick = _scaled(inst.tick_size, inst.decimals, f"{field}.tick_size`")
        if tick < 1:
            raise ReplayError(f"{field}.tick_size`: must be positive")
        declared[inst.key] = (inst.decimals, tick)
    return declared


def _key_error(venue: str, symbol: str, where: str) -> ReplayError | None:
    """The key grammar (``model.key_problem``), reported against the field that breaks it."""
    if key_problem(f"{venue}:{symbol}") is None:
        return None
    venue_problem = key_problem(f"{venue}:X") if ":" not in venue else "no ':' in a venue"
    if venue_problem is not None:
        why = "the venue is 1-16 of A-Z 0-9 _ . - (upper case)"
        return ReplayError(f"{where}: field `venue`: {venue!r} cannot be subscribed: {why}")
    why = "the symbol is 1-40 of A-Z a-z 0-9 _ . / -"
    return ReplayError(f"{where}: field `symbol`: {symbol!r} cannot be subscribed: {why}")


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line. Lines end at LF only: a raw U+2028 or U+2029 inside a
    JSON string is valid NDJSON (``str.splitlines`` would cut the line there). Invalid UTF-8 is
    reported by line and column, not by byte offset in the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            column = len(raw[: exc.start].decode("utf-8", "replace")) + 1
            raise ReplayError(
                f"{path} line {lineno}: invalid UTF-8 at column {column} (a replay file is UTF-8)"
            ) from exc


def _t_ms_error(t_ms: float, where: str) -> ReplayError | None:
    if not math.isfinite(t_ms) or t_ms < 0:
        return ReplayError(f"{where}: field `t_ms`: {t_ms!r} is not a number of ms >= 0")
    if t_ms > MAX_T_MS:
        days = t_ms / 86_400_000
        span = f"{days:,.0f}" if days < 1e9 else f"{days:.3g}"
        return ReplayError(
            f"{where}: field `t_ms`: {t_ms:g} ms is {span} days after the start; t_ms counts "
            f"ms from the start of the replay (at most {MAX_T_MS // 86_400_000} days), not a date"
        )
    return None


def load_replay(
    path: str | Path, *, refused: list[Refused] | None = None
) -> tuple[list[Instrument], list[ReplayLine]]:
    """Parse a replay file: the instrument dictionary and every tick line, in file order.

    A malformed file raises ``ReplayError``. A well-formed line whose values the wire cannot
    carry (a price that overflows int64 once scaled, an id, epoch, size or timestamp out of
    range) is left out and appended to ``refused`` (docs/replay.md, "What is refused")."""
    path = Path(path)
    declared: dict[str, tuple[int, int]] | None = None
    records: list[tuple[int, _Record]] = []
    for lineno, raw in _text_lines(path):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path} line {lineno}"
        if declared is None and not records and '"instruments"' in line:
            try:
                obj = msgspec.json.decode(line)
            except msgspec.DecodeError as exc:
                raise _error(where, exc) from exc
            declared = _parse_header(obj, where)
            continue
        try:
            rec = _record_decoder.decode(line)
        except msgspec.DecodeError as exc:  # ValidationError included: it says "at `$.field`"
            raise _error(where, exc) from exc
        problem = _t_ms_error(rec.t_ms, where) or _key_error(rec.venue, rec.symbol, where)
        if problem is not None:
            raise problem
        records.append((lineno, rec))
    if not records:
        what = "only an instrument header" if declared is not None else "no tick lines"
        raise ReplayError(f"{path}: nothing to replay: the file has {what} (docs/replay.md)")
    universe, iid_of = _dictionary(path, declared, records)
    venue_of = [inst.venue for inst in universe]
    lines: list[ReplayLine] = []
    left_out: list[Refused] = []
    ids_by_venue: dict[str, bool] = {}
    prev_t = 0
    for lineno, rec in records:
        where = f"{path} line {lineno}"
        inst = universe[iid_of[f"{rec.venue}:{rec.symbol}"]]
        has_id = rec.update_id is not None
        if ids_by_venue.setdefault(rec.venue, has_id) != has_id:
            # Mixing id-derived and timestamp-derived seqs in one venue would compare apples
            # with nanoseconds (the version rule, docs/ordering.md).
            raise ReplayError(f"{where}: field `update_id`: venue {rec.venue} mixes ids and null")
        t_ns = round(rec.t_ms * 1_000_000)
        if t_ns < prev_t:
            raise ReplayError(f"{where}: field `t_ms`: goes back in time ({rec.t_ms})")
        prev_t = t_ns
        prices: list[int] = []
        for field in ("bid", "ask", "last"):
            scaled = _scaled(getattr(rec, field), inst.price_decimals, f"{where}: field `{field}`")
            if scaled % inst.tick_size:
                raise ReplayError(f"{where}: field `{field}`: off the {inst.key} tick grid")
            prices.append(scaled)
        seq = rec.update_id if rec.update_id is not None else rec.venue_ts_ns
        bid, ask, last = prices
        tick = Tick(
            inst.iid, rec.venue, rec.epoch, seq, rec.venue_ts_ns, bid, ask, last, rec.size,
            rec.handler,
        )  # fmt: skip
        found = tick_problem(tick, venue_of)
        if found is None and rec.venue_ts_ns <= 0:
            found = (Refusal.TIMESTAMP, f"venue_ts_ns {rec.venue_ts_ns} is not > 0")
        if found is not None:
            left_out.append(Refused(lineno, rec.venue, found[0], found[1]))
            continue
        lines.append(ReplayLine(lineno, t_ns, tick))
    if refused is not None:
        refused.extend(left_out)
    if not lines:
        first = left_out[0]
        raise ReplayError(
            f"{path}: nothing to replay: every tick was refused "
            f"(line {first.lineno}: {first.reason}: {first.detail})"
        )
    return universe, lines


def _dictionary(
    path: Path,
    declared: dict[str, tuple[int, int]] | None,
    records: list[tuple[int, _Record]],
) -> tuple[list[Instrument], dict[str, int]]:
    if declared is None:
        # Inferred: first appearance order, decimals = the most seen in any price of the key.
        declared = {}
        for _, rec in records:
            key = f"{rec.venue}:{rec.symbol}"
            most = max(_decimals(rec.bid), _decimals(rec.ask), _decimals(rec.last))
            declared[key] = (max(declared.get(key, (0, 1))[0], most), 1)
        if len(declared) > _MAX_INSTRUMENTS:
            raise ReplayError(f"{path}: more than {_MAX_INSTRUMENTS} instruments")
    else:
        for lineno, rec in records:
            if f"{rec.venue}:{rec.symbol}" not in declared:
                raise ReplayError(
                    f"{path} line {lineno}: field `symbol`: {rec.venue}:{rec.symbol} "
                    "is not in the declared instruments"
                )
    universe: list[Instrument] = []
    iid_of: dict[str, int] = {}
    for iid, (key, (decimals, tick)) in enumerate(declared.items()):
        venue, _, symbol = key.partition(":")
        universe.append(Instrument(iid, key, venue, symbol, decimals, tick))
        iid_of[key] = iid
    return universe, iid_of


class ReplayAdapter:
    """Paces a replay file by ``clock``: a line is due ``start_delay_ns + t_ns / speed`` after
    construction."""

    def __init__(
        self, path: str | Path, clock: Clock, *, speed: float = 1.0, start_delay_ns: int = 0
    ) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        if start_delay_ns < 0:
            raise ValueError(f"start_delay_ns must be >= 0, got {start_delay_ns}")
        self.path = Path(path)
        self.refused: list[Refused] = []  # lines left out: the node counts and logs them
        self.universe, self._lines = load_replay(path, refused=self.refused)
        # Pauses of a minute or more (the first line included): the node says so at start
        # rather than sit through them silently.
        self.long_gaps: list[tuple[int, float]] = []  # (line number, gap in ms at speed 1)
        prev = 0
        for line in self._lines:
            if line.t_ns - prev >= LONG_GAP_MS * 1_000_000:
                self.long_gaps.append((line.lineno, (line.t_ns - prev) / 1e6))
            prev = line.t_ns
        self._clock = clock
        self._speed = speed
        self._start_ns = clock.now_ns() + start_delay_ns
        self._next = 0

    @property
    def done(self) -> bool:
        return self._next >= len(self._lines)

    def step(self) -> list[Tick]:
        """Ticks whose time has come, in file order, stamped ``decoded_ns`` = now."""
        now = self._clock.now_ns()
        elapsed = now - self._start_ns
        if elapsed < 0 or self.done:
            return []
        lines = self._lines
        start = self._next
        end = start
        speed = self._speed
        while end < len(lines) and lines[end].t_ns / speed <= elapsed:
            end += 1
        self._next = end
        out = []
        for line in lines[start:end]:
            line.tick.decoded_ns = now
            out.append(line.tick)
        return out


def expected_outcome(lines: Iterable[ReplayLine]) -> dict[str, tuple[int, int, int]]:
    """Per venue ``(applied, duplicates, regressions)`` that ``admit`` yields in file order."""
    held: dict[int, Version] = {}
    counts: dict[str, list[int]] = {}
    for line in lines:
        tick = line.tick
        incoming = (tick.epoch, tick.seq)
        verdict = admit(held.get(tick.iid), incoming)
        c = counts.setdefault(tick.venue, [0, 0, 0])
        if verdict == DUPLICATE:
            c[1] += 1
        elif verdict == REGRESSION:
            c[2] += 1
        else:
            held[tick.iid] = incoming
            c[0] += 1
    return {venue: (c[0], c[1], c[2]) for venue, c in counts.items()}
