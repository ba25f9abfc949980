// Issue 15's client side over a fake WebSocket and fake timers: max_hz (`rate` after every
// HELLO), the token refresh (a jittered point between 60% and 85% of the remaining lifetime,
// one retry after 10 s) and the glass report (every 10 s, only when a count changed).

import test from "node:test";
import assert from "node:assert/strict";

import { TerminalClient } from "../../monotape/platform/sdk/js/client.js";
import { ErrorCode } from "../../monotape/platform/sdk/js/decoder.js";
import { REFRESH_AT, refreshDelayMs, tokenExpiry } from "../../monotape/platform/sdk/js/upkeep.js";
import { msgpackValue } from "./support/vectors.mjs";
import { FakeTimers, fakeJwt, fakeWebSocketClass, settle } from "./support/fakes.mjs";
import { rng } from "./support/rng.mjs";
import { KEYS, delta, enc, frame, full, helloBytes, snapshot, tick } from "./support/wire.mjs";

const WALL0 = 1_800_000_000_000; // the wall clock at the fake timers' start (ms)

function setup(options = {}) {
  const timers = new FakeTimers();
  const WS = fakeWebSocketClass();
  const client = new TerminalClient("ws://127.0.0.1:8765/", {
    WebSocket: WS,
    clock: timers.clock,
    wallClock: () => WALL0 + timers.now,
    timers: timers.api,
    random: () => 0.5,
    silenceTimeoutMs: 0,
    ...options,
  });
  return { client, timers, WS, sock: () => WS.sockets.at(-1) };
}

const requests = (ws) => ws.sent.map((b) => msgpackValue(b));
const wallSec = (t) => (WALL0 + t.timers.now) / 1000;
/** Milliseconds until the open connection's token refresh fires (other timers run meanwhile). */
const refreshIn = (t) => t.client.tokenRefresh.nextAt - (WALL0 + t.timers.now);

async function connected(t) {
  t.client.connect().catch(() => {});
  await settle();
  t.sock().deliver(helloBytes());
  await settle();
}

/** ACK the last request (or ERROR it with `code`). */
async function reply(t, code = 0) {
  const r = requests(t.sock()).at(-1);
  if (code) t.sock().deliver(enc.encodeError(code, "no", r.req));
  else t.sock().deliver(enc.encodeAck(r.req, 0, 0));
  await settle();
  return r;
}

test("tokenExpiry reads a JWT's exp without verifying; anything else is null", () => {
  assert.equal(tokenExpiry(fakeJwt(1234)), 1234);
  for (const bad of [null, "", "abc", "a.b", "a.%%%.c", fakeJwt("soon"), "a.e30.c"]) assert.equal(tokenExpiry(bad), null, String(bad));
});

test("refreshDelayMs: always within 60-85% of the remaining lifetime; null once expired", () => {
  const r = rng(7);
  for (let i = 0; i < 2000; i++) {
    const now = Math.floor(r() * 1e12);
    const left = Math.floor(r() * 3.6e6) + 1;
    const d = refreshDelayMs((now + left) / 1000, now, r);
    assert.ok(d >= left * REFRESH_AT[0] - 1e-6 && d <= left * REFRESH_AT[1] + 1e-6, `${d} of ${left}`);
  }
  assert.equal(refreshDelayMs(100, 100_000, Math.random), null);
  assert.equal(refreshDelayMs(100, 200_000, Math.random), null);
});

test("maxHz: `rate` goes first after every HELLO (before the watchlist); at 25 Hz it is never sent", async () => {
  assert.throws(() => setup({ maxHz: 4 }), RangeError);
  const t = setup({ maxHz: 12.5 });
  t.client.view.hold([KEYS[0]]);
  await connected(t);
  const rate = await reply(t);
  assert.deepEqual(rate, { type: "rate", req: rate.req, max_hz: 12.5 });
  assert.equal((await reply(t)).type, "subscribe");
  t.sock().serverClose(1006);
  await settle();
  await t.timers.advance(t.timers.nextDelay());
  t.sock().deliver(helloBytes());
  await settle();
  assert.equal((await reply(t)).type, "rate", "asked again on the next connection");
  await reply(t);
  // changed at run time: sent now, and kept for later connections
  const change = t.client.setMaxHz(5);
  await settle();
  assert.deepEqual((await reply(t)).max_hz, 5);
  await change;
  assert.equal(t.client.maxHz, 5);
  await assert.rejects(t.client.setMaxHz(3));
  const plain = setup();
  plain.client.view.hold([KEYS[0]]);
  await connected(plain);
  assert.deepEqual(requests(plain.sock()).map((r) => r.type), ["subscribe"]);
});

test("maxHz against an old node (INVALID_REQUEST): noted, and the watchlist is restored all the same", async () => {
  const t = setup({ maxHz: 5 });
  t.client.view.hold([KEYS[0]]);
  await connected(t);
  await reply(t, ErrorCode.INVALID_REQUEST);
  const sub = await reply(t);
  assert.equal(sub.type, "subscribe");
  assert.equal(t.client.state, "connected");
  assert.ok(t.client.stats.log.some((l) => l.includes("rate 5 Hz refused")));
});

