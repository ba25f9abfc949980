// The terminal client: a thin driver that moves bytes between a WebSocket and the pure parts
// (decoder.js, view.js, reconnect.js). It takes the WebSocket constructor as an argument: the
// browser's `WebSocket`, Node 22's global one, Node 20's behind --experimental-websocket, or
// the `ws` package's; anything with the WHATWG shape (binaryType, send, close, onopen,
// onmessage, onclose).
//
// What a browser cannot do shapes the driver (docs/terminal.md, "Refused, and when to retry"):
// it cannot set headers on a WebSocket, so the token rides in the subprotocol list
// (["monotape.v2", "bearer." + token]); and it cannot read the HTTP status or Retry-After of a
// refused upgrade (it sees close 1006), so a node offered "monotape.v2" refuses in band: a CLOSE
// message (code, reconnect_after_ms, reason) and the close frame that repeats it (CloseEvent.code
// and .reason are readable), 1013 for "try again later", 1008 for a refused token. A connection
// closed before its HELLO with a CLOSE message is a refusal; one closed with neither is an
// unexplained failure and backs off by full jitter alone.

import { Answers, KeysRefused, NotConnectedError, ServerError } from "./answers.js";
import { CloseCode, decodeMessage, errorCodeName } from "./decoder.js";
import { WireError } from "./errors.js";
import { MAX_HZ, MAX_KEYS, MAX_PRIORITY_KEYS, encodePriority, encodeRate, encodeSubscribe, encodeUnsubscribe } from "./requests.js";
import { ReconnectPolicy, hintFromReason } from "./reconnect.js";
import { GlassAudit, TokenRefresh } from "./upkeep.js";
import { ClientStats } from "./stats.js";
import { TerminalView } from "./view.js";

/** Wire protocols this client speaks: 1 refuses a request whole (ERROR), 2 adds REFUSED. */
export const PROTOCOLS = Object.freeze([1, 2]);
/** The subprotocol of wire protocol 2; the token rides beside it as "bearer.<token>". */
export const SUBPROTOCOL = "monotape.v2";
/** A refused token, in band: CLOSE before the HELLO with 1008 (the browser's 401). */
export const CLOSE_UNAUTHORIZED = CloseCode.POLICY_VIOLATION;
// A browser may close only with 1000 or 3000-4999 (WHATWG WebSockets, close()): where
// docs/wire.md says 1002 (a malformed message) the client sends 4002; a connection it gives up
// on (no hello, silent) is closed with 4000.
export const CLOSE_PROTOCOL_ERROR = 4002;
export const CLOSE_GAVE_UP = 4000;
const CLOSE_WAIT_MS = 2000; // for a close event that may never come
export const STATES = Object.freeze(["idle", "connecting", "connected", "backoff", "closed"]);

const chunks = (items, n) => Array.from({ length: Math.ceil(items.length / n) }, (_, i) => items.slice(i * n, i * n + n));

