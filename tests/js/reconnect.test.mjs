// The reconnect policy: full jitter within its bounds, never sooner than the server's hint or
// Retry-After, the cap respected when the server says nothing, attempts reset by a stable
// connection. Property loops over many seeded random inputs.

import test from "node:test";
import assert from "node:assert/strict";

import { MAX_HINT_MS, ReconnectPolicy, hintFromReason, nextDelay, parseRetryAfter } from "../../monotape/platform/sdk/js/reconnect.js";
import { rng } from "./support/rng.mjs";

test("property: the delay is the longest of hint, Retry-After and a full-jitter draw", () => {
  const r = rng(7);
  for (let i = 0; i < 20_000; i++) {
    const attempt = Math.floor(r() * 80) - 5; // negatives and past the exponent limit too
    const baseMs = r() < 0.1 ? 0 : r() * 1000;
    const capMs = r() < 0.1 ? 0 : r() * 30_000;
    const hintMs = r() < 0.4 ? null : Math.floor(r() * 2 * MAX_HINT_MS) - 10;
    const retryAfterMs = r() < 0.5 ? null : Math.floor(r() * 2 * MAX_HINT_MS) - 10;
    const unauthorized = r() < 0.2;
    const u = r();
    const d = nextDelay({ attempt, baseMs, capMs, hintMs, retryAfterMs, unauthorized, random: () => u });
    const floor = Math.max(0, Math.min(hintMs ?? 0, MAX_HINT_MS), Math.min(retryAfterMs ?? 0, MAX_HINT_MS));
    const ceiling = unauthorized ? capMs : Math.min(capMs, baseMs * 2 ** Math.min(Math.max(attempt, 0), 62));
    const why = JSON.stringify({ attempt, baseMs, capMs, hintMs, retryAfterMs, unauthorized, u, d });
    assert.ok(Number.isFinite(d), why);
    assert.ok(d >= floor, `never sooner than the server's word: ${why}`);
    assert.ok(d <= Math.max(floor, ceiling) + 1e-9, `within the jitter's bound: ${why}`);
    if (unauthorized) assert.ok(d >= capMs / 2 - 1e-9, `a refused token waits at least cap/2: ${why}`);
  }
});

test("full jitter spreads over the whole window (not a fixed delay, not only its top)", () => {
  const r = rng(11);
  const draws = Array.from({ length: 4000 }, () => nextDelay({ attempt: 3, baseMs: 250, capMs: 15_000, random: r }));
  const window = 250 * 2 ** 3;
  assert.ok(Math.min(...draws) < window * 0.05);
  assert.ok(Math.max(...draws) > window * 0.95);
  const mean = draws.reduce((a, b) => a + b, 0) / draws.length;
  assert.ok(Math.abs(mean - window / 2) < window * 0.05, `mean ${mean}`);
});

test("hints: a drain's hint is a floor above the cap, and clamped at MAX_HINT_MS", () => {
  const zero = () => 0;
  assert.equal(nextDelay({ attempt: 0, hintMs: 40_000, capMs: 15_000, random: zero }), 40_000);
  assert.equal(nextDelay({ attempt: 0, hintMs: 10 * MAX_HINT_MS, random: zero }), MAX_HINT_MS);
  assert.equal(nextDelay({ attempt: 0, retryAfterMs: 3000, hintMs: 1000, random: zero }), 3000);
  assert.equal(nextDelay({ attempt: 0, hintMs: 0, random: zero }), 0);
});

test("Retry-After: delay-seconds or an HTTP-date; anything else is no hint", () => {
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter(" 120 "), 120_000);
  const now = Date.parse("Tue, 01 Dec 2026 01:00:00 GMT");
  assert.equal(parseRetryAfter("Tue, 01 Dec 2026 01:00:05 GMT", now), 5000);
  assert.equal(parseRetryAfter("Tue, 01 Dec 2026 00:59:00 GMT", now), 0); // past: now
  for (const bad of [null, undefined, "", "soon", "-1", "1.5", "2026-12-01"]) assert.equal(parseRetryAfter(bad), null, String(bad));
});

test("the close reason's reconnect_after_ms", () => {
  assert.equal(hintFromReason("drain; reconnect_after_ms=2500"), 2500);
  assert.equal(hintFromReason("going away"), null);
  assert.equal(hintFromReason(""), null);
  assert.equal(hintFromReason(undefined), null);
});

test("the policy: attempts grow while refused, and reset after a stable connection", () => {
  const p = new ReconnectPolicy({ baseMs: 100, capMs: 10_000, stableAfterMs: 1000, random: () => 0.999999 });
  const windows = [0, 1, 2, 3, 4].map(() => p.next({ why: "error" }));
  assert.deepEqual(windows.map((d) => Math.round(d)), [100, 200, 400, 800, 1600]);
  p.connectionEnded(500); // up only briefly: still backing off
  assert.equal(p.attempt, 5);
  p.connectionEnded(1000);
  assert.equal(p.attempt, 0);
  assert.equal(p.next({ hintMs: 2500, why: "close" }), 2500);
  assert.deepEqual(p.history.at(-1), { attempt: 0, delayMs: 2500, why: "close" });
  // capped however many times it was refused
  for (let i = 0; i < 200; i++) assert.ok(p.next() <= 10_000);
  assert.ok(p.history.length <= 100);
});
