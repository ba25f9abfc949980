"""The node's admin routes on the host: ask the roles that hold the answer, merge, answer.

Each role answers on its loopback telemetry port (telemetry.RoleState: ``GET /state/<name>``,
``POST /action/<name>``, the node's own handlers run in the role: host/state.py), to a request
carrying the host's secret (``run_dir/role.secret``, telemetry.write_secret). ``RoleAsker``
asks every process of a role at once with ``host.scrape_timeout_s``; one that is not running,
not ready, slow or broken is left out and named in the body's ``missing``, never a 500 (the
SRE's view of a host must not die with one process). The merges are pure (admin_merge.py).

Which process holds what: writers their terminals (connections, glass, invariants, drain), the
sequencer the prices (``/admin/symbols``, ``/admin/symbols/{key}``), the feed-handler processes
the feeds; GC is per process (writers, the sequencer and the feed handlers: the processes with a
GC monitor), and a full collection runs in one process after the other.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from monotape.platform.admin.desk import match_keys, symbol_row
from monotape.platform.admin.params import (
    BadParameter,
    Handler,
    error_response,
    int_param,
    json_response,
    pattern_param,
)
from monotape.platform.host.admin_merge import (
    merge_connections,
    merge_drain,
    merge_feeds,
    merge_gc,
    merge_gc_collect,
    merge_glass,
    merge_invariants,
    merge_symbol,
)
from monotape.platform.host.aggregate import loopback_request, read_port
from monotape.platform.host.supervisor import ProcessTable, SlotState
from monotape.platform.host.telemetry import (
    DEADLINE_HEADER,
    MAX_STATE_BYTES,
    SECRET_HEADER,
    STATE_TIMEOUT_S,
    read_secret,
)
from monotape.platform.model import Instrument

__all__ = [
    "ACTION_TIMEOUT_S",
    "DRAIN_STATUS_TTL_S",
    "GC_ROLES",
    "SYMBOLS_CAP",
    "Answers",
    "HostDrain",
    "RoleAsker",
    "ask_role",
    "collect_one_at_a_time",
    "host_desk_handlers",
]

ACTION_TIMEOUT_S = STATE_TIMEOUT_S + 1.0  # how long the host waits for a role's action
# How long /readyz reuses a drain status: a balancer probing every second, with every writer
# asked each time, would spend the roles' few state questions in flight (telemetry.MAX_IN_FLIGHT).
DRAIN_STATUS_TTL_S = 1.0
GC_ROLES = ("writer", "sequencer", "handler")  # the processes that run the GC monitor
# The sequencer's /state/symbols answers at most this many rows (~350 bytes of JSON each with
# prices: ~3.5 MB, under telemetry.MAX_STATE_BYTES); the host's /admin/symbols says so.
SYMBOLS_CAP = 10_000


async def ask_role(
    port: int, method: str, path: str, timeout_s: float, secret: str = ""
) -> tuple[int, dict[str, Any]]:
    """One request to a role's loopback port, with the host's ``secret``; (status, JSON
    object). Raises OSError, TimeoutError or ValueError (no HTTP answer, too large, not a JSON
    object)."""
    # The role answers 504 without running it once this has passed (host/telemetry.py): a
    # question that waited out a stopped role must not act after the host gave up on it.
    deadline_ns = time.monotonic_ns() + int(timeout_s * 1e9)
    headers = {SECRET_HEADER: secret, DEADLINE_HEADER: str(deadline_ns)}
    status, body = await loopback_request(port, method, path, timeout_s, MAX_STATE_BYTES, headers)
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not JSON: {body[:80]!r}") from exc
    if not isinstance(decoded, dict):
        raise ValueError("not a JSON object")
    return status, decoded


@dataclass
class Answers:
    """One question to every process of a role: who answered what, who did not (and why)."""

    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)  # missing process -> reason

    @property
    def missing(self) -> list[str]:
        return sorted(self.why)


class RoleAsker:
    """Asks the role processes of the host's table over loopback."""

    def __init__(self, table: ProcessTable, run_dir: Path, timeout_s: float) -> None:
        self.table = table
        self.run_dir = run_dir
        self.timeout_s = timeout_s
        self._secret = ""

    def secret(self) -> str:
        """The host's secret for its roles (read once it exists: the host writes it before it
        starts any role)."""
        if not self._secret:
            self._secret = read_secret(self.run_dir)
        return self._secret

    def names(self, roles: Sequence[str]) -> list[str]:
        return [s.name for s in self.table.slots.values() if s.role in roles]

    async def ask(
        self,
        names: Sequence[str],
        kind: str,
        what: str,
        params: Mapping[str, str | int] | None = None,
    ) -> Answers:
        """``kind`` "state" (GET) or "action" (POST) ``what`` of each of ``names``."""
        method = "GET" if kind == "state" else "POST"
        # An action (a full collection, a drain) runs to its end in the role whether or not
        # the host waits: wait as long as the role gives it (STATE_TIMEOUT_S, and a second for
        # the answer), or a slow collection would be reported missing and the next one start
        # beside it.
        timeout_s = self.timeout_s if kind == "state" else max(self.timeout_s, ACTION_TIMEOUT_S)
        path = f"/{kind}/{what}" + (f"?{urlencode(params)}" if params else "")
        out = Answers()
        slots = self.table.slots

        async def one(name: str) -> None:
            slot = slots.get(name)
            if slot is None or slot.state is not SlotState.RUNNING or not slot.ready:
                out.why[name] = "not running" if slot is None else slot.state.value
                return
            port = read_port(self.run_dir, name)
            if port is None:
                out.why[name] = "no port file"
                return
            try:
                status, body = await ask_role(port, method, path, timeout_s, self.secret())
            except (OSError, TimeoutError, ValueError) as exc:
                out.why[name] = repr(exc)[:200]
                return
            if status >= 400:
                out.why[name] = f"{status}: {str(body.get('error', ''))[:160]}"
                return
            out.bodies[name] = body
            out.statuses[name] = status

        await asyncio.gather(*(one(n) for n in names))
        out.bodies = {n: out.bodies[n] for n in names if n in out.bodies}  # table order
        return out


