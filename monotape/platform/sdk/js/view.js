// The terminal's screen state and its admit guard, Sans-I/O: decoded messages in, quotes and due
// resyncs out, an injected clock (the Python SDK's view is the model; docs/wire.md, "The
// delta/base rule" and "Two streams"). Two versions are held per symbol:
//
// - the chain: the last conflated record's version and prices, the base the next FRAME delta
//   must name. A delta naming another base is a gap: never applied, the symbol is re-subscribed
//   for a snapshot (`takeResyncs`) and nothing of it is applied until a full record comes. The
//   chain starts afresh with each connection (a new connection's frames chain from its own
//   snapshots).
// - the glass: the version on screen. Any record (snapshot, frame, priority) above it is shown;
//   one at or below it is dropped and counted (`duplicates`: the same version again, as when a
//   priority update is followed by the frame that carries it; `stale`: older). The glass is kept
//   across reconnects, so a lagging node's snapshot never takes a price back.
//
// `regressions` counts records a naive client would have shown backwards: a conflated record
// below its own chain, or a priority update at or below the previous one. It must stay 0: one is
// an incident the server cannot see (the glass audit reports it).

/** @typedef {import("./decoder.js").ServerMessage} ServerMessage */
/** @typedef {import("./decoder.js").Hello} Hello */
/** @typedef {import("./decoder.js").Instrument} Instrument */
/** @typedef {import("./records.js").WireRecord} WireRecord */

import { applyRecord } from "./records.js";
import { Staleness } from "./staleness.js";

/** Where a shown quote came from. @readonly @enum {string} */
export const Source = Object.freeze({ SNAPSHOT: "snapshot", FRAME: "frame", PRIORITY: "priority" });

/** The guard's verdict on an incoming version. @readonly @enum {number} */
export const Verdict = Object.freeze({ APPLIED: 0, DUPLICATE: 1, REGRESSION: 2 });

export const RESYNC_RETRY_MS = 2000; // a gapped symbol's snapshot not here by then is asked again
// At most one resync request per this many ms: a burst of gaps over a few frames must not trip
// the node's request rate limit (20/s), which closes the connection (1008).
export const MIN_RESYNC_INTERVAL_MS = 100;

/** -1 if (e1, s1) is below (e2, s2), 0 if equal, 1 if above (lexicographic). */
export function compareVersions(e1, s1, e2, s2) {
  if (e1 !== e2) return e1 < e2 ? -1 : 1;
  if (s1 !== s2) return s1 < s2 ? -1 : 1;
  return 0;
}

/** Per-iid held versions; `check` applies the admit rule and remembers what it applied. */
export class VersionGuard {
  constructor() {
    /** @type {Map<number, {epoch: bigint, seq: bigint}>} */
    this.versions = new Map();
  }

  /** @param {number} iid @param {bigint} epoch @param {bigint} seq @returns {number} a Verdict */
  check(iid, epoch, seq) {
    const held = this.versions.get(iid);
    const cmp = held === undefined ? 1 : compareVersions(epoch, seq, held.epoch, held.seq);
    if (cmp > 0) {
      this.versions.set(iid, { epoch, seq });
      return Verdict.APPLIED;
    }
    return cmp === 0 ? Verdict.DUPLICATE : Verdict.REGRESSION;
  }

  /** The held version carried over to another dictionary's numbering, by key. */
  remap(oldIds, newIds) {
    const out = new VersionGuard();
    for (const [key, oldIid] of oldIds) {
      const held = this.versions.get(oldIid);
      const newIid = newIds.get(key);
      if (held !== undefined && newIid !== undefined) out.versions.set(newIid, held);
    }
    return out;
  }
}

/**
 * One line of the watchlist. Prices are scaled integers (BigInt): `formatPrice(q.bid, q.decimals)`.
 * @typedef {object} Quote
 * @property {string} key VENUE:SYMBOL
 * @property {number} iid
 * @property {bigint} epoch
 * @property {bigint} seq
 * @property {bigint} bid
 * @property {bigint} ask
 * @property {bigint} last
 * @property {bigint} size
 * @property {string} source one of Source
 * @property {number} decimals the instrument's price_decimals
 * @property {number} direction last against the previous quote's last: 1 up, -1 down, 0 same or first
 * @property {number} at the clock's reading when it was shown (ms)
 */

