// The screen state and its admit guard, fed decoded messages with no socket: regressions are
// dropped and counted, a delta on the wrong base is a gap (never applied, resynced), snapshots
// re-anchor the chain, the glass never goes backwards across reconnects.

import test from "node:test";
import assert from "node:assert/strict";

import { TerminalView, formatPrice, RESYNC_RETRY_MS, MIN_RESYNC_INTERVAL_MS } from "../../monotape/platform/sdk/js/view.js";
import { rng } from "./support/rng.mjs";
import { KEYS, FakeClock, decode, delta, frame, full, helloBytes, priority, snapshot, tick } from "./support/wire.mjs";

function view(keys = KEYS) {
  const clock = new FakeClock();
  const v = new TerminalView({ clock: clock.read });
  v.receive(decode(helloBytes(keys)));
  v.hold(keys);
  return { v, clock };
}

const feed = (v, bytes) => v.receive(decode(bytes));
const shownSeq = (v, key) => v.quotes.get(key)?.seq;

test("a snapshot anchors the chain and deltas on it apply (int64 wrap included)", () => {
  const { v } = view();
  feed(v, snapshot(1, [full(tick(0, 5, 100))]));
  const shown = feed(v, frame(2, [delta(tick(0, 5, 100), tick(0, 6, 103))]));
  assert.equal(shown.length, 1);
  assert.deepEqual([shown[0].seq, shown[0].bid, shown[0].ask, shown[0].direction], [6n, 103n, 104n, 1]);
  // a price that wraps int64 is carried exactly, as docs/wire.md specifies
  const max = (1n << 63n) - 1n;
  feed(v, frame(3, [delta(tick(0, 6, 103), { ...tick(0, 7, 0), bid: max, ask: -max - 1n })]));
  assert.equal(v.quotes.get(KEYS[0]).bid, max);
  assert.equal(v.quotes.get(KEYS[0]).ask, -max - 1n);
  assert.equal(v.stats.regressions + v.stats.gaps, 0);
});

test("a delta on a base the terminal does not hold is a gap: counted, not applied, resynced", () => {
  const { v, clock } = view();
  feed(v, snapshot(1, KEYS.map((_, i) => full(tick(i, 5)))));
  // 50 deltas on seq 4, not the held 5
  feed(v, frame(2, KEYS.slice(0, 50).map((_, i) => delta(tick(i, 4), tick(i, 6, 200)))));
  assert.equal(v.stats.gaps, 50);
  assert.equal(v.stats.regressions, 0);
  assert.equal(shownSeq(v, KEYS[0]), 5n); // never applied
  assert.deepEqual(v.takeResyncs(), KEYS.slice(0, 50)); // one request for all of them
  assert.deepEqual(v.takeResyncs(), []); // asked: not again at once
  // more deltas for a gapped symbol are not counted again, and never applied
  feed(v, frame(3, [delta(tick(0, 6, 200), tick(0, 7, 300))]));
  assert.equal(v.stats.gaps, 50);
  assert.equal(shownSeq(v, KEYS[0]), 5n);
  // ten snapshots arrive; the others' request was lost: asked again after the retry time
  feed(v, snapshot(4, KEYS.slice(0, 10).map((_, i) => full(tick(i, 7)))));
  assert.equal(shownSeq(v, KEYS[0]), 7n);
  clock.now += RESYNC_RETRY_MS;
  assert.deepEqual(v.takeResyncs(), KEYS.slice(10, 50));
  // and the chain works again from the snapshot
  feed(v, frame(5, [delta(tick(0, 7), tick(0, 8))]));
  assert.equal(shownSeq(v, KEYS[0]), 8n);
});

test("resync requests are spaced: a gap every frame does not send a request every frame", () => {
  const { v, clock } = view();
  feed(v, snapshot(1, KEYS.map((_, i) => full(tick(i, 5)))));
  feed(v, frame(2, [delta(tick(0, 4), tick(0, 6))]));
  assert.deepEqual(v.takeResyncs(), [KEYS[0]]);
  clock.now += 40;
  feed(v, frame(3, [delta(tick(1, 4), tick(1, 6))]));
  assert.deepEqual(v.takeResyncs(), []); // within MIN_RESYNC_INTERVAL_MS of the last request
  clock.now += MIN_RESYNC_INTERVAL_MS;
  assert.deepEqual(v.takeResyncs(), [KEYS[1]]);
});

test("a full record below its chain is a regression: dropped and counted, with its detail", () => {
  const { v, clock } = view();
  feed(v, snapshot(1, [full(tick(0, 9, 150))]));
  clock.now = 5000;
  const shown = feed(v, frame(2, [full(tick(0, 8, 140))]));
  assert.deepEqual(shown, []);
  assert.equal(v.stats.regressions, 1);
  assert.equal(v.quotes.get(KEYS[0]).bid, 150n);
  assert.deepEqual(v.stats.lastRegression, { key: KEYS[0], held: [1n, 9n], got: [1n, 8n], source: "frame", at: 5000 });
  // the same version again on the frame stream: dropped, but not a regression
  feed(v, frame(3, [full(tick(0, 9, 150))]));
  assert.equal(v.stats.regressions, 1);
  // a delta whose new version is at or below the chain, on a base not held: a regression, no gap
  feed(v, frame(4, [delta(tick(0, 3), tick(0, 7))]));
  assert.equal(v.stats.regressions, 2);
  assert.equal(v.stats.gaps, 0);
});

