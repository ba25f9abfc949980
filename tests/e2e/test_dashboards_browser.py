"""The embedded dashboards in a real browser: headless Chromium (the system /usr/bin/chromium,
driven by Playwright) against a real `monotape run` with a terminal on it.

Signs in through the page's own form (the token goes to sessionStorage, never into the URL),
opens every dashboard, and waits until every panel has drawn values; no console errors or
failed requests; a screenshot per dashboard is saved under .artifacts/dashboards/ (or
$MONOTAPE_ARTIFACTS) to look at.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from monotape.dashboards.panels import DASHBOARDS
from monotape.platform.sdk.client import TerminalClient
from monotape.testing.browser import CHROMIUM_ARGS, collect_problems
from monotape.testing.tools import missing_tool
from tests.conftest import RunningServer, ServerFactory, mint

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
# Every panel must draw within this long of the dashboard opening: the page polls every 2 s and
# the node samples every 1 s; generous, because both cores may be busy.
PANEL_TIMEOUT_MS = 20_000


def artifacts_dir() -> Path:
    out = Path(os.environ.get("MONOTAPE_ARTIFACTS", ROOT / ".artifacts")) / "dashboards"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def playwright_api() -> Any:
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        missing_tool("chromium not installed: apt-get install chromium (the Debian package)")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        missing_tool("playwright not installed: pip install playwright (the dev extra)")
    return async_playwright


async def test_every_panel_of_every_dashboard_shows_data(
    server_factory: ServerFactory, tmp_path: Path, playwright_api: Any
) -> None:
    config = tmp_path / "monotape.toml"
    # every connection in the glass cohort, pinged every second: the glass panel has values
    config.write_text("[server]\nglass_share = 1.0\nglass_interval_s = 1.0\n")
    server: RunningServer = server_factory.start("--rate", "4000", "--config", str(config))
    admin = mint(server.data_dir, admin=True)
    client = TerminalClient(server.url)
    hello = await client.connect()
    await client.subscribe([i.key for i in hello.instruments[:60]])
    await client.set_priority([i.key for i in hello.instruments[:4]])  # the priority stage
    # A second terminal that reconnects: hydration, upgrades and a disconnect reason.
    other = TerminalClient(server.url)
    await other.connect()
    await other.subscribe([i.key for i in hello.instruments[:20]])
    await other.close()
    # Wait for one 10 s interval to close, so the exact HDR percentiles exist.
    await asyncio.sleep(11)
    server.post("/admin/gc/collect", admin)  # a gen-2 pause: it must be shaded over latency

    base = f"http://127.0.0.1:{server.admin_port}"
    out = artifacts_dir()
    problems: list[str] = []
    async with playwright_api() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1600, "height": 1000})
            collect_problems(page, problems)
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            page.on(
                "response",
                lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
            )
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))

            await page.goto(f"{base}/dashboards")
            # A terminal's token is not an admin's: refused with the server's reason, forgotten.
            await page.fill("#token", mint(server.data_dir))
            await page.click("#signin button[type=submit]")
            await page.wait_for_function(
                "() => document.getElementById('signin-error').textContent.includes('admin')"
            )
            assert await page.evaluate("sessionStorage.getItem('monotape.adminToken')") is None
            # the one refusal we asked for (the response, and Chromium's console line about it)
            expected = [p for p in problems if "403" in p]
            assert expected, problems
            problems[:] = [p for p in problems if p not in expected]
            await page.fill("#token", admin)
            await page.click("#signin button[type=submit]")
            await page.wait_for_selector("#tabs button[aria-current=page]")
            stored = await page.evaluate("sessionStorage.getItem('monotape.adminToken')")
            assert stored == admin
            # The node has run for seconds: a 1-minute window reads best in the screenshots.
            await page.select_option("#window", "1m")

            for d in DASHBOARDS:
                await page.click(f"#tabs button[data-uid='{d.uid}']")
                await page.wait_for_function(
                    """(n) => {
                        const ps = [...document.querySelectorAll('#panels .panel')];
                        return ps.length === n && ps.every(p => Number(p.dataset.values) > 0);
                    }""",
                    arg=len(d.panels),
                    timeout=PANEL_TIMEOUT_MS,
                )
                titles = await page.eval_on_selector_all(
                    "#panels .panel", "ps => ps.map(p => p.dataset.title)"
                )
                assert titles == [p.title for p in d.panels]
                canvases = await page.eval_on_selector_all("#panels .panel canvas", "c => c.length")
                assert canvases == len(d.panels), "a panel without a uPlot canvas"
                if d.gc_overlay is not None:
                    note = await page.text_content("#panels .panel .gcnote")
                    assert note and "that matter (shaded)" in note, note
                await page.wait_for_timeout(500)
                await page.screenshot(path=str(out / f"{d.uid}.png"), full_page=True)

            # The window picker changes what is asked for, and the page keeps drawing.
            await page.select_option("#window", "15m")
            await page.wait_for_function(
                "() => [...document.querySelectorAll('#panels .panel')]"
                ".every(p => Number(p.dataset.values) > 0)",
                timeout=PANEL_TIMEOUT_MS,
            )
            assert any("window=15m" in u for u in requests)
            assert all(admin not in u for u in requests), "the token leaked into a URL"
            assert admin not in page.url
            assert not [u for u in requests if not u.startswith(base)], "a request left the node"
        finally:
            await browser.close()
    await client.close()
    assert not problems, "\n".join(problems)
