// Server -> client messages (docs/wire.md, "Message kinds"): the one function a terminal needs,
// `decodeMessage`, strict in the reference decoder's way (monotape/platform/wire/codec.py):
// truncation, trailing bytes, an array with more or fewer elements than listed, a field out of
// range or of the wrong type is a malformed message (WireError); kinds 10-255 are skipped.
//
// Which fields are BigInt: every uint64/int64 of the spec. In records: epoch, seq, base_epoch,
// base_seq, bid, ask, last, size (records.js). In messages: SNAPSHOT/FRAME frame_no, HEARTBEAT
// frame_no and server_wall_ms, HELLO tick_size (int64). Everything narrower (iid, counts, req,
// codes, reconnect_after_ms, frame_ms, limits, protocol, price_decimals) is a number.
// Field names are the spec's own, so docs/wire.md reads as the reference for these objects.

import { WireError, Fault } from "./errors.js";
import { MsgpackReader } from "./msgpack.js";
import { Cursor, MIN_RECORD_BYTES, readRecord } from "./records.js";

/** The wire protocol this decoder implements (docs/wire.md, version 2). */
export const PROTOCOL_VERSION = 2;

/** First byte of every server message. @readonly @enum {number} */
export const Kind = Object.freeze({
  HELLO: 1,
  SNAPSHOT: 2,
  FRAME: 3,
  PRIORITY: 4,
  HEARTBEAT: 5,
  ERROR: 6,
  CLOSE: 7,
  ACK: 8,
  REFUSED: 9,
  STALE: 10, // added within version 2: older clients skip it (docs/wire.md, STALE)
});
const LAST_KIND = 10;
const KIND_NAMES = Object.freeze(Object.fromEntries(Object.entries(Kind).map(([k, v]) => [v, k])));

/** ERROR.code and REFUSED's per-key code (docs/wire.md, "Error codes"). @readonly @enum {number} */
export const ErrorCode = Object.freeze({
  BAD_MESSAGE: 1,
  TEXT_NOT_ALLOWED: 2,
  TOO_LARGE: 3,
  UNKNOWN_SYMBOL: 4,
  TOO_MANY_SUBSCRIPTIONS: 5,
  RATE_LIMITED: 6,
  TOO_MANY_PRIORITY: 7,
  NOT_SUBSCRIBED: 8,
  INVALID_REQUEST: 9,
  MALFORMED_KEY: 10,
  TOKEN_REJECTED: 11, // refresh: invalid, expired, another subject, or wider claims
});

/** A code's name; a code from a newer server is shown by its number, never a failure. */
export function errorCodeName(code) {
  const hit = Object.entries(ErrorCode).find(([, v]) => v === code);
  return hit ? hit[0] : `code ${code}`;
}

/** WebSocket close codes the server uses (docs/wire.md, close code table). @readonly @enum {number} */
export const CloseCode = Object.freeze({
  NORMAL: 1000,
  GOING_AWAY: 1001,
  PROTOCOL_ERROR: 1002,
  UNSUPPORTED_DATA: 1003,
  ABNORMAL: 1006, // never sent: what a browser reports when there was no close frame
  INVALID_PAYLOAD: 1007,
  POLICY_VIOLATION: 1008,
  MESSAGE_TOO_BIG: 1009,
  INTERNAL_ERROR: 1011,
  TRY_AGAIN_LATER: 1013,
});

const TEXT = 1024; // every str(<=1024) of the spec
const KEY_TEXT = 128; // a refused key as the client sent it
const MAX_REFUSED = 256;
const MAX_STALE_VENUES = 256;
const U16 = 0xffff;
const U32 = 0xffff_ffff;
const I64_MAX = (1n << 63n) - 1n;
// The reference decoder's dictionary-key check (codec._InstrumentRow): 3-64 characters,
// VENUE:SYMBOL with both halves non-empty. Python's `.` stops at "\n" and its `$` may sit
// before one final "\n", hence the spelling. Keys are born under the stricter key grammar.
const HELLO_KEY = /^[^:]+:[^\n]+\n?$/;

