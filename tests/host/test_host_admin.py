"""The host's admin API guards /admin/* exactly as the node does (one guard:
admin/params.admin_guard): 403 with auth off, 401 with the hint and WWW-Authenticate
without a token, 403 without the admin claim, 400 naming a bad parameter, 200 for an admin.
/admin/symbols carries the sequencer's prices (the keys alone, and who was missing, when it
does not answer); /admin/latency is the node's handler; a handler without a row is an error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from monotape.clock import SystemClock
from monotape.config import AuthConfig
from monotape.platform.auth import TokenVerifier, build_verifier
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.host.admin import Observer, build_host_admin_app, host_endpoints
from monotape.platform.host.admin_routes import SYMBOLS_CAP
from monotape.platform.host.state import RoleView, sequencer_state
from monotape.platform.host.supervisor import ProcessTable
from monotape.platform.host.telemetry import (
    MAX_STATE_BYTES,
    RoleState,
    serve_metrics,
    write_secret,
)
from monotape.platform.model import Instrument, Tick
from tests.conftest import mint
from tests.node.test_admin import call


@pytest.fixture
def verifier(tmp_path: Path) -> Iterator[TokenVerifier]:
    v = build_verifier(AuthConfig(), tmp_path)
    yield v
    v.close()


def _app(tmp_path: Path, verifier: TokenVerifier | None) -> Starlette:
    table = ProcessTable([("sequencer", "sequencer"), ("writer-0", "writer")])
    observer = Observer(table, tmp_path, timeout_s=0.5)
    return build_host_admin_app(observer, verifier, lambda: {"pid": 1}, tmp_path / "hdr")


async def test_admin_routes_refuse_without_auth(tmp_path: Path) -> None:
    got = await call(_app(tmp_path, None), "GET", "/admin/processes")
    assert got.status == 403
    assert "auth.enabled" in got.json()["error"]


async def test_admin_routes_need_a_valid_admin_token(
    tmp_path: Path, verifier: TokenVerifier
) -> None:
    app = _app(tmp_path, verifier)
    missing = await call(app, "GET", "/admin/processes")
    assert missing.status == 401
    assert "www-authenticate" in missing.headers
    assert "monotape token" in missing.json()["hint"]
    plain = await call(app, "GET", "/admin/processes", mint(tmp_path))
    assert plain.status == 403
    assert "admin claim" in plain.json()["error"]
    admin = mint(tmp_path, admin=True)
    bad = await call(app, "GET", "/admin/latency?stage=nope", admin)
    assert (bad.status, bad.json()["parameter"]) == (400, "stage")
    ok = await call(app, "GET", "/admin/processes", admin)
    assert ok.status == 200
    assert {row["name"] for row in ok.json()["processes"]} == {"sequencer", "writer-0"}


async def test_an_unknown_route_is_json_as_on_the_node(tmp_path: Path) -> None:
    got = await call(_app(tmp_path, None), "GET", "/admin/nope")
    assert (got.status, got.json()["error"]) == (404, "not found: GET /admin/nope")


async def test_probes_need_no_token(tmp_path: Path) -> None:
    app = _app(tmp_path, None)
    assert (await call(app, "GET", "/healthz")).status == 503  # nothing runs yet
    assert (await call(app, "GET", "/readyz")).status == 503


async def test_symbols_without_the_sequencer_lists_the_keys_and_says_who_is_missing(
    tmp_path: Path, verifier: TokenVerifier
) -> None:
    """``monotape symbols`` against a host whose sequencer does not answer: the keys and their
    scale, ``current`` null, the sequencer named in ``missing`` with a note."""
    universe = build_universe(2, 10, 1)
    table = ProcessTable([("sequencer", "sequencer")])
    app = build_host_admin_app(
        Observer(table, tmp_path, timeout_s=0.5), verifier, dict, tmp_path / "hdr", universe
    )
    admin = mint(tmp_path, admin=True)
    every = (await call(app, "GET", "/admin/symbols", admin)).json()
    assert every["count"] == len(universe)
    assert {r["key"] for r in every["symbols"]} == {i.key for i in universe}
    assert all(r["current"] is None for r in every["symbols"])
    assert every["missing"] == ["sequencer"] and "sequencer" in every["note"]
    venue = universe[0].venue
    some = (await call(app, "GET", f"/admin/symbols?pattern={venue}:*&limit=2", admin)).json()
    assert some["count"] == sum(1 for i in universe if i.venue == venue)
    assert len(some["symbols"]) == min(2, some["count"])
    assert (await call(app, "GET", "/admin/symbols")).status == 401


class _Quotes:
    """The sequencer's book: a tick for the first instrument only."""

    def __init__(self, inst: Instrument) -> None:
        self.tick = Tick(inst.iid, inst.venue, 1, 7, 0, 10_050, 10_070, 10_060, 300, "A")

    def current(self, iid: int) -> Tick | None:
        return self.tick if iid == self.tick.iid else None

    def published(self, iid: int) -> Tick | None:
        return self.current(iid)