export class TerminalClient {
  /**
   * @param {string} url ws:// or wss:// of the node
   * @param {{WebSocket: any, reconnect?: boolean, tokenProvider?: () => string | Promise<string>,
   *   tokenIn?: "subprotocol" | "query", refreshToken?: () => string | Promise<string>,
   *   maxHz?: number, reportIntervalMs?: number, wallClock?: () => number,
   *   view?: TerminalView, clock?: () => number, random?: () => number,
   *   timers?: {setTimeout: Function, clearTimeout: Function}, backoffBaseMs?: number,
   *   backoffCapMs?: number, stableAfterMs?: number, openTimeoutMs?: number,
   *   requestTimeoutMs?: number, silenceTimeoutMs?: number, onState?: (s: string) => void}} o
   */
  constructor(url, o) {
    if (typeof o?.WebSocket !== "function") throw new TypeError("pass the WebSocket constructor: {WebSocket}");
    // a configuration error: retrying cannot help, so it fails here rather than in a retry loop
    if (!/^wss?:$/.test(new URL(url).protocol)) throw new TypeError(`not a ws:// or wss:// URL: ${url}`);
    this.url = url;
    this.WebSocket = o.WebSocket;
    this.reconnect = o.reconnect ?? true;
    this.tokenProvider = o.tokenProvider ?? null;
    // "query" (?token=) only for a node older than issue 15: URLs get logged, and a browser
    // fails a connection that offered subprotocols when the node answers with none.
    this.tokenIn = o.tokenIn ?? "subprotocol";
    if (this.tokenIn !== "subprotocol" && this.tokenIn !== "query") throw new TypeError(`tokenIn: ${this.tokenIn}`);
    this.refreshToken = o.refreshToken ?? null;
    this.maxHz = o.maxHz ?? 25;
    if (!MAX_HZ.includes(this.maxHz)) throw new RangeError(`maxHz ${this.maxHz} is not one of ${MAX_HZ.join(", ")}`);
    this.reportIntervalMs = o.reportIntervalMs;
    this.wallClock = o.wallClock ?? (() => Date.now());
    this.random = o.random ?? Math.random;
    this.clock = o.clock ?? (() => performance.now());
    this.timers = o.timers ?? { setTimeout: globalThis.setTimeout.bind(globalThis), clearTimeout: globalThis.clearTimeout.bind(globalThis) };
    this.view = o.view ?? new TerminalView({ clock: this.clock });
    this.policy = new ReconnectPolicy({ baseMs: o.backoffBaseMs, capMs: o.backoffCapMs, stableAfterMs: o.stableAfterMs, random: o.random });
    this.openTimeoutMs = o.openTimeoutMs ?? 10_000;
    // HEARTBEAT comes every second; a connection silent this long is dead (a browser may not
    // notice a half-open TCP connection for minutes): closed and reconnected.
    this.silenceTimeoutMs = o.silenceTimeoutMs ?? 10_000;
    this.onState = o.onState ?? null;
    this.stats = new ClientStats();
    this.state = "idle";
    /** @type {import("./decoder.js").Close | null} the last CLOSE message the server sent */
    this.closeMessage = null;
    this.ws = null;
    this.conn = null; // this connection's own state, see attempt()
    this.nextReq = 1;
    this.answers = new Answers(this.timers, o.requestTimeoutMs ?? 10_000);
    this.closing = false;
    this.retryTimer = null;
    /** @type {{promise: Promise<import("./decoder.js").Hello>, resolve: (h: import("./decoder.js").Hello) => void, reject: (e: Error) => void} | null} */
    this.firstHello = null;
  }

  setState(state) {
    if (state === this.state) return;
    this.state = state;
    if (this.onState) {
      try {
        this.onState(state);
      } catch (e) {
        this.stats.note(`onState threw ${e}`); // a callback bug must not stop the client
      }
    }
  }

  /** Start; resolves with the first connection's hello (failed attempts are retried). */
  connect() {
    if (this.firstHello) return this.firstHello.promise;
    /** @type {any} */
    let resolve;
    /** @type {any} */
    let reject;
    const promise = new Promise((res, rej) => ((resolve = res), (reject = rej)));
    // close() before the first hello rejects it; that alone must not be an unhandled rejection
    promise.catch(() => {});
    this.firstHello = { promise, resolve, reject };
    this.closing = false;
    void this.attempt();
    return promise;
  }

  /** The socket of one attempt: the token in the subprotocol list (or, for an old node, the URL). */
  async open(conn) {
    const token = this.tokenProvider ? await this.tokenProvider() : null;
    conn.token = token;
    if (this.tokenIn === "query") {
      if (!token) return new this.WebSocket(this.url);
      const u = new URL(this.url);
      u.searchParams.set("token", token);
      return new this.WebSocket(u.toString());
    }
    return new this.WebSocket(this.url, token ? [SUBPROTOCOL, `bearer.${token}`] : [SUBPROTOCOL]);
  }

  async attempt() {
    this.retryTimer = null;
    if (this.closing) return;
    this.setState("connecting");
    /** @type {{hello: import("./decoder.js").Hello | null, close: import("./decoder.js").Close | null, helloAt: number, lastMessageAt: number, timers: any[], token: string | null, upkeep: {stop: () => void}[]}} */
    const conn = { hello: null, close: null, helloAt: 0, lastMessageAt: this.clock(), timers: [], token: null, upkeep: [] };
    this.conn = conn;
    let ws;
    try {
      ws = await this.open(conn);
    } catch (e) {
      this.stats.connectErrors += 1;
      this.stats.note(`connect failed: ${e}`);
      this.ended(conn, { code: CloseCode.ABNORMAL, reason: "" });
      return;
    }
    if (this.closing) return ws.close(CloseCode.NORMAL);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    conn.timers.push(this.timers.setTimeout(() => conn.hello || this.drop(ws, conn, CLOSE_GAVE_UP, "no hello"), this.openTimeoutMs));
    ws.onmessage = (ev) => this.conn === conn && this.onData(ws, conn, ev.data);
    ws.onclose = (ev) => this.conn === conn && this.ended(conn, ev);
    // A close event should follow every error event; Node 20's WebSocket fires none when the
    // connection is refused, so an error is given a moment for its close, then ends the attempt.
    ws.onerror = () => this.endSoon(conn, CloseCode.ABNORMAL, "");
    this.watchSilence(ws, conn);
  }