@dataclass
class HostDrain:
    """An operator's drain of the host, from ``POST /admin/drain`` until ``/admin/resume``: the
    host's /readyz answers 503 meanwhile, as the node's does, so a balancer stops sending the
    upgrades its writers refuse."""

    requested: bool = False
    unresumed: list[str] = field(default_factory=list)  # writers a resume did not reach
    _status: tuple[float, str] | None = None  # (monotonic time, status) last asked

    def on_writer_ready(self, name: str) -> bool:
        """A writer (re)started and is ready: True when it must be told to drain (the host is
        drained: a fresh writer must not take terminals while /readyz says "drained"). A
        fresh process holds no drain, so a resume that missed it is no longer owed."""
        if name in self.unresumed:
            self.unresumed.remove(name)
        return self.requested

    def drained(self, reached: int) -> None:
        """POST /admin/drain answered by ``reached`` writers: the host is out of rotation once
        one took it; /readyz asks the writers afresh."""
        self.requested = self.requested or reached > 0
        self._status = None

    def resumed(self, missing: Sequence[str], reached: int) -> None:
        """POST /admin/resume answered: the flag clears once it reached a writer (``reached``:
        how many answered; none: every writer is still drained, and /readyz must not put the
        host back in rotation); the writers it did not reach stay listed (one still running
        may still be draining) until they restart or resume."""
        if reached:
            self.requested = False
            self._status = None
        self.unresumed = sorted(missing)

    async def status(self, asker: RoleAsker, now: float | None = None) -> str:
        """ "draining" or "drained" (every writer that answered has finished), asked at most
        once every ``DRAIN_STATUS_TTL_S``."""
        t = time.monotonic() if now is None else now
        if self._status is not None and t - self._status[0] < DRAIN_STATUS_TTL_S:
            return self._status[1]
        got = await asker.ask(asker.names(("writer",)), "state", "connections", {"limit": 0})
        drains = {n: b["drain"] for n, b in got.bodies.items() if "drain" in b}
        status = "drained" if merge_drain(drains).get("drained") else "draining"
        self._status = (t, status)
        return status


async def collect_one_at_a_time(asker: RoleAsker, names: Sequence[str]) -> Answers:
    """A full collection in each of ``names``, one process after the other: at once, every
    writer's terminals would stall in the same moment."""
    out = Answers()
    for name in names:
        got = await asker.ask([name], "action", "gc-collect")
        out.bodies.update(got.bodies)
        out.statuses.update(got.statuses)
        out.why.update(got.why)
    return out


