// The client driver over a fake WebSocket and fake timers (no network, no sleeps): requests
// and their answers, the server's in-band word (CLOSE before the hello: the browser's 503/401),
// hints honoured on reconnect, the watchlist restored, malformed messages closed (4002).

import test from "node:test";
import assert from "node:assert/strict";

import { CLOSE_UNAUTHORIZED, KeysRefused, NotConnectedError, ServerError, TerminalClient } from "../../monotape/platform/sdk/js/client.js";
import { ErrorCode } from "../../monotape/platform/sdk/js/decoder.js";
import { msgpackValue } from "./support/vectors.mjs";
import { FakeTimers, fakeWebSocketClass, settle } from "./support/fakes.mjs";
import { KEYS, delta, enc, frame, full, helloBytes, snapshot, tick } from "./support/wire.mjs";

function setup(options = {}) {
  const timers = new FakeTimers();
  const WS = fakeWebSocketClass();
  const states = [];
  const client = new TerminalClient("ws://127.0.0.1:8765/?desk=fx", {
    WebSocket: WS,
    clock: timers.clock,
    timers: timers.api,
    random: () => 0.5,
    onState: (s) => states.push(s),
    ...options,
  });
  const sock = () => WS.sockets.at(-1);
  return { client, timers, WS, sock, states };
}

/** What the client sent on a socket, as plain values. */
const requests = (ws) => ws.sent.map((b) => msgpackValue(b));

async function connected(t) {
  const hello = t.client.connect();
  await settle();
  t.sock().deliver(helloBytes());
  await settle();
  return hello;
}

/** Answer the last request on the socket: REFUSED for `refused` keys, a snapshot, the ACK. */
async function answer(ws, refused = {}, snap = []) {
  const r = requests(ws).at(-1);
  const out = Object.entries(refused).map(([key, code]) => ({ key, code, reason: `no: ${key}` }));
  if (out.length) ws.deliver(enc.encodeRefused(r.req, out));
  if (snap.length) ws.deliver(snapshot(1, snap));
  ws.deliver(enc.encodeAck(r.req, r.keys.length - out.length, 0));
  await settle();
  return r;
}

test("connects with a fresh token in the subprotocol list (never the URL), binary as ArrayBuffer, and resolves with the hello", async () => {
  let n = 0;
  const t = setup({ tokenProvider: async () => `tok${++n}` });
  const hello = await connected(t);
  assert.equal(hello.kind, "hello");
  assert.equal(t.sock().binaryType, "arraybuffer");
  assert.equal(t.sock().url, "ws://127.0.0.1:8765/?desk=fx");
  assert.deepEqual(t.sock().protocols, ["monotape.v2", "bearer.tok1"]);
  assert.equal(t.client.state, "connected");
  assert.deepEqual(t.states, ["connecting", "connected"]);
});

test("subscribe: REFUSED keys are reported and not held; applied keys are shown", async () => {
  const t = setup();
  await connected(t);
  const pending = t.client.subscribe([KEYS[0], "xnas:bad", KEYS[1]]);
  await settle();
  const req = await answer(t.sock(), { "xnas:bad": ErrorCode.MALFORMED_KEY }, [full(tick(0, 5)), full(tick(1, 5))]);
  assert.equal(req.type, "subscribe");
  const a = await pending;
  assert.deepEqual(a.applied, [KEYS[0], KEYS[1]]);
  assert.deepEqual(a.refused.map((r) => r.key), ["xnas:bad"]);
  assert.deepEqual([...t.client.view.held], [KEYS[0], KEYS[1]]);
  assert.equal(t.client.view.quotes.get(KEYS[1]).seq, 5n);
  assert.equal(t.client.stats.refusedKeys, 1);
  // every key refused: KeysRefused, nothing held
  const all = t.client.subscribe(["XNAS:NOPE"]);
  await settle();
  await answer(t.sock(), { "XNAS:NOPE": ErrorCode.UNKNOWN_SYMBOL });
  await assert.rejects(all, KeysRefused);
  assert.ok(!t.client.view.held.has("XNAS:NOPE"));
  // refused whole (ERROR): ServerError, the new keys not held
  const whole = t.client.subscribe([KEYS[2]]);
  await settle();
  t.sock().deliver(enc.encodeError(ErrorCode.RATE_LIMITED, "slow down", requests(t.sock()).at(-1).req));
  await assert.rejects(whole, ServerError);
  assert.ok(!t.client.view.held.has(KEYS[2]));
});

