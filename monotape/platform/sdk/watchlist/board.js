// The watchlist page's decisions, pure (tests/js/board.test.mjs): which symbols a search finds,
// what the connection badge says, frames per second. page.js only moves them onto the DOM.

/**
 * Keys of the HELLO dictionary matching `query`, best first: a glob when it holds `*` (XNAS:*,
 * *USD), else a case-insensitive substring, exact and symbol-prefix matches first.
 * @param {readonly string[]} keys @param {string} query @param {number} limit
 * @returns {string[]}
 */
export function searchKeys(keys, query, limit) {
  const q = query.trim().toUpperCase();
  if (!q) return keys.slice(0, limit);
  if (q.includes("*")) {
    const re = new RegExp(`^${q.split("*").map((s) => s.replace(/[.+?^${}()|[\]\\/]/g, "\\$&")).join(".*")}$`);
    return keys.filter((k) => re.test(k.toUpperCase())).slice(0, limit);
  }
  const rank = (k) => {
    const u = k.toUpperCase();
    const symbol = u.slice(u.indexOf(":") + 1);
    if (u === q || symbol === q) return 0;
    if (symbol.startsWith(q) || u.startsWith(q)) return 1;
    return u.includes(q) ? 2 : -1;
  };
  const hits = [];
  for (const k of keys) {
    const r = rank(k);
    if (r >= 0) hits.push([r, k]);
  }
  hits.sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  return hits.slice(0, limit).map(([, k]) => k);
}

/** A connected terminal with no message (frame or heartbeat: one a second) this long is stale. */
export const STALE_AFTER_MS = 3000;

/**
 * What the connection badge says: `tone` is its colour (live, wait, stale, off).
 * @param {{state: string, now: number, lastMessageAt: number | null, nextAttemptAt: number | null,
 *   staleAfterMs?: number}} s now, lastMessageAt and nextAttemptAt on one clock (ms)
 * @returns {{text: string, tone: "live" | "wait" | "stale" | "off"}}
 */
export function badge(s) {
  switch (s.state) {
    case "connected": {
      const quiet = s.lastMessageAt === null ? Infinity : s.now - s.lastMessageAt;
      if (quiet > (s.staleAfterMs ?? STALE_AFTER_MS)) return { text: `stale ${Math.floor(quiet / 1000)} s`, tone: "stale" };
      return { text: "live", tone: "live" };
    }
    case "backoff": {
      const left = s.nextAttemptAt === null ? 0 : Math.max(0, Math.ceil((s.nextAttemptAt - s.now) / 1000));
      return { text: `reconnecting in ${left} s`, tone: "wait" };
    }
    case "connecting":
      return { text: "connecting", tone: "wait" };
    case "closed":
      return { text: "closed", tone: "off" };
    default:
      return { text: "signed out", tone: "off" };
  }
}

/** Frames per second over a sliding window of samples of a cumulative count. */
export class RateMeter {
  constructor(windowMs = 2000) {
    this.windowMs = windowMs;
    /** @type {[number, number][]} (at, count) */
    this.samples = [];
  }

  /** Record `count` at `now`; returns the rate over the window (per second). */
  sample(count, now) {
    this.samples.push([now, count]);
    while (this.samples.length > 2 && now - this.samples[1][0] >= this.windowMs) this.samples.shift();
    const [t0, c0] = this.samples[0];
    return now > t0 ? ((count - c0) * 1000) / (now - t0) : 0;
  }
}

/**
 * What a stale line says (docs/sdk.md, Stale prices): since when, on the local clock, and for
 * how long. `sinceMs` and `nowMs` are wall-clock ms (Date.now).
 * @param {number} sinceMs @param {number} nowMs
 */
export function staleLabel(sinceMs, nowMs) {
  const at = new Date(sinceMs);
  const hhmmss = [at.getHours(), at.getMinutes(), at.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
  const s = Math.max(0, Math.floor((nowMs - sinceMs) / 1000));
  return `stale since ${hhmmss} (${s < 60 ? `${s} s` : `${Math.floor(s / 60)} min`})`;
}

/** "epoch:seq" of a version, as the admin API and `monotape tape` print it. */
export const versionText = (epoch, seq) => `${epoch}:${seq}`;
