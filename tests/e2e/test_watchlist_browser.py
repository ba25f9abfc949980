"""The watchlist page in a real browser (issue 15): headless Chromium (the system
/usr/bin/chromium, driven by Playwright) against `monotape run --restart-every 2`.

Signs in through the page's dev sign-in form, picks symbols through its search, marks one as in
the order ticket, and watches prices arrive; then the node is drained (POST /admin/drain: the
page must come back no sooner than the hint the node gave it) and resumed, while a feed handler
per venue restarts every 2 s. Throughout, the server's sequence-regression counter rises (the
restarted handlers' stale copies, dropped by the sequencer) and the page's own guard counts no
regression. The token never appears in a URL. A screenshot is saved under
.artifacts/watchlist/ (or $MONOTAPE_ARTIFACTS/watchlist/) to look at.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from monotape import metric_names as m
from monotape.testing.browser import CHROMIUM_ARGS, collect_problems
from monotape.testing.tools import missing_tool, require_tool
from tests.conftest import RunningServer, ServerFactory, mint, until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Generous: both cores may be busy (tests never assert how fast, only that it happens).
WAIT_MS = 30_000
BIGINTS = "(k, v) => typeof v === 'bigint' ? String(v) : v"


def artifacts_dir() -> Path:
    out = Path(os.environ.get("MONOTAPE_ARTIFACTS", ROOT / ".artifacts")) / "watchlist"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def chromium() -> tuple[str, Any]:
    path = require_tool("chromium", "chromium")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        missing_tool("playwright not installed: pip install playwright (the dev extra)")
    return path, async_playwright


async def _js(page: Any, expr: str) -> Any:
    """A JSON value out of the page (BigInt as strings)."""
    return json.loads(await page.evaluate(f"() => JSON.stringify({expr}, {BIGINTS})"))


async def _frames(page: Any) -> int:
    return int(await page.evaluate("() => watchlist.client.view.stats.frames"))


async def test_the_watchlist_page_survives_a_drain_and_feed_restarts(
    server_factory: ServerFactory, chromium: tuple[str, Any]
) -> None:
    executable, async_playwright = chromium
    server: RunningServer = server_factory.start("--rate", "4000", "--restart-every", "2")
    admin = mint(server.data_dir, admin=True)
    base = f"http://127.0.0.1:{server.admin_port}"
    # the banner names the page, and how to sign in on this node
    banner = re.search(r"watchlist\s+(http://\S+)\s+\(([^)]*)\)", "\n".join(server.output))
    assert banner is not None, server.output[-30:]
    assert banner.groups() == (f"{base}/watchlist", "dev sign-in: any name")
    regressions_at_start = server.metric_sum(m.SEQUENCE_REGRESSIONS)
    problems: list[str] = []
    urls: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 860})
            collect_problems(page, problems)
            page.on("request", lambda r: urls.append(r.url))
            page.on("websocket", lambda ws: urls.append(ws.url))

            # -- sign in, pick symbols, mark the order ticket ---------------------------------
            await page.goto(banner.group(1))
            await page.fill("#name", "e2e-trader")
            await page.click("#signin button[type=submit]")
            await page.wait_for_function(
                "() => document.body.dataset.badge === 'live'", timeout=WAIT_MS
            )
            await page.fill("#search", "AAPL")
            await page.click("#results li[data-key='XNAS:AAPL']")
            await page.fill("#search", "XNYS:*")
            await page.click("#add-matching")
            await page.fill("#search", "")
            await page.wait_for_function(
                "() => watchlist.client.view.held.size >= 100", timeout=WAIT_MS
            )
            held = int(await page.evaluate("() => watchlist.client.view.held.size"))
            assert held <= 256, held  # the node's max_subscriptions, never more asked
            await page.click(".line[data-key='XNAS:AAPL'] button.mark")
            await page.wait_for_function(
                "() => watchlist.client.view.stats.priority > 0", timeout=WAIT_MS
            )
            assert await page.get_attribute(".line[data-key='XNAS:AAPL']", "class") == "line ticket"

            # -- live prices on every line ------------------------------------------------------
            await page.wait_for_function(
                """() => [...document.querySelectorAll('#rows .line')]
                    .every(line => line.children[1].textContent !== '-')""",
                timeout=WAIT_MS,
            )
            rows = int(await page.evaluate("() => document.querySelectorAll('#rows .line').length"))
            assert rows == held
            version = ".line[data-key='XNAS:AAPL'] [data-col=version]"
            before = await page.text_content(version)
            await page.wait_for_function(
                "([sel, v]) => document.querySelector(sel).textContent !== v",
                arg=[version, before],
                timeout=WAIT_MS,
            )  # the order-ticket symbol's version moves on screen
            epochs_at_start = await _js(
                page, "[...watchlist.client.view.quotes.values()].map(q => Number(q.epoch))"
            )

            # -- a drain: back no sooner than the node's hint, then resumed ----------------------
            assert server.post("/admin/drain", admin)
            await page.wait_for_function(
                "() => watchlist.client.stats.closeLog.some(c => c.hintMs !== null)",
                timeout=WAIT_MS,
            )
            closes = await _js(page, "watchlist.client.stats.closeLog")
            drained = next(c for c in closes if c["hintMs"] is not None)
            assert drained["delayMs"] >= drained["hintMs"], drained
            badge = await page.text_content("#badge")
            assert badge is not None and badge.startswith(("reconnecting in", "connecting")), badge
            # Drained, the node refuses the page's next attempt in band (a browser cannot read
            # the 503): CLOSE before HELLO, 1013 and the Retry-After as the hint, honoured.
            await page.wait_for_function(
                "() => watchlist.client.stats.refusedInBand >= 1", timeout=WAIT_MS
            )
            closes = await _js(page, "watchlist.client.stats.closeLog")
            refused = next(c for c in closes if c["why"] == "refused")
            assert refused["code"] == 1013, refused
            assert refused["hintMs"] is not None and refused["hintMs"] >= 1000, refused
            assert refused["delayMs"] >= refused["hintMs"], refused
            assert await _js(page, "watchlist.client.stats.connectErrors") == 0
            assert server.post("/admin/resume", admin)
            await page.wait_for_function(
                "() => watchlist.client.stats.connects >= 2"
                " && document.body.dataset.badge === 'live'",
                timeout=WAIT_MS,
            )
            frames = await _frames(page)
            await page.wait_for_function(
                "(n) => watchlist.client.view.stats.frames > n + 25", arg=frames, timeout=WAIT_MS
            )
            # the watchlist and the ticket came back with the connection
            assert int(await page.evaluate("() => watchlist.client.view.held.size")) == held
            assert await page.evaluate("() => watchlist.client.view.priorityKeys.has('XNAS:AAPL')")

            # the token refresh (due at 60-85% of its 15 minutes), run now: the dev sign-in
            # mints a fresh token and the node takes it on the open connection
            connects = await _js(page, "watchlist.client.stats.connects")
            await page.evaluate("() => watchlist.client.tokenRefresh.run(false)")
            await page.wait_for_function(
                "() => watchlist.client.stats.tokenRefreshes >= 1", timeout=WAIT_MS
            )
            assert await _js(page, "watchlist.client.stats.tokenRefreshFailures") == 0
            assert await _js(page, "watchlist.client.stats.connects") == connects

            # -- feed handlers restarted under it: the server drops, the glass never does -------
            await until(
                lambda: server.metric_sum(m.SEQUENCE_REGRESSIONS) > regressions_at_start,
                "the server's sequence regressions rise (restarted handlers)",
                timeout_s=40,
            )
            epochs_now = await _js(
                page, "[...watchlist.client.view.quotes.values()].map(q => Number(q.epoch))"
            )
            assert max(epochs_now) > max(epochs_at_start), "no restarted handler's epoch shown"
            stats = await _js(page, "watchlist.client.view.stats")
            assert stats["regressions"] == 0, stats["lastRegression"]
            assert await page.text_content("#regressions") == "0"
            assert int(await page.text_content("#fps") or 0) > 0

            await page.wait_for_timeout(500)
            shot = artifacts_dir() / "watchlist.png"
            await page.screenshot(path=str(shot))
            assert shot.stat().st_size > 10_000
        finally:
            await browser.close()
    assert server.metric_sum(m.SEQUENCE_REGRESSIONS) > regressions_at_start
    assert not [u for u in urls if "token=" in u or "eyJ" in u], "a token in a URL"
    # nothing on the console: not even a failed handshake (every refusal came in band)
    assert not problems, "\n".join(problems)
