"""The watchlist page's frame time in headless Chromium, against a naive page, in the same run.

``monotape run`` (the launcher: loopback, free ports, a temporary data dir) with a simulator
rate that keeps every one of ``symbols`` symbols changing at about the 25 Hz frame rate; then,
one page at a time in one headless Chromium (Debian's /usr/bin/chromium, driven by Playwright):

- ``watchlist``: the product page (GET /watchlist: dev sign-in through its form, the symbols
  added through ``watchlist.add``), painting once per animation frame only the lines
  ``view.takeChanged()`` names, only the cells whose text changed;
- ``naive`` (the measured peer): bench/e2e/naive_page.html (put in a document of the node's
  origin), the same SDK, token, symbols and table, writing the DOM per message (every quote to
  its cells at once, no batching, no check).

Both measure the same way (an init script, before the page's own): the interval between
successive ``requestAnimationFrame`` callbacks (the frame time the trader sees: 16.7 ms at
60 Hz while the main thread keeps up) over ``seconds`` after every line has a price and a
warm-up, and the long-animation-frame entries (PerformanceObserver, Chromium 123+: frames over
50 ms, with the script time inside them). Full mode alternates watchlist / naive ``repeats``
times on the same node so drift on a shared machine hits both alike.

Rows, per variant: ``frame time p99`` (median over the runs; min and max across them; the
watchlist's ratio = its p99 / the naive page's), and ``long frames`` per minute. Without
Chromium or Playwright the rows are skipped, with the reason.

    .venv/bin/python -m bench.e2e.bench_page [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.common import Row, median_min_max, print_rows, row
from monotape.loadgen.launch import RunningNode, launch
from monotape.testing.browser import CHROMIUM_ARGS

__all__ = ["run", "skipped_reason"]

HERE = Path(__file__).resolve().parent
NAIVE_PAGE = HERE / "naive_page.html"
CHROMIUM = "/usr/bin/chromium"  # the flags are the browser tests' (monotape/testing/browser.py)
# ~2,400 instruments share the simulated rate: 60,000 ticks/s is ~25 updates/s a symbol, so
# nearly every one of the 200 changes in every 40 ms frame. Quick mode halves it.
RATE_FULL, RATE_QUICK = 60_000, 30_000
READY_TIMEOUT_MS = 60_000
BENCH = "watchlist page frame time"
MAIN_THREAD = ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration")

# Runs before the page's own scripts: rAF intervals and long animation frames, from when asked.
MEASURE = """
(() => {
  const m = { on: false, deltas: [], long: [], last: null };
  window.__frames = m;
  const tick = (t) => {
    if (m.on && m.last !== null) m.deltas.push(t - m.last);
    m.last = t;
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
  try {
    new PerformanceObserver((list) => {
      if (!m.on) return;
      for (const e of list.getEntries()) {
        const script = (e.scripts || []).reduce((s, x) => s + x.duration, 0);
        m.long.push({ duration: e.duration, blocking: e.blockingDuration || 0, script });
      }
    }).observe({ type: "long-animation-frame", buffered: false });
  } catch (err) {
    m.noLoaf = String(err);
  }
})();
"""


def skipped_reason() -> str | None:
    """Why this bench cannot run here (the tool to install), or None."""
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        return "skipped: chromium not installed (apt-get install --no-install-recommends chromium)"
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "skipped: playwright not installed (pip install playwright, the dev extra)"
    return None


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def _main_thread_s(cdp: Any) -> dict[str, float]:
    """Chromium's cumulative main-thread times (CDP ``Performance.getMetrics``), in seconds:
    ``TaskDuration`` (all its tasks: script, style, layout, paint), ``ScriptDuration``,
    ``LayoutDuration``, ``RecalcStyleDuration``."""
    got = await cdp.send("Performance.getMetrics")
    return {m["name"]: float(m["value"]) for m in got["metrics"] if m["name"] in MAIN_THREAD}


async def _measure(page: Any, cdp: Any, symbols: int, seconds: float) -> dict[str, Any]:
    """Wait for every line to hold a price, warm up, then record for ``seconds``."""
    await page.wait_for_function(
        """(n) => window.watchlist && watchlist.client.view.quotes.size >= n""",
        arg=symbols,
        timeout=READY_TIMEOUT_MS,
    )
    await page.wait_for_timeout(1500)
    frames0 = await page.evaluate("() => watchlist.client.view.stats.frames")
    rendered0 = await page.evaluate("() => watchlist.client.view.stats.rendered")
    await page.evaluate("() => { __frames.deltas = []; __frames.long = []; __frames.on = true; }")
    busy0 = await _main_thread_s(cdp)
    await page.wait_for_timeout(int(seconds * 1000))
    busy1 = await _main_thread_s(cdp)
    got: dict[str, Any] = json.loads(
        await page.evaluate(
            "() => { __frames.on = false; return JSON.stringify({deltas: __frames.deltas,"
            " long: __frames.long, noLoaf: __frames.noLoaf || null,"
            " frames: watchlist.client.view.stats.frames,"
            " rendered: watchlist.client.view.stats.rendered,"
            " regressions: watchlist.client.view.stats.regressions}); }"
        )
    )
    got["frames"] -= frames0
    got["rendered"] -= rendered0
    got["busy_ms_s"] = {k: (busy1[k] - busy0.get(k, 0.0)) * 1000 / seconds for k in busy1}
    return got


async def _one(
    browser: Any, node: RunningNode, variant: str, symbols: int, seconds: float, slowdown: float
) -> Any:
    base = node.admin_url
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    cdp = await page.context.new_cdp_session(page)
    await cdp.send("Performance.enable")
    if slowdown > 1:  # a trader's slower machine: DevTools' CPU throttling, same for both pages
        await cdp.send("Emulation.setCPUThrottlingRate", {"rate": slowdown})
    # A node at 60,000 ticks/s on a shared 2-core machine can take longer than Playwright's
    # 30 s default to serve the page and its modules: wait as long as for the first prices.
    page.set_default_timeout(READY_TIMEOUT_MS)
    try:
        await page.add_init_script(MEASURE)
        if variant == "naive":
            # A document the node served (its /healthz), its content replaced by the naive page:
            # Chromium's Local Network Access checks block a WebSocket to loopback from a page
            # whose response did not come from a loopback address (as one fulfilled by
            # interception would not), and the page needs the node's origin for the SDK.
            await page.goto(f"{base}/healthz?n={symbols}")
            await page.set_content(NAIVE_PAGE.read_text())
            await page.evaluate(MEASURE)
        else:
            await page.goto(f"{base}/watchlist")
            await page.fill("#name", "bench")
            await page.click("#signin button[type=submit]")
            await page.wait_for_function(
                "() => document.body.dataset.badge === 'live'", timeout=READY_TIMEOUT_MS
            )
            await page.evaluate(
                "(n) => watchlist.add(watchlist.client.view.hello.instruments"
                ".slice(0, n).map(i => i.key))",
                symbols,
            )
        return await _measure(page, cdp, symbols, seconds)
    finally:
        await page.close()


async def _runs(
    node: RunningNode, symbols: int, seconds: float, repeats: int, slowdown: float
) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    out: dict[str, list[dict[str, Any]]] = {"watchlist": [], "naive": []}
    async with async_playwright() as pw:
        exe = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
        browser = await pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        try:
            for _ in range(repeats):
                for variant in ("watchlist", "naive"):
                    got = await _one(browser, node, variant, symbols, seconds, slowdown)
                    out[variant].append(got)
        finally:
            await browser.close()
    return out


def _rows(
    symbols: int, seconds: float, got: dict[str, list[dict[str, Any]]], slowdown: float = 1.0
) -> list[Row]:
    cpu = f", CPU {slowdown:g}x slower" if slowdown > 1 else ""
    bench = f"{BENCH} @ {symbols} symbols, 25 Hz{cpu}"
    p99s = {v: [p99(r["deltas"]) for r in runs] for v, runs in got.items()}
    med = {v: statistics.median(xs) for v, xs in p99s.items()}
    rows: list[Row] = []
    for variant, runs in got.items():
        value, lo, hi = median_min_max(p99s[variant])
        frames_s = statistics.median(r["frames"] / seconds for r in runs)
        quotes_s = statistics.median(r["rendered"] / seconds for r in runs)
        p50 = statistics.median(statistics.median(r["deltas"]) for r in runs)
        note = (
            f"rAF interval p99, {len(runs)} run(s) of {seconds:g} s; p50 {p50:.1f} ms; "
            f"{frames_s:.1f} frames/s, {quotes_s:.0f} quotes/s shown; "
            f"p99 per run {', '.join(f'{x:.1f}' for x in p99s[variant])} ms"
        )
        if any(r["regressions"] for r in runs):
            note += "; GUARD REGRESSIONS SEEN"
        is_peer = variant == "naive"
        rows.append(
            row(
                bench,
                "naive (DOM per message)" if is_peer else "watchlist (painted per frame)",
                value,
                "ms",
                lo=lo,
                hi=hi,
                ratio=1.0 if is_peer else value / med["naive"],
                peer="" if is_peer else "naive (DOM per message)",
                note=note,
            )
        )
        busy = [r["busy_ms_s"] for r in runs if r.get("busy_ms_s")]
        if busy:
            task, t_lo, t_hi = median_min_max([b.get("TaskDuration", 0.0) for b in busy])
            script_ms = statistics.median(b.get("ScriptDuration", 0.0) for b in busy)
            layout_ms = statistics.median(
                b.get("LayoutDuration", 0.0) + b.get("RecalcStyleDuration", 0.0) for b in busy
            )
            naive_busy = statistics.median(
                r["busy_ms_s"].get("TaskDuration", 0.0) for r in got["naive"] if r.get("busy_ms_s")
            )
            rows.append(
                row(
                    f"{BENCH}: main thread busy @ {symbols} symbols{cpu}",
                    variant,
                    task,
                    "ms/s",
                    lo=t_lo,
                    hi=t_hi,
                    ratio=1.0 if is_peer else (task / naive_busy if naive_busy else None),
                    peer="" if is_peer else "naive",
                    note=f"Chromium's main-thread task time per second (CDP Performance."
                    f"getMetrics TaskDuration): script {script_ms:.0f}, style + layout "
                    f"{layout_ms:.0f} ms/s",
                )
            )
        if not any(r["noLoaf"] for r in runs):
            per_min = statistics.median(len(r["long"]) * 60 / seconds for r in runs)
            script = statistics.median(sum(e["script"] for e in r["long"]) / seconds for r in runs)
            rows.append(
                Row(
                    f"{BENCH}: long animation frames @ {symbols} symbols{cpu}",
                    variant,
                    per_min,
                    "/min",
                    note=f"frames over 50 ms (long-animation-frame); script in them "
                    f"{script:.1f} ms/s",
                )
            )
    return rows


def run(
    quick: bool,
    *,
    symbols: int = 200,
    seconds: float | None = None,
    repeats: int | None = None,
    rate: int | None = None,
    slowdown: float = 1.0,
) -> list[Row]:
    bench = f"{BENCH} @ {symbols} symbols, 25 Hz"
    reason = skipped_reason()
    if reason is not None:
        return [
            Row(bench, "watchlist (painted per frame)", None, "ms", note=reason),
            Row(bench, "naive (DOM per message)", None, "ms", note=reason),
        ]
    seconds = seconds if seconds is not None else (4.0 if quick else 15.0)
    repeats = repeats if repeats is not None else (1 if quick else 3)
    rate = rate if rate is not None else (RATE_QUICK if quick else RATE_FULL)
    node = launch(
        None, "--rate", str(rate), env={"MONOTAPE_SERVER__ADMISSION_MAX_LAG_MS": "0"}, writers=0
    )  # the page against the one-process node, as its figures in docs/benchmarks.md were
    try:
        got = asyncio.run(_runs(node, symbols, seconds, repeats, slowdown))
    finally:
        node.stop()
    return _rows(symbols, seconds, got, slowdown)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--symbols", type=int, default=200)
    p.add_argument(
        "--cpu-slowdown",
        type=float,
        default=1.0,
        help="DevTools CPU throttling for both pages (4: a slower trader's machine; default 1)",
    )
    args = p.parse_args(argv)
    print_rows(run(args.quick, symbols=args.symbols, slowdown=args.cpu_slowdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
