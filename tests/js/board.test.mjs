// The watchlist page's pure decisions (monotape/platform/sdk/watchlist/board.js): search over the
// HELLO dictionary, the connection badge, frames per second.

import test from "node:test";
import assert from "node:assert/strict";

import { RateMeter, STALE_AFTER_MS, badge, searchKeys } from "../../monotape/platform/sdk/watchlist/board.js";

const KEYS = ["XNAS:AAPL", "XNYS:AAPL", "XNAS:AAPD", "XNAS:MSFT", "EBS:EUR/USD", "EBS:USD/JPY", "XNAS:PAAPL"];

test("search: exact symbol first, then prefixes, then substrings; any case; limited", () => {
  assert.deepEqual(searchKeys(KEYS, "aapl", 10), ["XNAS:AAPL", "XNYS:AAPL", "XNAS:PAAPL"]);
  assert.deepEqual(searchKeys(KEYS, "AAP", 10), ["XNAS:AAPD", "XNAS:AAPL", "XNYS:AAPL", "XNAS:PAAPL"]);
  assert.deepEqual(searchKeys(KEYS, "usd", 10), ["EBS:USD/JPY", "EBS:EUR/USD"]);
  assert.deepEqual(searchKeys(KEYS, "xnys:aapl", 10), ["XNYS:AAPL"]);
  assert.equal(searchKeys(KEYS, "A", 2).length, 2);
  assert.deepEqual(searchKeys(KEYS, "  ", 3), KEYS.slice(0, 3));
  assert.deepEqual(searchKeys(KEYS, "nope", 10), []);
});

test("search: a glob with * (regex characters in keys are literal)", () => {
  assert.deepEqual(searchKeys(KEYS, "XNAS:*", 10), ["XNAS:AAPL", "XNAS:AAPD", "XNAS:MSFT", "XNAS:PAAPL"]);
  assert.deepEqual(searchKeys(KEYS, "*/usd", 10), ["EBS:EUR/USD"]);
  assert.deepEqual(searchKeys(["A:B.C", "A:BXC"], "a:b.*", 10), ["A:B.C"]);
  assert.deepEqual(searchKeys(KEYS, "*", 3), KEYS.slice(0, 3));
});

test("badge: live, stale when silent past the limit, reconnecting in N s, connecting, off", () => {
  assert.deepEqual(badge({ state: "connected", now: 5000, lastMessageAt: 4000, nextAttemptAt: null }), { text: "live", tone: "live" });
  const silent = badge({ state: "connected", now: 5000 + STALE_AFTER_MS + 1, lastMessageAt: 0, nextAttemptAt: null });
  assert.equal(silent.tone, "stale");
  assert.match(silent.text, /^stale \d+ s$/);
  assert.deepEqual(badge({ state: "backoff", now: 1000, lastMessageAt: null, nextAttemptAt: 3400 }), { text: "reconnecting in 3 s", tone: "wait" });
  assert.equal(badge({ state: "backoff", now: 9000, lastMessageAt: null, nextAttemptAt: 3400 }).text, "reconnecting in 0 s");
  assert.equal(badge({ state: "connecting", now: 0, lastMessageAt: null, nextAttemptAt: null }).tone, "wait");
  assert.equal(badge({ state: "closed", now: 0, lastMessageAt: null, nextAttemptAt: null }).tone, "off");
  assert.equal(badge({ state: "idle", now: 0, lastMessageAt: null, nextAttemptAt: null }).text, "signed out");
});

test("RateMeter: frames a second over a sliding window", () => {
  const m = new RateMeter(2000);
  assert.equal(m.sample(0, 0), 0);
  let rate = 0;
  for (let t = 250, n = 0; t <= 10_000; t += 250) rate = m.sample((n += 6.25), t); // 25/s
  assert.ok(Math.abs(rate - 25) < 1e-9, String(rate));
  for (let t = 10_250, n = 250; t <= 14_000; t += 250) rate = m.sample((n += 1.25), t); // 5/s
  assert.ok(Math.abs(rate - 5) < 1e-9, String(rate));
  assert.ok(m.samples.length <= 10);
});