test("refreshToken: at a jittered 60-85% of the remaining lifetime, sent as `refresh`, then again on the new token", async () => {
  const t = setup({ random: () => 0.5 });
  const exp0 = wallSec(t) + 900; // a 15-minute token
  const issued = [];
  t.client.tokenProvider = () => fakeJwt(exp0);
  t.client.refreshToken = async () => {
    const tok = fakeJwt(wallSec(t) + 900);
    issued.push(tok);
    return tok;
  };
  await connected(t);
  const due = 900_000 * (0.6 + 0.5 * 0.25); // 652.5 s with random() = 0.5
  assert.equal(refreshIn(t), due);
  await t.timers.advance(due - 1);
  assert.equal(issued.length, 0);
  await t.timers.advance(1);
  const r = await reply(t);
  assert.deepEqual(r, { type: "refresh", req: r.req, token: issued[0] });
  assert.equal(t.client.stats.tokenRefreshes, 1);
  // the next one is counted from the new token's exp
  for (let n = 2; n <= 3; n++) {
    await t.timers.advance(due);
    assert.equal((await reply(t)).token, issued[n - 1]);
  }
  assert.equal(t.client.stats.tokenRefreshes, 3);
  assert.equal(t.WS.sockets.length, 1, "never a reconnect");
});

test("refreshToken: TOKEN_REJECTED is tried once more after 10 s, then the token is let expire", async () => {
  const t = setup();
  t.client.tokenProvider = () => fakeJwt(wallSec(t) + 100);
  let calls = 0;
  t.client.refreshToken = () => `fresh${++calls}`;
  await connected(t);
  await t.timers.advance(refreshIn(t));
  await reply(t, ErrorCode.TOKEN_REJECTED);
  assert.equal(t.client.stats.tokenRefreshFailures, 1);
  await t.timers.advance(9_999);
  assert.equal(calls, 1);
  await t.timers.advance(1);
  assert.equal(calls, 2);
  await reply(t, ErrorCode.TOKEN_REJECTED);
  assert.equal(t.client.stats.tokenRefreshFailures, 2);
  await t.timers.advance(3_600_000);
  assert.equal(calls, 2, "no third try");
  assert.equal(t.client.tokenRefresh.timer, null);
});

test("refreshToken: a callback that throws is retried once; a connection that ends stops it", async () => {
  const t = setup();
  t.client.tokenProvider = () => fakeJwt(wallSec(t) + 100);
  let calls = 0;
  t.client.refreshToken = async () => {
    calls += 1;
    if (calls === 1) throw new Error("SSO down");
    return "fresh";
  };
  await connected(t);
  await t.timers.advance(refreshIn(t));
  assert.equal(t.client.stats.tokenRefreshFailures, 1);
  await t.timers.advance(10_000);
  assert.equal((await reply(t)).token, "fresh");
  t.sock().serverClose(1006);
  await settle();
  assert.equal(t.client.tokenRefresh, null);
  const before = calls;
  await t.timers.advance(60_000); // reconnect attempts, no hello: nothing refreshes
  assert.equal(calls, before);
});

test("glass report: every 10 s only when a count changed, cumulative since the connection opened, with the last regression", async () => {
  const t = setup();
  t.client.view.hold([KEYS[0], KEYS[1]]);
  await connected(t);
  assert.equal((await reply(t)).type, "subscribe");
  t.sock().deliver(snapshot(1, [full(tick(0, 5)), full(tick(1, 5))]));
  await t.timers.advance(10_000);
  assert.equal(requests(t.sock()).length, 1, "nothing changed: no report");
  t.sock().deliver(frame(2, [delta(tick(1, 3), tick(1, 6))])); // a gap
  await t.timers.advance(10_000);
  const r1 = await reply(t);
  assert.deepEqual(r1, { type: "report", req: r1.req, regressions: 0, gaps: 1 });
  // a regression on the chain: a delta whose new version is below the held one
  t.sock().deliver(snapshot(3, [full(tick(0, 9))]));
  t.sock().deliver(frame(4, [delta(tick(0, 2), tick(0, 4))]));
  assert.equal(t.client.view.stats.regressions, 1);
  await t.timers.advance(10_000);
  const r2 = await reply(t);
  assert.deepEqual(r2, { type: "report", req: r2.req, regressions: 1, gaps: 1, last: [KEYS[0], 1, 9, 1, 4] });
  await t.timers.advance(30_000);
  assert.equal(requests(t.sock()).filter((r) => r.type === "report").length, 2, "unchanged since: silent");
  assert.equal(t.client.stats.reports, 2);
  // a new connection counts from its own start
  t.sock().serverClose(1006);
  await settle();
  assert.equal(requests(t.sock()).filter((r) => r.type === "report").length, 2, "nothing on close");
  await t.timers.advance(t.timers.nextDelay());
  t.sock().deliver(helloBytes());
  await settle();
  await reply(t); // the resubscribe
  t.sock().deliver(frame(9, [delta(tick(1, 7), tick(1, 8))]));
  await t.timers.advance(10_000);
  const r3 = await reply(t);
  assert.deepEqual([r3.regressions, r3.gaps], [0, 1]);
});

test("glass report: one the node refuses (RATE_LIMITED) is sent again at the next tick", async () => {
  const t = setup();
  t.client.view.hold([KEYS[0]]);
  await connected(t);
  await reply(t);
  t.sock().deliver(frame(2, [delta(tick(0, 3), tick(0, 6))]));
  await t.timers.advance(10_000);
  await reply(t, ErrorCode.RATE_LIMITED);
  await t.timers.advance(10_000);
  const again = await reply(t);
  assert.deepEqual([again.type, again.gaps], ["report", 1]);
  assert.equal(t.client.stats.reports, 1);
});
