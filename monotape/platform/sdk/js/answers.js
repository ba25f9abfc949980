// How a request is answered (docs/wire.md, "How a request is answered"): a REFUSED naming the
// keys that were not applied (if any), then the ACK that completes the request; or an ERROR
// refusing it whole. `Answers` holds the requests in flight on one client and turns those
// messages into one `Answer` per request, or the error that says why there is none.

import { errorCodeName } from "./decoder.js";

/**
 * The answer to a request the node applied, wholly or in part.
 * @typedef {object} Answer
 * @property {number} req
 * @property {number} subscribed the connection's counts after the request (the ACK's)
 * @property {number} priority
 * @property {string[]} applied the request's keys that took effect, each once, in request order
 * @property {import("./decoder.js").Refusal[]} refused the others, each with its code and reason
 */

/** The server refused a request whole (an ERROR). */
export class ServerError extends Error {
  constructor(code, message, req = 0) {
    super(`${errorCodeName(code)}: ${message}`);
    this.name = "ServerError";
    this.code = code;
    this.req = req;
  }
}

/** Every key of a request was refused (REFUSED), so nothing was applied; `answer` says why. */
export class KeysRefused extends ServerError {
  /** @param {Answer} answer */
  constructor(answer) {
    const first = answer.refused[0];
    super(first.code, answer.refused.map((r) => `${r.key}: ${r.reason}`).join("; "), answer.req);
    this.name = "KeysRefused";
    this.answer = answer;
  }
}

/** A request between connections: its intent is kept and applied on the next connection. */
export class NotConnectedError extends Error {
  constructor() {
    super("not connected (restored on the next connection)");
    this.name = "NotConnectedError";
  }
}

/** The requests in flight, by req. */
export class Answers {
  /** @param {{setTimeout: Function, clearTimeout: Function}} timers @param {number} timeoutMs */
  constructor(timers, timeoutMs) {
    this.timers = timers;
    this.timeoutMs = timeoutMs;
    this.inFlight = new Map(); // req -> {keys, refused, resolve, reject, timer}
  }

  /**
   * The promise of request `req` for `keys` (sent by the caller right after).
   * @param {number} req @param {string[]} keys @returns {Promise<Answer>}
   */
  expect(req, keys) {
    return new Promise((resolve, reject) => {
      const timer = this.timers.setTimeout(
        () => this.fail(req, new Error(`request ${req}: no answer in ${this.timeoutMs} ms`)),
        this.timeoutMs,
      );
      this.inFlight.set(req, { keys, refused: [], resolve, reject, timer });
    });
  }

  take(req) {
    const p = this.inFlight.get(req);
    if (p === undefined) return undefined;
    this.inFlight.delete(req);
    this.timers.clearTimeout(p.timer);
    return p;
  }

  /** A REFUSED: false if no request of ours is waiting for it. */
  refused(msg) {
    const p = this.inFlight.get(msg.req);
    if (p === undefined) return false;
    p.refused.push(...msg.keys); // its ACK follows and completes the request
    return true;
  }

  /** @param {import("./decoder.js").Ack} ack */
  ack(ack) {
    const p = this.take(ack.req);
    if (p === undefined) return;
    const gone = new Set(p.refused.map((r) => r.key));
    const applied = [...new Set(p.keys)].filter((k) => !gone.has(k));
    const answer = { req: ack.req, subscribed: ack.subscribed, priority: ack.priority, applied, refused: p.refused };
    if (p.refused.length && !applied.length) p.reject(new KeysRefused(answer));
    else p.resolve(answer);
  }

  /** @param {import("./decoder.js").ErrorMessage} msg */
  error(msg) {
    if (msg.req !== 0) this.fail(msg.req, new ServerError(msg.code, msg.message, msg.req));
  }

  fail(req, error) {
    this.take(req)?.reject(error);
  }

  /** The connection ended: nothing in flight will be answered. */
  failAll() {
    for (const req of [...this.inFlight.keys()]) this.fail(req, new NotConnectedError());
  }
}