test("a drain: reconnects no sooner than reconnect_after_ms and restores the watchlist and priority", async () => {
  const t = setup();
  await connected(t);
  const sub = t.client.subscribe([KEYS[0], KEYS[1]]);
  await settle();
  await answer(t.sock(), {}, [full(tick(0, 5))]);
  await sub;
  const prio = t.client.setPriority([KEYS[0]]);
  await settle();
  await answer(t.sock());
  await prio;
  await t.timers.advance(5000); // up long enough to count as stable
  const first = t.sock();
  first.deliver(enc.encodeClose(1001, 2500, "drain"));
  first.serverClose(1001, "drain; reconnect_after_ms=2500");
  await settle();
  assert.equal(t.client.state, "backoff");
  assert.equal(t.client.stats.closesWithHint, 1);
  const logged = t.client.stats.closeLog.at(-1);
  assert.deepEqual([logged.code, logged.hintMs, logged.delayMs, logged.why], [1001, 2500, 2500, "close"]);
  await t.timers.advance(2499);
  assert.equal(t.WS.sockets.length, 1, "not before the hint");
  await t.timers.advance(1);
  assert.equal(t.WS.sockets.length, 2);
  t.sock().deliver(helloBytes());
  await settle();
  const resub = await answer(t.sock(), {}, [full(tick(0, 4))]); // a lagging node's snapshot
  assert.deepEqual([resub.type, resub.keys], ["subscribe", [KEYS[0], KEYS[1]]]);
  const reprio = await answer(t.sock());
  assert.deepEqual([reprio.type, reprio.keys, reprio.on], ["priority", [KEYS[0]], true]);
  assert.equal(t.client.state, "connected");
  assert.equal(t.client.stats.reconnects, 1);
  assert.equal(t.client.view.quotes.get(KEYS[0]).seq, 5n, "the glass never goes back");
  assert.equal(t.client.view.stats.stale, 1);
});

test("refused in band before the hello (the browser's 503): the hint is honoured", async () => {
  const t = setup();
  t.client.connect().catch(() => {});
  await settle();
  t.sock().deliver(enc.encodeClose(1013, 4000, "admission: over the upgrade rate"));
  t.sock().serverClose(1013, "admission; reconnect_after_ms=4000");
  await settle();
  assert.equal(t.client.stats.refusedInBand, 1);
  assert.equal(t.client.stats.connectErrors, 0);
  assert.equal(t.timers.nextDelay(), 4000);
  assert.equal(t.client.policy.history.at(-1).why, "refused");
});

test("no token: monotape.v2 alone is offered (so a refusal still comes in band); tokenIn query: ?token= and no subprotocol", async () => {
  const t = setup();
  await connected(t);
  assert.deepEqual(t.sock().protocols, ["monotape.v2"]);
  const q = setup({ tokenIn: "query", tokenProvider: () => "tok" });
  await connected(q);
  assert.equal(q.sock().url, "ws://127.0.0.1:8765/?desk=fx&token=tok");
  assert.deepEqual(q.sock().protocols, []);
});

test("a refused token in band (1008 before the hello, hint 30 s): waits the hint, then asks the tokenProvider again", async () => {
  let n = 0;
  const t = setup({ tokenProvider: () => `tok${++n}` });
  t.client.connect().catch(() => {});
  await settle();
  t.sock().deliver(enc.encodeClose(1008, 30_000, "unauthorized: token expired"));
  t.sock().serverClose(1008, "unauthorized: token expired; reconnect_after_ms=30000");
  await settle();
  assert.equal(t.client.stats.refusedInBand, 1);
  assert.equal(t.client.stats.unauthorized, 1);
  assert.equal(t.client.policy.history.at(-1).why, "unauthorized");
  assert.equal(t.timers.nextDelay(), 30_000);
  await t.timers.advance(29_999);
  assert.equal(t.WS.sockets.length, 1);
  await t.timers.advance(1);
  assert.deepEqual(t.sock().protocols, ["monotape.v2", "bearer.tok2"]);
});

test("refused in band as unauthorized (the browser's 401): waits at least half the cap", async () => {
  const t = setup({ backoffCapMs: 20_000, random: () => 0 });
  t.client.connect().catch(() => {});
  await settle();
  t.sock().deliver(enc.encodeClose(CLOSE_UNAUTHORIZED, 0, "token expired"));
  t.sock().serverClose(CLOSE_UNAUTHORIZED, "token expired");
  await settle();
  assert.equal(t.client.stats.unauthorized, 1);
  assert.equal(t.timers.nextDelay(), 10_000);
});

test("a session closed at its token's expiry (1008 + hint) comes back after the hint with a fresh token", async () => {
  let n = 0;
  const t = setup({ backoffCapMs: 20_000, silenceTimeoutMs: 0, tokenProvider: () => `tok${++n}` });
  await connected(t);
  await t.timers.advance(60_000);
  t.sock().deliver(enc.encodeClose(1008, 1700, "token expired"));
  t.sock().serverClose(1008, "token expired; reconnect_after_ms=1700");
  await settle();
  assert.equal(t.client.stats.unauthorized, 0);
  assert.equal(t.timers.nextDelay(), 1700);
  await t.timers.advance(1700);
  assert.deepEqual(t.sock().protocols, ["monotape.v2", "bearer.tok2"]);
});