/** A scaled integer price as a decimal string, exactly (no float rounding). */
export function formatPrice(scaled, decimals) {
  const neg = scaled < 0n;
  const digits = (neg ? -scaled : scaled).toString().padStart(decimals + 1, "0");
  const whole = decimals ? `${digits.slice(0, -decimals)}.${digits.slice(-decimals)}` : digits;
  return neg ? `-${whole}` : whole;
}

export class ViewStats {
  constructor() {
    this.frames = 0;
    this.snapshots = 0;
    this.priority = 0;
    this.heartbeats = 0;
    this.records = 0;
    this.rendered = 0; // records that reached the glass
    this.duplicates = 0; // the version on screen again: dropped
    this.stale = 0; // older than the screen: dropped
    this.gaps = 0; // deltas on a base not held: dropped, the symbol re-subscribed
    this.regressions = 0; // below its own stream: must stay 0
    /** @type {bigint | null} */
    this.lastFrameNo = null;
    /** @type {{key: string, held: [bigint, bigint], got: [bigint, bigint], source: string, at: number} | null} */
    this.lastRegression = null; // the detail the glass audit reports
  }
}

export class TerminalView {
  /**
   * @param {{clock?: () => number, resyncRetryMs?: number, minResyncIntervalMs?: number,
   *   wallClock?: () => number, staleAfterMs?: number}} [options]
   *   clock: monotonic milliseconds (default performance.now); wallClock and staleAfterMs: the
   *   staleness watchdog's (staleness.js)
   */
  constructor(options = {}) {
    this.clock = options.clock ?? (() => performance.now());
    this.resyncRetryMs = options.resyncRetryMs ?? RESYNC_RETRY_MS;
    this.minResyncIntervalMs = options.minResyncIntervalMs ?? MIN_RESYNC_INTERVAL_MS;
    this.stats = new ViewStats();
    /** @type {Hello | null} */
    this.hello = null;
    /** @type {Map<number, Instrument>} */
    this.instruments = new Map();
    /** @type {Map<string, number>} key -> iid */
    this.ids = new Map();
    /** @type {Map<string, Quote>} what is on the glass, by key */
    this.quotes = new Map();
    /** @type {Set<string>} the watchlist, in subscription order: restored on every reconnect */
    this.held = new Set();
    /** @type {Set<string>} the order-ticket symbols (priority), restored after the watchlist */
    this.priorityKeys = new Set();
    /** @type {Map<number, {epoch: bigint, seq: bigint, bid: bigint, ask: bigint, last: bigint}>} */
    this.chain = new Map();
    this.glass = new VersionGuard();
    this.priorityGuard = new VersionGuard();
    /** @type {Map<number, number | null>} gapped iid -> when its snapshot was asked (null: not yet) */
    this.resyncing = new Map();
    this.lastResyncAt = -Infinity;
    /** @type {Set<string>} keys changed since `takeChanged` */
    this.changed = new Set();
    /** @type {Set<(q: Quote) => void>} */
    this.listeners = new Set();
    /** @type {Map<string, Set<(q: Quote) => void>>} */
    this.watchers = new Map();
    /** which symbols are stale, and since when (staleness.js) */
    this.staleness = new Staleness({ clock: this.clock, wallClock: options.wallClock, staleAfterMs: options.staleAfterMs });
  }

  /** Whether `key`'s price on screen is stale now (watchdog, stalled grid, venue down). */
  stale(key) {
    return this.staleness.isStale(key);
  }

  /** Since when `key` is stale (wall ms), or null while it is live. */
  staleSince(key) {
    return this.staleness.sinceMs(key);
  }

  // -- the watchlist ---------------------------------------------------------------------------

