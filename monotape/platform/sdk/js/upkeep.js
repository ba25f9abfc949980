// What a connection does on its own timers besides reading (issue 15; docs/terminal.md, "Token
// refresh" and "The glass audit"): refresh its token before it expires, and report what the
// guard dropped. Each is one small object per connection, started at the HELLO and stopped when
// the connection ends; time and randomness are injected, requests go through the client's
// `request` (so their answers are matched like any other).

import { NotConnectedError } from "./answers.js";
import { encodeRefresh, encodeReport } from "./requests.js";

/** After a refused refresh (TOKEN_REJECTED) or a failed callback: one more try this much later. */
export const REFRESH_RETRY_MS = 10_000;
/** The refresh point, as a share of the token's remaining lifetime: uniform in [0.60, 0.85). */
export const REFRESH_AT = Object.freeze([0.6, 0.85]);
/** The glass audit's period; the node refuses reports sooner than 5 s apart (RATE_LIMITED). */
export const REPORT_INTERVAL_MS = 10_000;
const MAX_TIMER_MS = 2 ** 31 - 1; // setTimeout's limit (~24.8 days); a longer wait fires at once

/**
 * A JWT's `exp` (seconds since the epoch), read WITHOUT verifying it: the node verifies; the
 * terminal only needs to know when to ask for the next one. null if it is not a JWT with one.
 * @param {string | null | undefined} token
 * @returns {number | null}
 */
export function tokenExpiry(token) {
  const parts = typeof token === "string" ? token.split(".") : [];
  if (parts.length !== 3) return null;
  try {
    const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const text = new TextDecoder().decode(Uint8Array.from(atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4)), (c) => c.charCodeAt(0)));
    const exp = JSON.parse(text)?.exp;
    return typeof exp === "number" && Number.isFinite(exp) ? exp : null;
  } catch {
    return null;
  }
}

/**
 * When to refresh a token expiring at `expSec`: a jittered point between 60% and 85% of what
 * is left of it, so terminals whose tokens were minted together (the open) do not all refresh
 * in the same second. null if it has already expired.
 * @param {number} expSec @param {number} nowMs wall clock @param {() => number} random
 */
export function refreshDelayMs(expSec, nowMs, random) {
  const remaining = expSec * 1000 - nowMs;
  if (!(remaining > 0)) return null;
  const u = Math.min(Math.max(random(), 0), 1);
  return remaining * (REFRESH_AT[0] + u * (REFRESH_AT[1] - REFRESH_AT[0]));
}

/**
 * Keeps one connection's token fresh: at its refresh point, asks the application's callback
 * for a new token and sends it as `refresh`. A TOKEN_REJECTED answer, an unanswered request or
 * a failing callback is tried once more after REFRESH_RETRY_MS; after that the token is let
 * expire (the node closes the session with a jittered hint, and the reconnect asks the
 * tokenProvider for a new one).
 */
export class TokenRefresh {
  /**
   * @param {{token: string, fetchToken: () => string | Promise<string>,
   *   request: (make: (req: number) => Uint8Array, keys: string[]) => Promise<any>,
   *   timers: {setTimeout: Function, clearTimeout: Function}, wallClock: () => number,
   *   random: () => number, note: (line: string) => void,
   *   onRefreshed: (token: string) => void, onFailed: () => void}} o
   */
  constructor(o) {
    this.o = o;
    this.token = o.token;
    this.timer = null;
    this.stopped = false;
    /** @type {number | null} wall-clock ms of the next attempt, for a person to read */
    this.nextAt = null;
  }

  start() {
    this.schedule();
  }

  schedule() {
    const exp = tokenExpiry(this.token);
    if (exp === null) {
      this.o.note("token refresh: the token has no readable exp; not refreshed");
      return;
    }
    const delay = refreshDelayMs(exp, this.o.wallClock(), this.o.random);
    if (delay === null) return;
    this.arm(delay, false);
  }

  arm(delayMs, retry) {
    if (this.stopped) return;
    this.nextAt = this.o.wallClock() + delayMs;
    this.timer = this.o.timers.setTimeout(() => void this.run(retry), Math.min(delayMs, MAX_TIMER_MS));
  }

  async run(retry) {
    this.timer = null;
    this.nextAt = null;
    let token;
    try {
      token = await this.o.fetchToken();
      if (typeof token !== "string" || !token) throw new TypeError("refreshToken returned no token");
      if (this.stopped) return;
      await this.o.request((req) => encodeRefresh(req, token), []);
    } catch (e) {
      if (this.stopped || e instanceof NotConnectedError) return; // the next connection starts afresh
      this.o.onFailed();
      if (retry) {
        this.o.note(`token refresh failed again (${e}): the token is let expire`);
      } else {
        this.o.note(`token refresh failed (${e}): once more in ${REFRESH_RETRY_MS / 1000} s`);
        this.arm(REFRESH_RETRY_MS, true);
      }
      return;
    }
    if (this.stopped) return;
    this.token = token;
    this.o.onRefreshed(token);
    this.schedule();
  }

  stop() {
    this.stopped = true;
    if (this.timer !== null) this.o.timers.clearTimeout(this.timer);
    this.timer = null;
    this.nextAt = null;
  }
}

/**
 * The glass audit of one connection: every REPORT_INTERVAL_MS, if the guard's regressions or
 * gaps changed since the last accepted report, a `report` with the counts since the connection
 * opened (cumulative, so a lost report loses nothing) and the last regression. Nothing is sent
 * on close: the node counts what it was told while the connection was up.
 */
export class GlassAudit {
  /**
   * @param {{stats: import("./view.js").ViewStats,
   *   request: (make: (req: number) => Uint8Array, keys: string[]) => Promise<any>,
   *   timers: {setTimeout: Function, clearTimeout: Function}, note: (line: string) => void,
   *   intervalMs?: number, onReported?: () => void}} o
   */
  constructor(o) {
    this.o = o;
    this.intervalMs = o.intervalMs ?? REPORT_INTERVAL_MS;
    this.base = { regressions: o.stats.regressions, gaps: o.stats.gaps };
    this.sent = { regressions: 0, gaps: 0 };
    this.inFlight = false;
    this.timer = null;
    this.stopped = false;
  }

  start() {
    if (this.intervalMs > 0) this.timer = this.o.timers.setTimeout(() => this.tick(), this.intervalMs);
  }

  /** The report due now, or null if nothing changed since the last accepted one. */
  due() {
    const s = this.o.stats;
    const regressions = s.regressions - this.base.regressions;
    const gaps = s.gaps - this.base.gaps;
    if (regressions === this.sent.regressions && gaps === this.sent.gaps) return null;
    const r = s.lastRegression;
    // a regression since the connection opened is the last one the view recorded
    const last = regressions > 0 && r ? [r.key, r.held[0], r.held[1], r.got[0], r.got[1]] : null;
    return { regressions, gaps, last };
  }

  tick() {
    this.timer = this.o.timers.setTimeout(() => this.tick(), this.intervalMs);
    const report = this.inFlight ? null : this.due();
    if (report === null) return;
    this.inFlight = true;
    this.o
      .request((req) => encodeReport(req, report.regressions, report.gaps, report.last), [])
      .then(
        () => {
          this.sent = { regressions: report.regressions, gaps: report.gaps };
          this.o.onReported?.();
        },
        (e) => this.stopped || e instanceof NotConnectedError || this.o.note(`glass report not taken: ${e}`),
      )
      .finally(() => (this.inFlight = false));
  }

  stop() {
    this.stopped = true;
    if (this.timer !== null) this.o.timers.clearTimeout(this.timer);
    this.timer = null;
  }
}