test("priority updates: shown at once, outside the chain; the frame that carries them is a duplicate", () => {
  const { v } = view();
  feed(v, snapshot(1, [full(tick(0, 5))]));
  const shown = feed(v, priority(tick(0, 7, 120)));
  assert.equal(shown[0].source, "priority");
  assert.equal(shownSeq(v, KEYS[0]), 7n);
  // the conflated stream still chains from 5: its delta to 7 finds its base, and is a duplicate
  feed(v, frame(2, [delta(tick(0, 5), tick(0, 7, 120))]));
  assert.equal(v.stats.duplicates, 1);
  feed(v, frame(3, [delta(tick(0, 7, 120), tick(0, 8, 121))]));
  assert.equal(shownSeq(v, KEYS[0]), 8n);
  assert.equal(v.stats.gaps + v.stats.regressions, 0);
  // a priority update at or below the previous one is a regression (never shown)
  feed(v, priority(tick(0, 6)));
  assert.equal(v.stats.regressions, 1);
  assert.equal(shownSeq(v, KEYS[0]), 8n);
  assert.equal(v.stats.lastRegression.source, "priority");
});

test("a reconnect resets the chain and keeps the glass: an older snapshot is never shown", () => {
  const { v } = view();
  feed(v, snapshot(1, [full(tick(0, 9, 150))]));
  feed(v, helloBytes()); // a new connection
  assert.equal(v.chain.size, 0);
  const shown = feed(v, snapshot(1, [full(tick(0, 8, 140))])); // a lagging node
  assert.deepEqual(shown, []);
  assert.equal(v.stats.stale, 1);
  assert.equal(v.stats.regressions, 0); // the new chain starts there: not a regression
  assert.equal(v.quotes.get(KEYS[0]).bid, 150n);
  feed(v, frame(2, [delta(tick(0, 8, 140), tick(0, 10, 160))])); // chains from the new snapshot
  assert.equal(v.quotes.get(KEYS[0]).bid, 160n);
});

test("a node numbering symbols differently: the glass is carried over by key", () => {
  const { v } = view();
  feed(v, snapshot(1, [full(tick(0, 9, 150))]));
  v.receive(decode(helloBytes(KEYS, { iidOf: (i) => 100 + i })));
  feed(v, snapshot(1, [full(tick(100, 8, 140))]));
  assert.equal(v.stats.stale, 1);
  assert.equal(v.quotes.get(KEYS[0]).bid, 150n);
  feed(v, snapshot(2, [full(tick(100, 10, 170))]));
  assert.equal(v.quotes.get(KEYS[0]).bid, 170n);
});

test("released symbols: frames in flight are not shown and never resynced; re-holding puts the line back", () => {
  const { v } = view();
  feed(v, snapshot(1, [full(tick(0, 5))]));
  v.release([KEYS[0]]);
  assert.ok(!v.quotes.has(KEYS[0]));
  feed(v, frame(2, [delta(tick(0, 4), tick(0, 6))]));
  assert.ok(!v.quotes.has(KEYS[0]));
  assert.deepEqual(v.takeResyncs(), []);
  v.hold([KEYS[0]]);
  feed(v, snapshot(3, [full(tick(0, 6))])); // the node's snapshot: what the screen last showed
  assert.equal(shownSeq(v, KEYS[0]), 6n);
});

test("change events: listeners, per-symbol watchers and a changed set for paint batching", () => {
  const { v } = view();
  const all = [];
  const one = [];
  const stop = v.onQuote((q) => all.push(q.key));
  v.watch(KEYS[1], (q) => one.push(q.seq));
  feed(v, snapshot(1, [full(tick(0, 5)), full(tick(1, 5))]));
  feed(v, frame(2, [delta(tick(1, 5), tick(1, 6, 99))]));
  assert.deepEqual(all, [KEYS[0], KEYS[1], KEYS[1]]);
  assert.deepEqual(one, [5n, 6n]);
  assert.deepEqual([...v.takeChanged()], [KEYS[0], KEYS[1]]);
  assert.equal(v.takeChanged().size, 0);
  assert.equal(v.quotes.get(KEYS[1]).direction, -1);
  stop();
  feed(v, frame(3, [delta(tick(1, 6, 99), tick(1, 7, 99))]));
  assert.equal(all.length, 3);
});

test("formatPrice is exact for any int64", () => {
  assert.equal(formatPrice(10001n, 2), "100.01");
  assert.equal(formatPrice(-5n, 2), "-0.05");
  assert.equal(formatPrice(7n, 0), "7");
  assert.equal(formatPrice(-(1n << 63n), 18), "-9.223372036854775808");
});

test("property: whatever arrives, in any order, the versions shown per symbol strictly increase", () => {
  for (let seed = 1; seed <= 300; seed++) {
    const r = rng(seed);
    const pick = (n) => Math.floor(r() * n);
    const keys = KEYS.slice(0, 3);
    const { v } = view(keys);
    const last = new Map();
    v.onQuote((q) => {
      const prev = last.get(q.key);
      if (prev) {
        const up = q.epoch > prev[0] || (q.epoch === prev[0] && q.seq > prev[1]);
        assert.ok(up, `seed ${seed}: ${q.key} went from ${prev} to ${q.epoch},${q.seq}`);
      }
      last.set(q.key, [q.epoch, q.seq]);
    });
    for (let step = 0; step < 60; step++) {
      const iid = pick(3);
      const t = tick(iid, pick(12), 100 + pick(5), 1 + pick(2));
      const base = tick(iid, pick(12), 100 + pick(5), 1 + pick(2));
      const okDelta = base.epoch < t.epoch || (base.epoch === t.epoch && base.seq <= t.seq);
      switch (pick(5)) {
        case 0: feed(v, snapshot(step, [full(t)])); break;
        case 1: feed(v, frame(step, [full(t)])); break;
        case 2: if (okDelta) feed(v, frame(step, [delta(base, t)])); break;
        case 3: feed(v, priority(t)); break;
        default: feed(v, helloBytes(keys)); // a reconnect
      }
    }
  }
});