test("closed with no word (1006 before the hello): full jitter alone, growing while it repeats", async () => {
  const t = setup({ random: () => 0.999, backoffBaseMs: 100 });
  t.client.connect().catch(() => {});
  const delays = [];
  for (let i = 0; i < 4; i++) {
    await settle();
    t.sock().serverClose(1006);
    await settle();
    const d = t.timers.nextDelay();
    delays.push(Math.round(d));
    await t.timers.advance(d);
  }
  assert.deepEqual(delays, [100, 200, 400, 799]);
  assert.equal(t.client.stats.connectErrors, 4);
});

test("an error event with no close event after it (Node 20, refused socket) still ends the attempt", async () => {
  const t = setup();
  t.client.connect().catch(() => {});
  await settle();
  t.sock().failWithoutClose();
  await t.timers.advance(1999);
  assert.equal(t.client.state, "connecting");
  await t.timers.advance(1);
  assert.equal(t.client.state, "backoff");
  assert.equal(t.client.stats.connectErrors, 1);
  await t.timers.advance(t.timers.nextDelay());
  assert.equal(t.WS.sockets.length, 2, "and tries again");
});

test("a malformed message closes (4002: a page cannot send 1002) and reconnects; so does a protocol it does not speak", async () => {
  const t = setup();
  await connected(t);
  t.sock().deliver(Uint8Array.from([3, 1, 5])); // a FRAME claiming 5 records in no bytes
  await settle();
  assert.equal(t.WS.sockets[0].closedWith.code, 4002);
  assert.equal(t.client.stats.wireErrors, 1);
  assert.equal(t.client.state, "backoff");
  await t.timers.advance(t.timers.nextDelay());
  t.sock().deliver(helloBytes(KEYS, { protocol: 3 }));
  await settle();
  assert.equal(t.sock().closedWith.code, 4002);
});

test("a gap is resynced: one subscribe for every gapped symbol of the frame", async () => {
  const t = setup();
  await connected(t);
  const sub = t.client.subscribe(KEYS.slice(0, 3));
  await settle();
  await answer(t.sock(), {}, [0, 1, 2].map((i) => full(tick(i, 5))));
  await sub;
  t.sock().deliver(frame(2, [0, 1].map((i) => delta(tick(i, 4), tick(i, 6)))));
  const last = requests(t.sock()).at(-1);
  assert.deepEqual([last.type, last.keys], ["subscribe", KEYS.slice(0, 2)]);
  assert.equal(t.client.view.stats.gaps, 2);
});

test("a silent connection is closed and reconnected (a browser may never see a dead TCP peer)", async () => {
  const t = setup({ silenceTimeoutMs: 8000 });
  await connected(t);
  await t.timers.advance(7000);
  t.sock().deliver(enc.encodeHeartbeat(1, 0)); // alive
  await t.timers.advance(7000);
  assert.equal(t.sock().closedWith, null);
  await t.timers.advance(2000);
  assert.equal(t.sock().closedWith.code, 4000);
  assert.equal(t.client.state, "backoff");
});

test("between connections requests fail with NotConnectedError and their intent is restored", async () => {
  const t = setup();
  await connected(t);
  t.sock().serverClose(1006);
  await settle();
  await assert.rejects(t.client.subscribe([KEYS[3]]), NotConnectedError);
  assert.ok(t.client.view.held.has(KEYS[3]));
  await t.timers.advance(t.timers.nextDelay());
  t.sock().deliver(helloBytes());
  await settle();
  const resub = await answer(t.sock());
  assert.deepEqual(resub.keys, [KEYS[3]]);
});

test("a URL that cannot work is refused at construction, not retried forever", () => {
  const WebSocket = fakeWebSocketClass();
  assert.throws(() => new TerminalClient("http://127.0.0.1:8765/", { WebSocket }), TypeError);
  assert.throws(() => new TerminalClient("not a url", { WebSocket }), TypeError);
  assert.throws(() => new TerminalClient("ws://127.0.0.1:8765/", {}), TypeError);
});

test("close(): no reconnect, pending requests fail, state closed", async () => {
  const t = setup();
  await connected(t);
  const pending = t.client.subscribe([KEYS[0]]);
  await settle();
  t.client.close();
  await assert.rejects(pending, NotConnectedError);
  await settle();
  await t.timers.advance(60_000);
  assert.equal(t.WS.sockets.length, 1);
  assert.equal(t.client.state, "closed");
  assert.equal(t.WS.sockets[0].closedWith.code, 1000);
});
