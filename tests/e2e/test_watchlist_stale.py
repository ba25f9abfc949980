"""The watchlist page greys stale lines (issue 40, item 3), in headless Chromium against a real
in-process node: both feed handlers of one venue stop, that venue's lines turn grey with "stale
since ..." and the other venue's stay live; the handlers come back and the lines clear. A
screenshot of the greyed page is saved under .artifacts/watchlist/ to look at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from monotape.platform.node.node import Node
from monotape.testing.browser import CHROMIUM_ARGS, collect_problems
from tests.conftest import node_config
from tests.e2e.test_watchlist_browser import WAIT_MS, artifacts_dir, chromium  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# the lines of venue ``v`` (a page function's argument)
LINES = "[...document.querySelectorAll(`#rows .line[data-key^='${v}:']`)]"


async def test_a_down_venue_s_lines_turn_grey_with_since_when_and_clear_on_recovery(
    tmp_path: Path,
    chromium: tuple[str, Any],  # noqa: F811
) -> None:
    executable, async_playwright = chromium
    # 120 instruments over 6 venues: both venues' lines fit one watchlist (256)
    overrides: dict[str, object] = {
        "simulator.rate": 2000,
        "simulator.instruments": 120,
        "auth.enabled": True,
    }
    node = Node(node_config(tmp_path, overrides))
    await node.start()
    problems: list[str] = []
    try:
        venues = sorted({i.venue for i in node.universe})
        down, live = venues[0], venues[1]
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 700})
                collect_problems(page, problems)
                await page.goto(f"http://127.0.0.1:{node.admin_port}/watchlist")
                await page.fill("#name", "stale-trader")
                await page.click("#signin button[type=submit]")
                await page.wait_for_function(
                    "() => document.body.dataset.badge === 'live'", timeout=WAIT_MS
                )
                for venue in (down, live):
                    await page.fill("#search", f"{venue}:*")
                    await page.click("#add-matching")
                await page.fill("#search", "")
                await page.wait_for_function(
                    """() => [...document.querySelectorAll('#rows .line')].length > 10 &&
                        [...document.querySelectorAll('#rows .line')]
                          .every(line => line.children[1].textContent !== '-')""",
                    timeout=WAIT_MS,
                )
                for h in node.handlers:
                    if h.venue == down:
                        h.stop()
                await page.wait_for_function(
                    f"(v) => {LINES}.every(l => l.classList.contains('stale'))",
                    arg=down,
                    timeout=WAIT_MS,
                )
                live_lines, live_grey = await page.evaluate(
                    f"""(v) => [{LINES}.length,
                        {LINES}.filter(l => l.classList.contains('stale')).length]""",
                    live,
                )
                assert live_lines > 5 and live_grey == 0, "a live venue's lines were greyed"
                since = await page.text_content(f"#rows .line[data-key^='{down}:'] .since")
                assert since is not None and since.startswith("stale since "), since
                await page.screenshot(path=str(artifacts_dir() / "watchlist-stale.png"))
                for h in node.handlers:
                    if h.venue == down:
                        h.start()
                await page.wait_for_function(
                    "() => !document.querySelector('#rows .line.stale')", timeout=WAIT_MS
                )
                regressions = await page.evaluate("() => watchlist.client.view.stats.regressions")
                assert regressions == 0
            finally:
                await browser.close()
    finally:
        await node.stop()
    assert not problems, problems
