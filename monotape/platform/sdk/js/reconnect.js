// The reconnect policy, pure: how long a terminal waits before its next attempt (docs/sdk.md,
// "How long it waits", the Python SDK's `next_delay`). The wait is the longest of
//
// - the server's hint: CLOSE's reconnect_after_ms (or the close reason's "reconnect_after_ms=N"),
//   which a drain staggers so its terminals come back spread out;
// - Retry-After, where the terminal can read it (Node, an HTTP pre-check; a browser cannot read
//   the status of a refused upgrade: docs/terminal.md);
// - full jitter: uniform(0, min(cap, base * 2^attempt)), so thousands of terminals refused
//   together never retry in step (the open, a data release).
//
// The server's word is a floor even above the cap (it knows its load); hints past MAX_HINT_MS
// are clamped. An unauthorized refusal waits uniform(cap / 2, cap): retrying soon cannot help,
// and the jitter keeps tokens minted together from coming back together.

export const BACKOFF_BASE_MS = 250;
export const BACKOFF_CAP_MS = 15_000;
export const MAX_HINT_MS = 600_000;
const MAX_EXP = 62; // 2^attempt past this is past any cap

/**
 * Milliseconds to wait before connection attempt `attempt + 1`.
 * @param {{attempt: number, hintMs?: number | null, retryAfterMs?: number | null,
 *   unauthorized?: boolean, baseMs?: number, capMs?: number, random?: () => number}} p
 *   random: uniform in [0, 1) (default Math.random); inject it to test.
 * @returns {number}
 */
export function nextDelay(p) {
  const attempt = Math.min(Math.max(0, Math.floor(p.attempt) || 0), MAX_EXP);
  const base = Math.max(0, p.baseMs ?? BACKOFF_BASE_MS);
  const cap = Math.max(0, p.capMs ?? BACKOFF_CAP_MS);
  const random = p.random ?? Math.random;
  let floor = 0;
  if (p.hintMs != null && p.hintMs > 0) floor = Math.min(p.hintMs, MAX_HINT_MS);
  if (p.retryAfterMs != null && p.retryAfterMs > 0) floor = Math.max(floor, Math.min(p.retryAfterMs, MAX_HINT_MS));
  const u = Math.min(Math.max(random(), 0), 1);
  const backoff = p.unauthorized ? cap / 2 + u * (cap / 2) : u * Math.min(cap, base * 2 ** attempt);
  return Math.max(floor, backoff);
}

/**
 * Retry-After (RFC 9110 §10.2.3) in ms: delay-seconds or an HTTP-date; null if absent or bad.
 * @param {string | null | undefined} value
 * @param {number} [nowMs] wall-clock ms for an HTTP-date (default Date.now())
 */
export function parseRetryAfter(value, nowMs = Date.now()) {
  if (value == null) return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  // an HTTP-date names its weekday and GMT; Date.parse alone would take "1" or "2026"
  if (!/^[A-Za-z]{3},? .*GMT$/.test(v)) return null;
  const when = Date.parse(v);
  return Number.isNaN(when) ? null : Math.max(0, when - nowMs);
}

/** The `reconnect_after_ms=N` the server puts in its WebSocket close reason; null if none. */
export function hintFromReason(reason) {
  const m = /reconnect_after_ms=(\d+)/.exec(reason ?? "");
  return m ? Number(m[1]) : null;
}

/**
 * The policy with its state: consecutive attempts, reset by a connection that stayed up.
 * `attempt` counts waits since the last stable connection, so a terminal drained after an hour
 * comes back after its hint, while one refused again and again spreads out up to the cap.
 */
export class ReconnectPolicy {
  /**
   * @param {{baseMs?: number, capMs?: number, stableAfterMs?: number, random?: () => number}} [o]
   */
  constructor(o = {}) {
    this.baseMs = o.baseMs ?? BACKOFF_BASE_MS;
    this.capMs = o.capMs ?? BACKOFF_CAP_MS;
    this.stableAfterMs = o.stableAfterMs ?? 1000;
    this.random = o.random ?? Math.random;
    this.attempt = 0;
    /** @type {{attempt: number, delayMs: number, why: string}[]} the last waits, newest last */
    this.history = [];
  }

  /** A connection that got its hello ended after `uptimeMs`: a stable one resets the backoff. */
  connectionEnded(uptimeMs) {
    if (uptimeMs >= this.stableAfterMs) this.attempt = 0;
  }

  /**
   * The wait before the next attempt, and one more attempt counted.
   * @param {{hintMs?: number | null, retryAfterMs?: number | null, unauthorized?: boolean, why?: string}} [seen]
   */
  next(seen = {}) {
    const delayMs = nextDelay({ ...seen, attempt: this.attempt, baseMs: this.baseMs, capMs: this.capMs, random: this.random });
    this.history.push({ attempt: this.attempt, delayMs, why: seen.why ?? "error" });
    if (this.history.length > 100) this.history.shift();
    this.attempt += 1;
    return delayMs;
  }
}
