// A WebSocket and timers the client tests drive by hand: no network, no sleeps. The fake
// WebSocket has the WHATWG shape the client relies on (binaryType, send, close, onmessage,
// onclose), and the "server" side is methods the test calls.

export class FakeTimers {
  constructor(now = 1000) {
    this.now = now;
    this.seq = 0;
    this.due = new Map(); // id -> {at, fn}
    this.clock = () => this.now;
    this.api = { setTimeout: (fn, ms) => this.set(fn, ms), clearTimeout: (id) => this.due.delete(id) };
  }

  set(fn, ms) {
    const id = ++this.seq;
    this.due.set(id, { at: this.now + Math.max(0, ms), fn });
    return id;
  }

  /** Move time forward by `ms`, running what falls due in order. */
  async advance(ms) {
    const end = this.now + ms;
    for (;;) {
      let next = null;
      for (const [id, t] of this.due) if (t.at <= end && (next === null || t.at < next[1].at)) next = [id, t];
      if (next === null) break;
      this.due.delete(next[0]);
      this.now = next[1].at;
      next[1].fn();
      await settle();
    }
    this.now = end;
    await settle();
  }

  /** The earliest pending timer's delay from now, among those later than `min`. */
  nextDelay(min = 0) {
    const ats = [...this.due.values()].map((t) => t.at - this.now).filter((d) => d >= min);
    return ats.length ? Math.min(...ats) : null;
  }
}

/** Let promise callbacks run (the client's async steps). */
export async function settle() {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

/** An unsigned JWT-shaped token expiring at `exp` (seconds): the SDK reads exp, never verifies. */
export function fakeJwt(exp, sub = "alice") {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  return `${b64({ alg: "ES256", typ: "JWT" })}.${b64({ sub, exp })}.c2ln`;
}

export function fakeWebSocketClass() {
  class FakeWebSocket {
    static sockets = [];

    constructor(url, protocols = []) {
      this.url = url;
      this.protocols = typeof protocols === "string" ? [protocols] : [...protocols];
      this.binaryType = "blob";
      this.sent = [];
      this.closedWith = null;
      this.onmessage = null;
      this.onclose = null;
      this.onerror = null;
      FakeWebSocket.sockets.push(this);
    }

    send(bytes) {
      if (this.closedWith) throw new Error("send after close");
      this.sent.push(bytes);
    }

    // the client closing: the close handshake completes with the client's code
    close(code = 1000, reason = "") {
      // what a browser allows a page (WHATWG WebSockets, close())
      if (code !== 1000 && (code < 3000 || code > 4999)) throw new DOMException(`close code ${code}`, "InvalidAccessError");
      if (new TextEncoder().encode(reason).length > 123) throw new DOMException("reason too long", "SyntaxError");
      if (this.closedWith) return;
      this.closedWith = { code, reason };
      queueMicrotask(() => this.onclose?.({ code, reason, wasClean: true }));
    }

    // -- the server's side --
    deliver(bytes) {
      const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
      this.onmessage?.({ data: this.binaryType === "arraybuffer" ? buf : new Blob([buf]) });
    }

    // a failed connection as Node 20's WebSocket reports it: an error event and no close event
    failWithoutClose() {
      this.closedWith = { code: 1006, reason: "" };
      this.onerror?.({ type: "error" });
    }

    serverClose(code, reason = "") {
      if (this.closedWith) return;
      this.closedWith = { code, reason };
      this.onclose?.({ code, reason, wasClean: code !== 1006 });
    }
  }
  return FakeWebSocket;
}