  watchSilence(ws, conn) {
    if (!(this.silenceTimeoutMs > 0)) return;
    const check = () => {
      if (this.conn !== conn) return;
      if (this.clock() - conn.lastMessageAt >= this.silenceTimeoutMs) this.drop(ws, conn, CLOSE_GAVE_UP, "silent");
      else conn.timers.push(this.timers.setTimeout(check, this.silenceTimeoutMs / 4));
    };
    conn.timers.push(this.timers.setTimeout(check, this.silenceTimeoutMs / 4));
  }

  /** Close `ws` ourselves; a close handshake that never completes still ends the attempt. */
  drop(ws, conn, code, why) {
    this.stats.note(`closing: ${why}`);
    try {
      ws.close(code, why.slice(0, 120)); // a close reason is at most 123 bytes
    } catch {
      // already closing
    }
    if (conn !== null) this.endSoon(conn, code, why);
  }

  endSoon(conn, code, reason) {
    const t = this.timers.setTimeout(() => this.conn === conn && this.ended(conn, { code, reason }), CLOSE_WAIT_MS);
    conn.timers.push(t);
  }

  onData(ws, conn, data) {
    conn.lastMessageAt = this.clock();
    if (typeof data === "string") {
      this.stats.note("text message from the server: ignored (the wire is binary)");
      return;
    }
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (e) {
      if (!(e instanceof WireError)) throw e;
      // docs/wire.md: a malformed message closes the connection and the client reconnects
      this.stats.wireErrors += 1;
      this.stats.note(`malformed message: ${e.message}`);
      this.drop(ws, conn, CLOSE_PROTOCOL_ERROR, e.fault);
      return;
    }
    this.view.staleness.heard(); // every kind feeds the watchdog; the view reads the rest
    switch (msg.kind) {
      case "hello":
        return this.onHello(ws, conn, msg);
      case "ack":
        this.answers.ack(msg);
        break;
      case "refused":
        if (!this.answers.refused(msg) && !conn.hello) {
          this.stats.note(`refused before the hello: ${msg.keys.map((k) => k.reason).join("; ")}`);
        }
        break;
      case "error":
        this.stats.errors += 1;
        this.stats.note(`${errorCodeName(msg.code)}: ${msg.message}`);
        this.answers.error(msg);
        break;
      case "close":
        conn.close = msg;
        this.closeMessage = msg;
        break;
      default:
        if (!conn.hello) break; // nothing of a connection counts before its dictionary
        this.view.receive(msg);
        this.sendResyncs(ws);
    }
  }

  onHello(ws, conn, hello) {
    if (!PROTOCOLS.includes(hello.protocol)) {
      // docs/wire.md: close rather than misread messages whose meaning changed
      this.stats.wireErrors += 1;
      this.drop(ws, conn, CLOSE_PROTOCOL_ERROR, `wire protocol ${hello.protocol}; this SDK speaks ${PROTOCOLS}`);
      return;
    }
    conn.hello = hello;
    conn.helloAt = this.clock();
    this.view.receive(hello);
    this.stats.connects += 1;
    if (this.stats.connects > 1) this.stats.reconnects += 1;
    this.startUpkeep(conn);
    void this.restore(conn).then(() => {
      if (this.conn !== conn || this.closing) return;
      this.setState("connected");
      this.firstHello?.resolve(hello);
    });
  }