/**
 * @typedef {import("./records.js").WireRecord} WireRecord
 * @typedef {{iid: number, key: string, venue: string, symbol: string, price_decimals: number, tick_size: bigint}} Instrument
 * @typedef {{kind: "hello", protocol: number, server_id: string, frame_ms: number, max_subscriptions: number, max_priority: number, instruments: Instrument[]}} Hello
 * @typedef {{kind: "snapshot", frame_no: bigint, records: WireRecord[]}} Snapshot
 * @typedef {{kind: "frame", frame_no: bigint, records: WireRecord[]}} Frame
 * @typedef {{kind: "priority", record: WireRecord}} PriorityUpdate
 * @typedef {{kind: "heartbeat", frame_no: bigint, server_wall_ms: bigint}} Heartbeat
 * @typedef {{kind: "error", code: number, message: string, req: number}} ErrorMessage
 * @typedef {{kind: "close", code: number, reconnect_after_ms: number, reason: string}} Close
 * @typedef {{kind: "ack", req: number, subscribed: number, priority: number}} Ack
 * @typedef {{key: string, code: number, reason: string}} Refusal
 * @typedef {{kind: "refused", req: number, keys: Refusal[]}} Refused
 * @typedef {{venue: string, since_ms: bigint}} StaleVenue
 * @typedef {{kind: "stale", frame_no: bigint, grid_since_ms: bigint, venues: StaleVenue[]}} Stale
 * @typedef {{kind: "unknown", code: number}} UnknownKind a later protocol's message: skip it
 * @typedef {Hello | Snapshot | Frame | PriorityUpdate | Heartbeat | ErrorMessage | Close | Ack | Refused | Stale | UnknownKind} ServerMessage
 */

/** @param {ArrayBuffer | ArrayBufferView} data */
function asBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new WireError(Fault.NOT_BYTES, `expected binary data, got ${typeof data}`);
}

/** @param {Uint8Array} bytes @param {boolean} fullOnly @param {string} kind */
function readRecords(bytes, fullOnly, kind) {
  const c = new Cursor(bytes, 1, kind);
  const frameNo = c.uvarint("frame_no");
  const countAt = c.pos;
  const count = c.smallUvarint("count");
  const left = bytes.length - c.pos;
  if (count * MIN_RECORD_BYTES > left) {
    c.fail(Fault.COUNT_EXCEEDS_BYTES, `count ${count} exceeds the ${left} bytes left`, countAt);
  }
  const records = new Array(count);
  for (let i = 0; i < count; i++) {
    const at = c.pos;
    const rec = readRecord(c);
    if (fullOnly && rec.has_base) {
      c.fail(Fault.DELTA_NOT_ALLOWED, `delta record for iid ${rec.iid}; snapshots are full`, at);
    }
    records[i] = rec;
  }
  if (c.pos !== bytes.length) {
    c.fail(Fault.TRAILING_BYTES, `${bytes.length - c.pos} trailing bytes after ${count} records`);
  }
  return { frameNo, records };
}

/** @param {MsgpackReader} r @returns {Hello} */
function readHello(r) {
  r.arrayHeader("$", 6);
  const protocol = r.uint("$[0]", U16);
  const serverId = r.str("$[1]", TEXT);
  const frameMs = r.uint("$[2]", U32);
  const maxSubscriptions = r.uint("$[3]", U32);
  const maxPriority = r.uint("$[4]", U32);
  const n = r.arrayHeader("$[5]", 0, U32);
  const instruments = [];
  for (let i = 0; i < n; i++) {
    const at = `$[5][${i}]`;
    r.arrayHeader(at, 4);
    const iid = r.uint(`${at}[0]`, U16);
    const key = r.str(`${at}[1]`, 64, 3);
    if (!HELLO_KEY.test(key)) r.fail(Fault.BAD_KEY, `key ${JSON.stringify(key)} is not VENUE:SYMBOL`, `${at}[1]`);
    const priceDecimals = r.uint(`${at}[2]`, 18);
    const tickSize = r.uint64(`${at}[3]`, 1n, I64_MAX);
    const colon = key.indexOf(":");
    instruments.push({
      iid,
      key,
      venue: key.slice(0, colon),
      symbol: key.slice(colon + 1),
      price_decimals: priceDecimals,
      tick_size: tickSize,
    });
  }
  return {
    kind: "hello",
    protocol,
    server_id: serverId,
    frame_ms: frameMs,
    max_subscriptions: maxSubscriptions,
    max_priority: maxPriority,
    instruments,
  };
}

