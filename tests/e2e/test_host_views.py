"""The product's default, ``monotape run`` with no process flag: a host with a writer process
per core (its banner says what listens), and its views (issue 12, "observed as one";
host/admin_views.py): the latency timeline shows each process's GC pauses by name, the
embedded dashboards render from the host's merged metrics with their data routes answering,
and the watchlist page and its dev sign-in work as on the one-process node.

One host serves the module. Counts and names are asserted, never timings; deadlines are
generous (both cores may be busy)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from monotape import metric_names as m
from monotape.config import available_cores
from monotape.dashboards.panels import DASHBOARDS
from monotape.loadgen.launch import launch
from monotape.testing.browser import CHROMIUM_ARGS, collect_problems
from tests.conftest import NO_LAG_SHEDDING, STARTUP_S, RunningServer, until
from tests.e2e.test_cli import monotape
from tests.e2e.test_dashboards_browser import (  # the node's browser test's fixture and paths
    CHROMIUM,
    PANEL_TIMEOUT_MS,
    artifacts_dir,
    playwright_api,  # noqa: F401 (a fixture)
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WRITERS = max(1, min(16, available_cores()))  # a writer per core, as "auto" runs the host


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("views")
    env = {"MONOTAPE_HOST__RUN_BASE": str(tmp), "MONOTAPE_HOST__SCRAPE_TIMEOUT_S": "10"}
    # The host with a writer process per core, as "auto" runs it from 3 cores (on 2 "auto" is
    # the one-process node: test_the_default_is_the_placement_faster_here).
    running = launch(
        tmp / "data", "--rate", "2000", "--writers", str(WRITERS),
        env={**NO_LAG_SHEDDING, **env}, timeout_s=STARTUP_S,
    )  # fmt: skip
    yield running
    assert running.stop(timeout=40, sig=signal.SIGTERM) == 0, "".join(running.tail)


def get_json(host: RunningServer, path: str, token: str | None = None) -> Any:
    return json.loads(host.http(path, token, timeout=30))


def status_of(host: RunningServer, path: str, token: str | None = None) -> int:
    try:
        host.get(path, token, timeout=30)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def post_json(host: RunningServer, path: str, body: object) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        host.admin_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_hosts_banner_says_what_listens(host: RunningServer) -> None:
    writers = WRITERS
    names = {r["name"] for r in get_json(host, "/admin/processes", host.admin_token)["processes"]}
    assert {n for n in names if n.startswith("writer-")} == {f"writer-{i}" for i in range(writers)}
    banner = "".join(host.output)
    assert f"under host pid {host.proc.pid}" in banner
    for what in ("terminals", "metrics", "admin", "dashboards", "watchlist"):
        assert f"\n  {what}" in banner, what
    assert f"ws://127.0.0.1:{host.ws_port}/" in banner
    assert f"http://127.0.0.1:{host.admin_port}/dashboards" in banner
    # which send path the writers run (issue 13), as the gauge says it for each writer process
    line = re.search(r"\n  writer     (native|python \(.+\)) \(server.native_writer", banner)
    assert line is not None, banner
    native = 1.0 if line.group(1).startswith("native") else 0.0
    family = host.metric_families()[m.NATIVE_WRITER]
    by_process = {s.labels.get("process"): s.value for s in family.samples}
    assert set(by_process) == {f"writer-{i}" for i in range(writers)}, by_process
    assert set(by_process.values()) == {native}, by_process


def test_the_default_is_the_placement_faster_here(tmp_path: Path) -> None:
    """Bare ``monotape run`` ("auto"): below 3 cores the one-process node, said on the banner's
    processes line with the way to run the host; from 3, the host, a writer per core."""
    cores = available_cores()
    running = launch(tmp_path / "data", "--rate", "2000", env=NO_LAG_SHEDDING, timeout_s=STARTUP_S)
    try:
        banner = "".join(running.output)
        if cores < 3:
            assert f'one: "auto" on {cores} core' in banner, banner
            assert "--writers N runs the host" in banner and "under host pid" not in banner
        else:
            assert f"under host pid {running.proc.pid}" in banner, banner
    finally:
        assert running.stop(timeout=40, sig=signal.SIGTERM) == 0, "".join(running.tail)


async def test_the_timeline_names_each_process_gc_pauses(host: RunningServer) -> None:
    admin = host.mint(admin=True)
    assert status_of(host, "/admin/latency/timeline") == 401
    # A full collection in every process that runs a GC monitor (the host's /admin/gc/collect):
    # each pauses once in gen 2, and the timeline must say who paused.
    host.post("/admin/gc/collect", admin, timeout=30)
    want = {"sequencer"} | {f"writer-{i}" for i in range(WRITERS)}
    seen: set[str] = set()
    body: dict[str, Any] = {}

    def named() -> bool:
        body.update(get_json(host, "/admin/latency/timeline?window=2m", admin))
        pauses = [p for slot in body["intervals"] for p in slot["gc_pauses"]]
        seen.update(p["process"] for p in pauses if p["generation"] == 2)
        return want <= seen

    await until(named, f"gen-2 pauses of {sorted(want)} on the timeline", 60)
    assert want <= set(body["processes"])
    for slot in body["intervals"]:
        assert slot["end_ms"] - slot["start_ms"] == 10_000
        for p in slot["gc_pauses"]:
            assert slot["start_ms"] <= p["start_ms"] < slot["end_ms"]
            assert p["duration_ms"] >= 0

    # and the stages: intervals of every process merged (the writers' write stage among them)
    def staged() -> bool:
        got = get_json(host, "/admin/latency/timeline?window=2m", admin)
        return any("write" in slot["stages"] for slot in got["intervals"])

    await until(staged, "the writers' write stage on the timeline", 60)
    assert status_of(host, "/admin/latency/timeline?window=nope", admin) == 400
    svg = host.get("/admin/plots/latency.svg?window=2m", admin, timeout=30)
    assert svg.startswith(b"<svg")


async def test_the_dashboards_render_from_every_process(host: RunningServer) -> None:
    admin = host.mint(admin=True)
    page = host.get("/dashboards", timeout=30)
    assert b"/dashboards/static/uplot/uPlot.iife.min.js" in page
    assert host.get("/dashboards/static/dashboards.js", timeout=30)
    assert status_of(host, "/admin/dashboards") == 401
    index = get_json(host, "/admin/dashboards", admin)
    assert [d["uid"] for d in index["dashboards"]] == [d.uid for d in DASHBOARDS]
    assert status_of(host, "/admin/dashboards/monotape-health?window=2d", admin) == 400
    paths = get_json(host, "/openapi.json")["paths"]
    assert {"/dashboards", "/admin/dashboards/{uid}", "/admin/latency/timeline"} <= set(paths)

    def filled() -> bool:
        body = get_json(host, "/admin/dashboards/monotape-ordering?window=1m", admin)
        panel = next(p for p in body["panels"] if p["title"].startswith("admitted ticks/s"))
        latest = [s["values"][-1] for s in panel["series"]]
        # sampled from the sequencer's registry through the host's scrape: live and positive
        return len(body["t"]) >= 3 and bool(latest) and all(v and v > 0 for v in latest)

    await until(filled, "admitted ticks/s on the ordering dashboard", 60)
    for d in DASHBOARDS:
        body = get_json(host, f"/admin/dashboards/{d.uid}?window=5m", admin)
        assert [p["title"] for p in body["panels"]] == [p.title for p in d.panels]
        for p in body["panels"]:
            assert all(len(s["values"]) == len(body["t"]) for s in p["series"]), p["title"]


async def test_the_watchlist_page_and_its_dev_sign_in(host: RunningServer) -> None:
    page = host.get("/watchlist", timeout=30)
    assert b"/watchlist/static/page.js" in page and b"eyJ" not in page
    for path in ("/watchlist/static/page.js", "/watchlist/sdk/index.js"):
        assert host.get(path, timeout=30), path
    config = get_json(host, "/watchlist/config")
    assert config["ws_port"] == host.ws_port  # the port every writer shares
    assert config["auth"] is True and config["dev_sign_in"] is True
    status, refused = post_json(host, "/watchlist/token", {"name": "-bad"})
    assert status == 400 and refused["parameter"] == "name"
    status, minted = post_json(host, "/watchlist/token", {"name": "alice"})
    assert status == 200 and minted["sub"] == "alice"
    # the page's token opens a terminal on a writer: its first message is the hello
    url = f"ws://127.0.0.1:{host.ws_port}/?token={minted['token']}"
    async with websockets.connect(url, open_timeout=30) as ws:
        first = await asyncio.wait_for(ws.recv(), 30)
    assert isinstance(first, bytes) and first


async def test_the_host_dashboard_in_chromium(
    host: RunningServer,
    playwright_api: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    """The page signs in and draws the host's panels (one dashboard: the browser is the cost);
    a screenshot lands beside the node's, ``host-<uid>.png``."""
    admin = host.mint(admin=True)
    host.post("/admin/gc/collect", admin, timeout=30)  # gen-2 pauses to shade, of every process
    uid = "monotape-tick-to-glass"
    problems: list[str] = []
    async with playwright_api() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1600, "height": 1000})
            collect_problems(page, problems)
            page.on(
                "response",
                lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
            )
            await page.goto(f"{host.admin_url}/dashboards")
            await page.fill("#token", admin)
            await page.click("#signin button[type=submit]")
            await page.wait_for_selector("#tabs button[aria-current=page]")
            await page.select_option("#window", "1m")
            await page.click(f"#tabs button[data-uid='{uid}']")
            # the stages the host's processes record (decode, sequence, encode, write) draw
            await page.wait_for_function(
                "() => [...document.querySelectorAll('#panels .panel')]"
                ".filter(p => Number(p.dataset.values) > 0).length >= 4",
                timeout=PANEL_TIMEOUT_MS * 2,
            )
            note = await page.text_content("#panels .panel .gcnote")
            assert note and "that matter (shaded)" in note, note
            await page.screenshot(path=str(artifacts_dir() / f"host-{uid}.png"), full_page=True)
        finally:
            await browser.close()
    assert not problems, "\n".join(problems)


def test_tape_and_symbols_work_against_the_default(
    host: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # The two client commands the banner prints, as a person runs them: from another directory,
    # finding the host through its data dir (tests/conftest.py: the cheap product-level tests
    # run the default; this module's host is shared by them).
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    dd = ("--data-dir", str(host.data_dir))
    tape = monotape("tape", *dd, "XNAS:AAPL", "--count", "3", cwd=elsewhere)
    assert tape.returncode == 0, tape.stderr[-2000:]
    assert len(tape.stdout.strip().splitlines()) == 4  # the header and three quotes
    assert all("XNAS:AAPL" in line for line in tape.stdout.strip().splitlines()[1:])
    symbols = monotape("symbols", *dd, "XNAS:*", cwd=elsewhere)
    assert symbols.returncode == 0, symbols.stderr[-2000:]
    keys = [line.split()[0] for line in symbols.stdout.strip().splitlines()[1:]]
    assert "XNAS:AAPL" in keys and all(k.startswith("XNAS:") for k in keys)
    assert "built-in universe" not in symbols.stderr  # the host answered, not the fallback