  /** Hold `keys` (before subscribing: their snapshot records are shown only if held). */
  hold(keys) {
    for (const k of keys) this.held.add(k);
  }

  /** Drop `keys` from the watchlist and the glass (unsubscribed, or refused by the node). */
  release(keys) {
    for (const k of keys) {
      this.held.delete(k);
      this.priorityKeys.delete(k);
      if (this.quotes.delete(k)) this.changed.add(k);
      const iid = this.ids.get(k);
      if (iid !== undefined) {
        this.chain.delete(iid); // frames in flight must not gap-resync an unsubscribed symbol
        this.resyncing.delete(iid);
      }
    }
  }

  /** Mark (`on`) or unmark order-ticket symbols. */
  markPriority(keys, on = true) {
    for (const k of keys) on ? this.priorityKeys.add(k) : this.priorityKeys.delete(k);
  }

  // -- listening -------------------------------------------------------------------------------

  /** Call `fn(quote)` for every quote shown; returns the function that stops it. */
  onQuote(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Call `fn(quote)` for every quote of `key` shown; returns the function that stops it. */
  watch(key, fn) {
    let set = this.watchers.get(key);
    if (set === undefined) this.watchers.set(key, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0) this.watchers.delete(key);
    };
  }

  /** The keys whose line changed since the last call: paint these once per animation frame. */
  takeChanged() {
    const out = this.changed;
    this.changed = new Set();
    return out;
  }

  // -- messages in -----------------------------------------------------------------------------

  /**
   * Apply one decoded server message; returns the quotes it put on the glass.
   * @param {ServerMessage} msg
   * @returns {Quote[]}
   */
  receive(msg) {
    const shown = [];
    if (this.staleness.onMessage(msg)) for (const k of this.held) this.changed.add(k); // repaint
    switch (msg.kind) {
      case "frame":
        this.stats.frames += 1;
        this.stats.lastFrameNo = msg.frame_no;
        for (const rec of msg.records) this.onChainRecord(rec, Source.FRAME, shown);
        break;
      case "snapshot":
        this.stats.snapshots += 1;
        for (const rec of msg.records) {
          this.resyncing.delete(rec.iid);
          this.onChainRecord(rec, Source.SNAPSHOT, shown);
        }
        break;
      case "priority": {
        this.stats.priority += 1;
        const rec = msg.record;
        const verdict = this.priorityGuard.check(rec.iid, rec.epoch, rec.seq);
        if (verdict !== Verdict.APPLIED) this.regression(rec, this.priorityGuard, Source.PRIORITY);
        this.show(rec.iid, rec, rec, Source.PRIORITY, shown);
        break;
      }
      case "heartbeat":
        this.stats.heartbeats += 1;
        break;
      case "hello":
        this.onHello(msg);
        break;
      default:
        break; // ack, refused, error, close, unknown: the driver's business
    }
    return shown;
  }

  /** A new connection's dictionary: its frames chain afresh; the glass is carried over by key. */
  onHello(hello) {
    const oldIds = this.ids;
    this.hello = hello;
    this.instruments = new Map(hello.instruments.map((i) => [i.iid, i]));
    this.ids = new Map(hello.instruments.map((i) => [i.key, i.iid]));
    if (oldIds.size && !sameIds(oldIds, this.ids)) {
      // another node may number symbols differently: the guard must still hold
      this.glass = this.glass.remap(oldIds, this.ids);
      this.priorityGuard = this.priorityGuard.remap(oldIds, this.ids);
    }
    this.chain.clear();
    this.resyncing.clear();
  }

