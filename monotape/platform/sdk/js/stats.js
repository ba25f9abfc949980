// What a TerminalClient counts about its connections (docs/terminal.md, the `client.stats`
// table): plain counters and the last few things worth a person's look, read by a page's status
// line and by tests.

export class ClientStats {
  constructor() {
    this.connects = 0; // connections that got a hello
    this.reconnects = 0; // of which after the first
    this.closes = 0; // connections that ended (not by close())
    this.closesWithHint = 0;
    this.refusedInBand = 0; // closed before the hello with the server's CLOSE: a refusal
    this.unauthorized = 0; // ... whose code says the token was refused
    this.connectErrors = 0; // closed before the hello with no word from the server (1006)
    this.wireErrors = 0; // malformed messages: the connection is closed (4002)
    this.errors = 0; // ERROR messages
    this.refusedKeys = 0; // keys of our requests the server refused, each logged with why
    this.resubscribed = 0;
    this.tokenRefreshes = 0; // tokens refreshed on an open connection
    this.tokenRefreshFailures = 0; // refreshes refused (TOKEN_REJECTED) or failed
    this.reports = 0; // glass reports the node took
    /** @type {number | null} */ this.lastCloseCode = null;
    /** @type {string | null} */ this.lastCloseReason = null;
    /** @type {number | null} */ this.lastCloseHintMs = null;
    /** @type {number | null} */ this.nextAttemptAt = null; // clock ms of the next attempt (backoff)
    /** @type {string[]} */ this.log = []; // the last 32 things worth a person's look
    /** @type {{at: number, code: number, reason: string, hintMs: number | null, delayMs: number | null, why: string}[]} */
    this.closeLog = []; // the last 16 closes: what the node said, and how long we waited
  }

  closed(entry) {
    this.closeLog.push(entry);
    if (this.closeLog.length > 16) this.closeLog.shift();
  }

  note(line) {
    this.log.push(line);
    if (this.log.length > 32) this.log.shift();
  }
}
