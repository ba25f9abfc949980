// staleness.js (a port of sdk/staleness.py) and the view's stale(key): the watchdog, a stalled
// grid and down venues, each cleared by its own record (docs/wire.md, STALE).

import test from "node:test";
import assert from "node:assert/strict";

import { STALE_AFTER_MS, Staleness } from "../../monotape/platform/sdk/js/staleness.js";
import { TerminalView } from "../../monotape/platform/sdk/js/view.js";
import { staleLabel } from "../../monotape/platform/sdk/watchlist/board.js";

const stale = (grid, venues) => ({ kind: "stale", frame_no: 9n, grid_since_ms: BigInt(grid), venues: venues.map(([venue, s]) => ({ venue, since_ms: BigInt(s) })) });

test("the watchdog greys everything after silence; any message clears it", () => {
  let now = 0;
  const s = new Staleness({ clock: () => now, wallClock: () => 1_000 + now });
  assert.equal(s.isStale("XNAS:AAPL"), false); // nothing heard: nothing shown
  s.heard();
  now = STALE_AFTER_MS;
  assert.equal(s.isStale("XNAS:AAPL"), false);
  now += 1;
  assert.equal(s.sinceMs("EBS:EUR/USD"), 1_000);
  s.heard();
  assert.equal(s.isStale("XNAS:AAPL"), false);
});

test("a stalled grid greys every symbol until the next frame; a venue only its own", () => {
  const s = new Staleness({ clock: () => 0 });
  assert.equal(s.onMessage(stale(1234, [["XNAS", 500]])), true);
  assert.equal(s.sinceMs("XNAS:AAPL"), 500); // the earliest cause
  assert.equal(s.sinceMs("EBS:EUR/USD"), 1234);
  assert.equal(s.onMessage({ kind: "frame", frame_no: 10n, records: [] }), true);
  assert.equal(s.isStale("EBS:EUR/USD"), false);
  assert.equal(s.isStale("XNAS:AAPL"), true, "a FRAME clears the grid, not a venue");
  assert.equal(s.onMessage(stale(0, [])), true);
  assert.equal(s.isStale("XNAS:AAPL"), false);
  assert.equal(s.onMessage(stale(0, [])), false, "no change: no repaint");
});

test("the view repaints its held lines when the server's verdict changes", () => {
  const view = new TerminalView({ clock: () => 0 });
  view.hold(["XNAS:AAPL", "EBS:EUR/USD"]);
  view.takeChanged();
  view.receive(stale(0, [["XNAS", 5]]));
  assert.deepEqual([...view.takeChanged()].sort(), ["EBS:EUR/USD", "XNAS:AAPL"]);
  assert.equal(view.stale("XNAS:AAPL"), true);
  assert.equal(view.stale("EBS:EUR/USD"), false);
  assert.equal(view.staleSince("XNAS:AAPL"), 5);
});

test("a stale line says since when and for how long", () => {
  const at = new Date(2026, 11, 7, 9, 5, 3).getTime();
  assert.equal(staleLabel(at, at + 12_400), "stale since 09:05:03 (12 s)");
  assert.equal(staleLabel(at, at + 125_000), "stale since 09:05:03 (2 min)");
});