  /** @param {WireRecord} rec @param {string} source @param {Quote[]} shown */
  onChainRecord(rec, source, shown) {
    this.stats.records += 1;
    const iid = rec.iid;
    const held = this.chain.get(iid);
    if (rec.has_base && (held === undefined || held.epoch !== rec.base_epoch || held.seq !== rec.base_seq)) {
      if (held !== undefined && compareVersions(rec.epoch, rec.seq, held.epoch, held.seq) <= 0) {
        this.regression(rec, this.chain, source); // stale data on the chain: a server bug
      } else if (!this.resyncing.has(iid)) {
        this.stats.gaps += 1;
        this.resyncing.set(iid, null);
        this.chain.delete(iid);
      }
      return;
    }
    // int64 wrap-around arithmetic, as docs/wire.md specifies for every client
    const prices = applyRecord(held ?? null, rec);
    const cmp = held === undefined ? 1 : compareVersions(rec.epoch, rec.seq, held.epoch, held.seq);
    if (cmp < 0) this.regression(rec, this.chain, source);
    if (cmp <= 0 && source === Source.FRAME) return;
    this.chain.set(iid, { epoch: rec.epoch, seq: rec.seq, ...prices });
    this.show(iid, rec, prices, source, shown);
  }

  regression(rec, heldIn, source) {
    this.stats.regressions += 1;
    const held = heldIn instanceof VersionGuard ? heldIn.versions.get(rec.iid) : heldIn.get(rec.iid);
    this.stats.lastRegression = {
      key: this.instruments.get(rec.iid)?.key ?? String(rec.iid),
      held: held ? [held.epoch, held.seq] : [0n, 0n],
      got: [rec.epoch, rec.seq],
      source,
      at: this.clock(),
    };
  }

  /** Through the glass guard onto the screen. @param {Quote[]} shown */
  show(iid, rec, prices, source, shown) {
    const verdict = this.glass.check(iid, rec.epoch, rec.seq);
    const inst = this.instruments.get(iid);
    const key = inst?.key ?? String(iid);
    if (verdict !== Verdict.APPLIED) {
      if (verdict === Verdict.DUPLICATE) {
        this.stats.duplicates += 1;
        if (this.held.has(key) && !this.quotes.has(key)) {
          // re-subscribed to what the screen last showed: put the line back
          this.put(this.quote(key, iid, rec, prices, source, inst));
        }
      } else {
        this.stats.stale += 1;
      }
      return;
    }
    if (!this.held.has(key)) return; // a frame in flight when the symbol was unsubscribed
    const q = this.quote(key, iid, rec, prices, source, inst);
    this.stats.rendered += 1;
    this.put(q);
    shown.push(q);
  }

  quote(key, iid, rec, prices, source, inst) {
    const prev = this.quotes.get(key);
    const direction = prev === undefined || prev.last === prices.last ? 0 : prices.last > prev.last ? 1 : -1;
    return {
      key,
      iid,
      epoch: rec.epoch,
      seq: rec.seq,
      bid: prices.bid,
      ask: prices.ask,
      last: prices.last,
      size: rec.size,
      source,
      decimals: inst?.price_decimals ?? 0,
      direction,
      at: this.clock(),
    };
  }

  put(q) {
    this.quotes.set(q.key, q);
    this.changed.add(q.key);
    for (const fn of this.listeners) fn(q);
    const set = this.watchers.get(q.key);
    if (set !== undefined) for (const fn of set) fn(q);
  }

  // -- resyncs out -----------------------------------------------------------------------------

  /**
   * The gapped keys to re-subscribe now (each asked again if its snapshot has not come within
   * `resyncRetryMs`): one request for all of them, so a burst of gaps is one request.
   * @returns {string[]}
   */
  takeResyncs() {
    if (this.resyncing.size === 0) return [];
    const now = this.clock();
    if (now - this.lastResyncAt < this.minResyncIntervalMs) return [];
    const keys = [];
    for (const [iid, asked] of this.resyncing) {
      const key = this.instruments.get(iid)?.key;
      if (key === undefined || !this.held.has(key)) {
        this.resyncing.delete(iid); // not on the watchlist: nothing to ask for
        continue;
      }
      if (asked === null || now - asked >= this.resyncRetryMs) {
        this.resyncing.set(iid, now);
        keys.push(key);
      }
    }
    if (keys.length) this.lastResyncAt = now;
    return keys;
  }
}

function sameIds(a, b) {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  return true;
}