def host_desk_handlers(
    asker: RoleAsker, universe: Sequence[Instrument], host_drain: HostDrain | None = None
) -> dict[str, Handler]:
    """The node's desk and GC routes, answered by the roles: /admin/connections,
    /admin/feeds, /admin/invariants, /admin/glass, /admin/gc, /admin/gc/collect,
    /admin/symbols, /admin/symbols/{key}, /admin/drain, /admin/resume (which set ``host_drain``)."""
    by_key = {inst.key: inst for inst in universe}
    flag = host_drain if host_drain is not None else HostDrain()

    def writers() -> list[str]:
        return asker.names(("writer",))

    async def connections(request: Request) -> Response:
        limit = int_param(request, "limit", 100, 0, 10_000)
        got = await asker.ask(writers(), "state", "connections", {"limit": limit})
        return json_response(merge_connections(got.bodies, limit, got.missing))

    async def feeds(request: Request) -> Response:
        got = await asker.ask(asker.names(("handler",)), "state", "feeds")
        sources = {str(b.get("source")) for b in got.bodies.values()}
        source = sources.pop() if len(sources) == 1 else None
        return json_response(merge_feeds(got.bodies, source, got.missing))

    async def invariants(request: Request) -> Response:
        got = await asker.ask(writers(), "state", "invariants")
        return json_response(merge_invariants(got.bodies, got.missing))

    async def glass(request: Request) -> Response:
        got = await asker.ask(writers(), "state", "glass")
        return json_response(merge_glass(got.bodies, got.missing))

    async def gc_view(request: Request) -> Response:
        recent = int_param(request, "recent", 100, 0, 10_000)
        got = await asker.ask(asker.names(GC_ROLES), "state", "gc", {"recent": recent})
        return json_response(merge_gc(got.bodies, got.missing))

    async def gc_collect(request: Request) -> Response:
        names = asker.names(GC_ROLES)
        process = request.query_params.get("process")
        if process is not None:
            if process not in names:
                shown = process[:40]
                raise BadParameter("process", f"{shown!r} is not one of {', '.join(names)}")
            names = [process]
        got = await collect_one_at_a_time(asker, names)
        return json_response(merge_gc_collect(got.bodies, got.missing))

    async def symbols(request: Request) -> Response:
        # The node's answer, the prices from the sequencer (at most SYMBOLS_CAP rows); if it
        # does not answer, the dictionary's rows without prices, and who was missing.
        pattern = pattern_param(request)
        limit = int_param(request, "limit", 100_000, 1, 100_000)
        asked: dict[str, str | int] = {"pattern": pattern, "limit": min(limit, SYMBOLS_CAP)}
        got = await asker.ask(asker.names(("sequencer",)), "state", "symbols", asked)
        answer = next(iter(got.bodies.values()), None)
        if answer is not None:
            body = {k: answer.get(k) for k in ("pattern", "count", "symbols")}
            if limit > SYMBOLS_CAP and int(answer.get("count", 0)) > SYMBOLS_CAP:
                body["note"] = f"at most {SYMBOLS_CAP} rows with prices: narrow the pattern"
            return json_response(body)
        keys = match_keys(list(by_key), pattern)
        rows = [symbol_row(by_key[key]) for key in keys[:limit]]
        return json_response(
            {
                "pattern": pattern,
                "count": len(keys),
                "symbols": rows,
                "missing": got.missing or asker.names(("sequencer",)),
                "note": "the sequencer did not answer: keys without prices",
            }
        )

    async def symbol(request: Request) -> Response:
        key = request.path_params["key"]
        inst = by_key.get(key)
        if inst is None:
            return error_response(404, f"unknown symbol {key[:40]!r}", parameter="key")
        seq, wrt = await asyncio.gather(
            asker.ask(asker.names(("sequencer",)), "state", "symbol", {"key": key}),
            asker.ask(writers(), "state", "symbol", {"key": key}),
        )
        prices = next(iter(seq.bodies.values()), None)
        body = merge_symbol(
            key, inst.iid, inst.price_decimals, prices, wrt.bodies, seq.missing + wrt.missing
        )
        return json_response(body)

    async def drain(request: Request) -> Response:
        got = await asker.ask(writers(), "action", "drain")
        flag.drained(reached=len(got.bodies))
        started = any(s == 202 for s in got.statuses.values())
        return json_response(merge_drain(got.bodies, got.missing), 202 if started else 200)

    async def resume(request: Request) -> Response:
        got = await asker.ask(writers(), "action", "resume")
        flag.resumed(got.missing, reached=len(got.bodies))
        resumed = any(bool(b.get("resumed")) for b in got.bodies.values())
        body = {"resumed": resumed, **merge_drain(got.bodies, got.missing)}
        body["unresumed"] = list(flag.unresumed)
        return json_response(body)

    return {
        "/admin/connections": connections,
        "/admin/feeds": feeds,
        "/admin/invariants": invariants,
        "/admin/glass": glass,
        "/admin/gc": gc_view,
        "/admin/gc/collect": gc_collect,
        "/admin/symbols": symbols,
        "/admin/symbols/{key}": symbol,
        "/admin/drain": drain,
        "/admin/resume": resume,
    }
