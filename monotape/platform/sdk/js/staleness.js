// Which symbols on a terminal's screen are stale, and since when: a port of the Python SDK's
// sdk/staleness.py, Sans-I/O (decoded messages in, answers per key out; docs/wire.md, STALE).
//
// Three causes, each cleared by its own kind of record:
// - the watchdog: no message at all for `staleAfterMs` (the server heartbeats every second, so
//   silence means the writer, the host or the network is gone). The next message clears it.
// - the grid: a STALE with grid_since_ms (no frame at the writer for two frame intervals). The
//   next FRAME clears it.
// - a venue: a STALE listing it (its feed handlers are all down). A STALE without it clears it;
//   records of that venue do not (a snapshot on subscribe carries the last prices).
// "Since" is wall-clock ms: the server's for the grid and venues, the terminal's own for the
// watchdog (the last message).

/** @typedef {import("./decoder.js").ServerMessage} ServerMessage */

// Two and a half heartbeats (the server's is 1 s): one late heartbeat is not a dead writer.
export const STALE_AFTER_MS = 2500;

export class Staleness {
  /**
   * @param {{clock?: () => number, wallClock?: () => number, staleAfterMs?: number}} [options]
   *   clock: monotonic ms (default performance.now); wallClock: epoch ms (default Date.now)
   */
  constructor(options = {}) {
    this.clock = options.clock ?? (() => performance.now());
    this.wallClock = options.wallClock ?? (() => Date.now());
    this.staleAfterMs = options.staleAfterMs ?? STALE_AFTER_MS;
    this.lastAt = null; // monotonic ms of the last message (null: none yet, nothing shown)
    this.lastWallMs = 0;
    this.gridSinceMs = 0;
    /** @type {Map<string, number>} venue -> since (server wall ms) */
    this.venues = new Map();
  }

  /**
   * Note one message; returns true when the server's verdict changed (repaint every line).
   * @param {ServerMessage} msg
   */
  onMessage(msg) {
    this.heard();
    const before = this.signature();
    if (msg.kind === "frame") this.gridSinceMs = 0;
    else if (msg.kind === "stale") {
      this.gridSinceMs = Number(msg.grid_since_ms);
      this.venues = new Map(msg.venues.map((v) => [v.venue, Number(v.since_ms)]));
    } else if (msg.kind === "hello") {
      // a new connection starts from what its writer says (a STALE follows the HELLO)
      this.gridSinceMs = 0;
      this.venues = new Map();
    }
    return this.signature() !== before;
  }

  /** A message of any kind arrived: the watchdog's only input (the driver calls it for all). */
  heard() {
    this.lastAt = this.clock();
    this.lastWallMs = this.wallClock();
  }

  /** @returns {string} */
  signature() {
    return `${this.gridSinceMs}|${[...this.venues.keys()].sort().join(",")}`;
  }

  /** The watchdog: no message for longer than `staleAfterMs`. */
  get silent() {
    return this.lastAt !== null && this.clock() - this.lastAt > this.staleAfterMs;
  }

  /** When `key`'s price went stale (wall ms), or null while it is live; the earliest cause. */
  sinceMs(key) {
    const times = [];
    if (this.silent) times.push(this.lastWallMs);
    if (this.gridSinceMs) times.push(this.gridSinceMs);
    const colon = key.indexOf(":");
    const since = colon > 0 ? this.venues.get(key.slice(0, colon)) : undefined;
    if (since !== undefined) times.push(since);
    return times.length ? Math.min(...times) : null;
  }

  /** @param {string} key */
  isStale(key) {
    return this.sinceMs(key) !== null;
  }
}