  /** The connection's own timers: the token refresh (with a refreshToken callback) and the glass audit. */
  startUpkeep(conn) {
    const request = (make, keys) => (this.conn === conn ? this.request(make, keys) : Promise.reject(new NotConnectedError()));
    const note = (line) => this.stats.note(line);
    if (this.refreshToken && conn.token) {
      conn.upkeep.push(
        new TokenRefresh({
          token: conn.token,
          fetchToken: this.refreshToken,
          request,
          timers: this.timers,
          wallClock: this.wallClock,
          random: this.random,
          note,
          onRefreshed: (token) => ((conn.token = token), (this.stats.tokenRefreshes += 1)),
          onFailed: () => (this.stats.tokenRefreshFailures += 1),
        }),
      );
    }
    const onReported = () => (this.stats.reports += 1);
    conn.upkeep.push(new GlassAudit({ stats: this.view.stats, request, timers: this.timers, note, intervalMs: this.reportIntervalMs, onReported }));
    for (const u of conn.upkeep) u.start();
  }

  /** The token refresh of the open connection, if any (its `nextAt`: when it refreshes next). */
  get tokenRefresh() {
    return this.conn?.upkeep.find((u) => u instanceof TokenRefresh) ?? null;
  }

  /** Re-ask the rate, re-subscribe the watchlist (its snapshots re-hydrate the glass), re-mark priority. */
  async restore(conn) {
    const gone = [...this.view.held].filter((k) => !this.view.ids.has(k));
    if (gone.length) {
      this.view.release(gone);
      this.stats.note(`dropped on reconnect (not in this node's dictionary): ${gone.slice(0, 5)}`);
    }
    try {
      if (this.maxHz !== 25) await this.sendRate(this.maxHz);
      for (const keys of chunks([...this.view.held], MAX_KEYS)) {
        const answer = await this.settle((req) => encodeSubscribe(req, keys), keys);
        this.forget(answer.refused);
        this.stats.resubscribed += answer.applied.length;
      }
      const prio = [...this.view.priorityKeys].filter((k) => this.view.held.has(k));
      for (const keys of chunks(prio, MAX_PRIORITY_KEYS)) {
        const answer = await this.settle((req) => encodePriority(req, keys, true), keys);
        this.view.markPriority(answer.refused.map((r) => r.key), false);
      }
    } catch (e) {
      if (this.conn === conn) this.stats.note(`restore interrupted: ${e}`);
    }
  }

  /** A request's answer, refused keys included, without throwing for them. */
  async settle(make, keys) {
    try {
      return await this.request(make, keys);
    } catch (e) {
      if (e instanceof KeysRefused) return e.answer;
      throw e;
    }
  }

  sendResyncs(ws) {
    const keys = this.view.takeResyncs();
    for (const chunk of chunks(keys, MAX_KEYS)) ws.send(encodeSubscribe(this.nextReq++, chunk)); // answers unawaited
  }

  ended(conn, ev) {
    for (const t of conn.timers) this.timers.clearTimeout(t);
    for (const u of conn.upkeep) u.stop();
    this.conn = null;
    this.ws = null;
    this.answers.failAll();
    if (this.closing) return;
    const code = ev.code ?? CloseCode.ABNORMAL;
    const hintMs = conn.close?.reconnect_after_ms ?? hintFromReason(ev.reason);
    // 1008 before the hello is a refused token; after it (a session closed at its token's
    // expiry, a policy kick) the connection simply comes back after its hint
    const unauthorized = !conn.hello && (code === CLOSE_UNAUTHORIZED || conn.close?.code === CLOSE_UNAUTHORIZED);
    let why = "close";
    this.stats.closes += 1;
    this.stats.lastCloseCode = code;
    this.stats.lastCloseReason = ev.reason ?? "";
    this.stats.lastCloseHintMs = hintMs;
    if (hintMs !== null) this.stats.closesWithHint += 1;
    if (conn.hello) {
      this.policy.connectionEnded(this.clock() - conn.helloAt);
    } else if (conn.close || code === CloseCode.TRY_AGAIN_LATER || unauthorized) {
      this.stats.refusedInBand += 1; // the server's word, in band: the browser's 503/401
      why = unauthorized ? "unauthorized" : "refused";
      if (unauthorized) this.stats.unauthorized += 1;
    } else {
      this.stats.connectErrors += 1;
      why = "error";
    }
    const entry = { at: this.clock(), code, reason: ev.reason ?? "", hintMs, delayMs: null, why };
    this.stats.closed(entry);
    if (!this.reconnect) {
      this.setState("closed");
      this.firstHello?.reject(new Error(`closed: ${code} ${ev.reason ?? ""}`));
      return;
    }
    const delay = this.policy.next({ hintMs, unauthorized, why });
    entry.delayMs = delay;
    this.stats.nextAttemptAt = this.clock() + delay;
    this.setState("backoff");
    this.retryTimer = this.timers.setTimeout(() => void this.attempt(), delay);
  }