/** @param {MsgpackReader} r @param {number} kind @returns {ServerMessage} */
function readSmall(r, kind) {
  switch (kind) {
    case Kind.HEARTBEAT:
      r.arrayHeader("$", 2);
      return { kind: "heartbeat", frame_no: r.uint64("$[0]"), server_wall_ms: r.uint64("$[1]") };
    case Kind.ERROR: {
      // req may be left out (it defaults to 0 in the reference decoder, codec.Error)
      const n = r.arrayHeader("$", 2, 3);
      const code = r.uint("$[0]", U16);
      const message = r.str("$[1]", TEXT);
      return { kind: "error", code, message, req: n === 3 ? r.uint("$[2]", U32) : 0 };
    }
    case Kind.CLOSE:
      r.arrayHeader("$", 3);
      return {
        kind: "close",
        code: r.uint("$[0]", U16),
        reconnect_after_ms: r.uint("$[1]", U32),
        reason: r.str("$[2]", TEXT),
      };
    case Kind.ACK:
      r.arrayHeader("$", 3);
      return { kind: "ack", req: r.uint("$[0]", U32), subscribed: r.uint("$[1]", U32), priority: r.uint("$[2]", U32) };
    case Kind.REFUSED: {
      r.arrayHeader("$", 2);
      const req = r.uint("$[0]", U32);
      const n = r.arrayHeader("$[1]", 1, MAX_REFUSED);
      const keys = [];
      for (let i = 0; i < n; i++) {
        const at = `$[1][${i}]`;
        r.arrayHeader(at, 3);
        keys.push({ key: r.str(`${at}[0]`, KEY_TEXT), code: r.uint(`${at}[1]`, U16), reason: r.str(`${at}[2]`, TEXT) });
      }
      return { kind: "refused", req, keys };
    }
    case Kind.STALE: {
      r.arrayHeader("$", 3);
      const frameNo = r.uint64("$[0]");
      const gridSinceMs = r.uint64("$[1]");
      const n = r.arrayHeader("$[2]", 0, MAX_STALE_VENUES);
      const venues = [];
      for (let i = 0; i < n; i++) {
        const at = `$[2][${i}]`;
        r.arrayHeader(at, 2);
        venues.push({ venue: r.str(`${at}[0]`, 16, 1), since_ms: r.uint64(`${at}[1]`) });
      }
      return { kind: "stale", frame_no: frameNo, grid_since_ms: gridSinceMs, venues };
    }
    default:
      return readHello(r);
  }
}

/**
 * Any server message. Throws WireError (with `fault`, `kind`, `offset`) on anything malformed;
 * returns `{kind: "unknown"}` for kinds 11-255, which a client skips.
 * @param {ArrayBuffer | ArrayBufferView} data one WebSocket message
 * @returns {ServerMessage}
 */
export function decodeMessage(data) {
  const bytes = asBytes(data);
  if (bytes.length === 0) throw new WireError(Fault.EMPTY, "empty message", { offset: 0 });
  const kind = bytes[0];
  if (kind === 0) throw new WireError(Fault.KIND_ZERO, "message kind 0 is not defined", { offset: 0 });
  if (kind > LAST_KIND) return { kind: "unknown", code: kind };
  const name = KIND_NAMES[kind];
  if (kind === Kind.FRAME) {
    const { frameNo, records } = readRecords(bytes, false, name);
    return { kind: "frame", frame_no: frameNo, records };
  }
  if (kind === Kind.SNAPSHOT) {
    const { frameNo, records } = readRecords(bytes, true, name);
    return { kind: "snapshot", frame_no: frameNo, records };
  }
  if (kind === Kind.PRIORITY) {
    const c = new Cursor(bytes, 1, name);
    const record = readRecord(c);
    if (record.has_base) c.fail(Fault.DELTA_NOT_ALLOWED, "must be exactly one full record", 1);
    if (c.pos !== bytes.length) c.fail(Fault.TRAILING_BYTES, `${bytes.length - c.pos} trailing bytes after the record`);
    return { kind: "priority", record };
  }
  const r = new MsgpackReader(bytes, 1, name);
  const msg = readSmall(r, kind);
  r.end();
  return msg;
}
