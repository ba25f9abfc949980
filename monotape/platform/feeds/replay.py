"""The replay adapter: ticks from an NDJSON file (docs/replay.md) instead of the simulator.

Users replay recorded data; tests inject exact adversarial sequences (duplicates from both
handlers, late copies, stale epochs, restarts). Each line is one tick *as a handler delivered
it*, so the file bypasses the feed handlers and feeds the sequencer directly. Parsing is strict
(STYLE habit 6): every error is a ``ReplayError`` naming the file, the line number and the field.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated

import msgspec

from monotape.clock import Clock
from monotape.platform.admit import DUPLICATE, REGRESSION, admit
from monotape.platform.model import Instrument, Tick, Version

__all__ = ["ReplayAdapter", "ReplayError", "ReplayLine", "expected_outcome", "load_replay"]

_MAX_INSTRUMENTS = 65_536  # the wire dictionary's ids are uint16
_MAX_DECIMALS = 9
_DECIMAL = r"^-?[0-9]{1,15}(\.[0-9]{1,9})?$"
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,31}$"

Price = Annotated[str, msgspec.Meta(pattern=_DECIMAL)]
Name = Annotated[str, msgspec.Meta(pattern=_NAME)]
NonNeg = Annotated[int, msgspec.Meta(ge=0)]


class ReplayError(ValueError):
    """A replay file is wrong; the message names the file, the line and the field."""


class _Record(msgspec.Struct, forbid_unknown_fields=True):
    t_ms: Annotated[float, msgspec.Meta(ge=0)]
    venue: Name
    symbol: Name
    venue_ts_ns: Annotated[int, msgspec.Meta(gt=0)]
    bid: Price
    ask: Price
    last: Price
    size: NonNeg
    update_id: NonNeg | None = None
    epoch: NonNeg = 0
    handler: Annotated[str, msgspec.Meta(max_length=32)] = ""


class _Declared(msgspec.Struct, forbid_unknown_fields=True):
    key: Annotated[str, msgspec.Meta(pattern=r"^[^:]+:[^:]+$")]
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
        raise ReplayError(f"{where}: {exc}") from exc
    declared: dict[str, tuple[int, int]] = {}
    for i, inst in enumerate(header.instruments):
        field = f"{where}: field `instruments[{i}]"
        if inst.key in declared:
            raise ReplayError(f"{field}.key`: duplicate key {inst.key!r}")
        tick = _scaled(inst.tick_size, inst.decimals, f"{field}.tick_size`")
        if tick < 1:
            raise ReplayError(f"{field}.tick_size`: must be positive")
        declared[inst.key] = (inst.decimals, tick)
    return declared


def load_replay(path: str | Path) -> tuple[list[Instrument], list[ReplayLine]]:
    """Parse a replay file: the instrument dictionary and every tick line, in file order."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplayError(f"{path}: cannot read: {exc}") from exc
    declared: dict[str, tuple[int, int]] | None = None
    records: list[tuple[int, _Record]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path} line {lineno}"
        if declared is None and not records and '"instruments"' in line:
            try:
                obj = msgspec.json.decode(line)
            except msgspec.DecodeError as exc:
                raise ReplayError(f"{where}: {exc}") from exc
            declared = _parse_header(obj, where)
            continue
        try:
            records.append((lineno, _record_decoder.decode(line)))
        except msgspec.DecodeError as exc:  # ValidationError included: it says "at `$.field`"
            raise ReplayError(f"{where}: {exc}") from exc
    universe, iid_of = _dictionary(path, declared, records)
    lines: list[ReplayLine] = []
    ids_by_venue: dict[str, bool] = {}
    prev_t = 0
    for lineno, rec in records:
        where = f"{path} line {lineno}"
        inst = universe[iid_of[f"{rec.venue}:{rec.symbol}"]]
        has_id = rec.update_id is not None
        if ids_by_venue.setdefault(rec.venue, has_id) != has_id:
            # Mixing id-derived and timestamp-derived seqs in one venue would compare apples
            # with nanoseconds (DESIGN: Ordering).
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
        lines.append(ReplayLine(lineno, t_ns, tick))
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
        self.universe, self._lines = load_replay(path)
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