  /** Stop for good: no reconnect; pending requests fail. */
  close() {
    this.closing = true;
    if (this.retryTimer !== null) this.timers.clearTimeout(this.retryTimer);
    const ws = this.ws;
    if (this.conn) this.ended(this.conn, { code: CloseCode.NORMAL, reason: "" });
    if (ws) this.drop(ws, null, CloseCode.NORMAL, "client close");
    this.firstHello?.reject(new Error("client closed"));
    this.setState("closed");
  }

  // -- requests ----------------------------------------------------------------------------------

  /** Send one request; its Answer when the ACK comes (the REFUSED, if any, comes first). */
  request(make, keys) {
    const ws = this.ws;
    if (ws === null || !this.conn?.hello) {
      return Promise.reject(this.reconnect ? new NotConnectedError() : new Error("not connected"));
    }
    const req = this.nextReq++;
    const bytes = make(req);
    const answer = this.answers.expect(req, keys);
    ws.send(bytes);
    return answer;
  }

  async sendRate(maxHz) {
    try {
      await this.request((req) => encodeRate(req, maxHz), []);
    } catch (e) {
      if (e instanceof ServerError) this.stats.note(`rate ${maxHz} Hz refused: ${e.message}`); // an old node: 25 Hz
      else throw e;
    }
  }

  /** At most `maxHz` frames a second (one of 25, 12.5, 5, 2.5, 1), on this and every later connection. */
  async setMaxHz(maxHz) {
    encodeRate(0, maxHz); // the value is checked before it is kept
    this.maxHz = maxHz;
    if (this.conn?.hello) await this.sendRate(maxHz);
  }

  /** Refused keys are not held: neither shown nor restored. */
  forget(refused) {
    this.view.release(refused.map((r) => r.key));
    this.noteRefused(refused);
  }

  noteRefused(refused) {
    for (const r of refused) {
      this.stats.refusedKeys += 1;
      this.stats.note(`refused ${r.key}: ${r.reason} (${errorCodeName(r.code)})`);
    }
  }

  /** Subscribe `keys` (1-256): the Answer says what was applied and what was refused, and why. */
  async subscribe(keys) {
    keys = [...keys];
    encodeSubscribe(0, keys); // the shape is checked before anything is held
    const fresh = keys.filter((k) => !this.view.held.has(k));
    this.view.hold(keys);
    try {
      const answer = await this.request((req) => encodeSubscribe(req, keys), keys);
      this.forget(answer.refused);
      return answer;
    } catch (e) {
      if (e instanceof KeysRefused) this.forget(e.answer.refused);
      else if (e instanceof ServerError) this.view.release(fresh); // refused whole: nothing held
      throw e; // NotConnectedError: held, subscribed on the next connection
    }
  }

  async unsubscribe(keys) {
    keys = [...keys];
    encodeUnsubscribe(0, keys);
    this.view.release(keys);
    return this.request((req) => encodeUnsubscribe(req, keys), keys);
  }

  /** Mark (`on`) or unmark order-ticket symbols; keys refused (not subscribed, over the limit) stay unmarked. */
  async setPriority(keys, on = true) {
    keys = [...keys];
    encodePriority(0, keys, on);
    const before = new Set(this.view.priorityKeys);
    this.view.markPriority(keys, on);
    const unmark = (refused) => {
      this.view.markPriority(refused.filter((r) => on && !before.has(r.key)).map((r) => r.key), false);
      this.noteRefused(refused);
    };
    try {
      const answer = await this.request((req) => encodePriority(req, keys, on), keys);
      unmark(answer.refused);
      return answer;
    } catch (e) {
      if (e instanceof KeysRefused) unmark(e.answer.refused);
      else if (e instanceof ServerError) this.view.priorityKeys = before;
      throw e;
    }
  }
}

export { ClientStats, KeysRefused, NotConnectedError, ServerError };