class _EveryPrice:
    def current(self, iid: int) -> Tick | None:
        big = 10**15  # the widest prices: the largest rows
        return Tick(iid, "XNAS", 2**31, 2**62, 0, big, big, big, big, "handler-A")

    def published(self, iid: int) -> Tick | None:
        return self.current(iid)


async def _sequencer(tmp_path: Path, universe: list[Instrument]) -> ProcessTable:
    """A sequencer's state port served as the role serves it (its secret, its port file)."""
    write_secret(tmp_path)
    state = RoleState(asyncio.get_running_loop())
    sequencer_state(state, RoleView(SystemClock()), universe, _Quotes(universe[0]))
    await asyncio.to_thread(serve_metrics, CollectorRegistry(), tmp_path, "sequencer", state)
    table = ProcessTable([("sequencer", "sequencer")])
    table.started("sequencer", 1234, 0, 0)
    table.mark_ready("sequencer")
    return table


async def test_symbols_carry_the_sequencers_prices_like_the_node(
    tmp_path: Path, verifier: TokenVerifier
) -> None:
    universe = build_universe(2, 10, 1)
    table = await _sequencer(tmp_path, universe)
    app = build_host_admin_app(
        Observer(table, tmp_path, timeout_s=10), verifier, dict, tmp_path / "hdr", universe
    )
    admin = mint(tmp_path, admin=True)
    every = (await call(app, "GET", "/admin/symbols", admin)).json()
    assert set(every) == {"pattern", "count", "symbols"}  # the node's shape
    assert every["count"] == len(universe) == len(every["symbols"])
    first = every["symbols"][0]
    assert first["key"] == universe[0].key
    assert first["current"]["bid"] == 10_050 and first["current"]["version"] == [1, 7]
    assert all(r["current"] is None for r in every["symbols"][1:])
    some = (await call(app, "GET", f"/admin/symbols?pattern={universe[0].key}", admin)).json()
    assert [r["key"] for r in some["symbols"]] == [universe[0].key]


async def test_the_sequencer_answers_at_most_the_cap_of_rows(tmp_path: Path) -> None:
    """Every row priced (the largest answer): within the state port's size cap."""
    universe = build_universe(2, SYMBOLS_CAP + 5, 1)
    state = RoleState(asyncio.get_running_loop())
    sequencer_state(state, RoleView(SystemClock()), universe, _EveryPrice())
    status, body = await state.states["symbols"]({"limit": "100000"})
    got = msgspec.json.decode(body)
    assert status == 200 and got["count"] == len(universe) > SYMBOLS_CAP
    assert len(got["symbols"]) == SYMBOLS_CAP and len(body) < MAX_STATE_BYTES
    assert all(r["current"] is not None for r in got["symbols"])
    assert (await state.states["symbols"]({"limit": "lots"}))[0] == 400


async def test_latency_is_the_nodes_handler_with_its_note(
    tmp_path: Path, verifier: TokenVerifier
) -> None:
    got = await call(_app(tmp_path, verifier), "GET", "/admin/latency?stage=glass",
                     mint(tmp_path, admin=True))  # fmt: skip
    assert got.status == 200 and "upper bound" in got.json()["note"]


def test_a_handler_without_an_endpoints_row_is_an_error() -> None:
    assert [row[1] for row in host_endpoints({"/admin/processes"})] == ["/admin/processes"]
    with pytest.raises(ValueError, match="/admin/nowhere"):
        host_endpoints({"/admin/processes", "/admin/nowhere"})
