"""The host's admin API guards /admin/* exactly as the node does (one guard:
node/admin_params.admin_guard): 403 with auth off, 401 with the hint and WWW-Authenticate
without a token, 403 without the admin claim, 400 naming a bad parameter, 200 for an admin."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette

from monotape.config import AuthConfig
from monotape.platform.auth import TokenVerifier, build_verifier
from monotape.platform.feeds.simulator import build_universe
from monotape.platform.host.admin import Observer, build_host_admin_app
from monotape.platform.host.supervisor import ProcessTable
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


async def test_probes_need_no_token(tmp_path: Path) -> None:
    app = _app(tmp_path, None)
    assert (await call(app, "GET", "/healthz")).status == 503  # nothing runs yet
    assert (await call(app, "GET", "/readyz")).status == 503


async def test_symbols_lists_the_dictionary_without_prices(
    tmp_path: Path, verifier: TokenVerifier
) -> None:
    """``monotape symbols`` against a host: the keys and their scale, ``current`` null."""
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
    venue = universe[0].venue
    some = (await call(app, "GET", f"/admin/symbols?pattern={venue}:*&limit=2", admin)).json()
    assert some["count"] == sum(1 for i in universe if i.venue == venue)
    assert len(some["symbols"]) == min(2, some["count"])
    assert (await call(app, "GET", "/admin/symbols")).status == 401
