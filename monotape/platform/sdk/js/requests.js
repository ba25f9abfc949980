// Client -> server requests (docs/wire.md, "Requests"): one binary message holding a msgpack map
// with `type` first, then the fields in the spec's order, each in its shortest form: the bytes
// of the reference encoder (monotape/platform/wire/requests.py), pinned by
// tests/vectors/requests.json.
//
// The encoder refuses what the node would refuse whole (INVALID_REQUEST or TOO_LARGE: no keys,
// too many, a key that is not a string or longer than 128 characters, a req outside uint32), so
// a terminal fails at the call that is wrong instead of on an ERROR later. Keys are not checked
// against the key grammar: the node judges each key on its own and answers REFUSED for the bad
// ones while applying the rest.
//
// Issue 15 adds three requests a terminal sends on its own timers (docs/wire.md, "Requests"):
// `refresh` (a fresh token on the open connection), `report` (the glass audit: what the guard
// dropped) and `rate` (the terminal's max_hz). An old node answers them INVALID_REQUEST.

import { MsgpackWriter, codePoints } from "./msgpack.js";

export const MAX_REQUEST_BYTES = 15 * 1024;
export const MAX_KEYS = 256;
export const MAX_PRIORITY_KEYS = 16; // an order ticket holds a handful of symbols
export const MAX_KEY_TEXT = 128;
const U32 = 0xffff_ffff;
const U64 = 0xffff_ffff_ffff_ffffn;
/** The rates a terminal may ask for: every k-th frame of the 40 ms grid, k in {1, 2, 5, 10, 25}. */
export const MAX_HZ = Object.freeze([25, 12.5, 5, 2.5, 1]);
export const MAX_TOKEN_BYTES = 8192; // the node's default auth.max_token_bytes

/** Thrown for a request the node would refuse whole; `field` names it as the node would. */
export class RequestError extends RangeError {
  /** @param {string} message @param {string} field */
  constructor(message, field) {
    super(`${message} - at \`${field}\``);
    this.name = "RequestError";
    this.field = field;
  }
}

/**
 * @param {string} type
 * @param {number} req
 * @param {readonly string[]} keys
 * @param {number} maxKeys
 * @param {boolean | undefined} on
 * @returns {Uint8Array}
 */
function encode(type, req, keys, maxKeys, on) {
  if (!Number.isInteger(req) || req < 0 || req > U32) throw new RequestError(`req ${req} is not a uint32`, "$.req");
  if (!Array.isArray(keys) || keys.length < 1 || keys.length > maxKeys) {
    throw new RequestError(`${type} names 1-${maxKeys} keys, not ${keys?.length}`, "$.keys");
  }
  const w = new MsgpackWriter();
  w.mapHeader(on === undefined ? 3 : 4);
  w.str("type");
  w.str(type);
  w.str("req");
  w.uint(req);
  w.str("keys");
  w.arrayHeader(keys.length);
  keys.forEach((key, i) => {
    if (typeof key !== "string") throw new RequestError(`key ${i} is a ${typeof key}, not a string`, `$.keys[${i}]`);
    if (codePoints(key) > MAX_KEY_TEXT) {
      throw new RequestError(`key ${i} is longer than ${MAX_KEY_TEXT} characters`, `$.keys[${i}]`);
    }
    w.str(key);
  });
  if (on !== undefined) {
    w.str("on");
    w.bool(on);
  }
  const bytes = w.bytes();
  if (bytes.length > MAX_REQUEST_BYTES) {
    throw new RequestError(`${bytes.length} bytes exceeds the ${MAX_REQUEST_BYTES} byte limit`, "$");
  }
  return bytes;
}

/** `subscribe` (1-256 keys): re-subscribing a held key is how a terminal asks for a snapshot. */
export function encodeSubscribe(req, keys) {
  return encode("subscribe", req, keys, MAX_KEYS, undefined);
}

/** `unsubscribe` (1-256 keys); a key not held is a no-op, not a refusal. */
export function encodeUnsubscribe(req, keys) {
  return encode("unsubscribe", req, keys, MAX_KEYS, undefined);
}

/** `priority` (1-16 keys): mark (`on`) or unmark order-ticket symbols. `on` is always sent. */
export function encodePriority(req, keys, on = true) {
  if (typeof on !== "boolean") throw new RequestError(`on is a ${typeof on}, not a bool`, "$.on");
  return encode("priority", req, keys, MAX_PRIORITY_KEYS, on);
}

function checkReq(req) {
  if (!Number.isInteger(req) || req < 0 || req > U32) throw new RequestError(`req ${req} is not a uint32`, "$.req");
}

function finish(w) {
  const bytes = w.bytes();
  if (bytes.length > MAX_REQUEST_BYTES) {
    throw new RequestError(`${bytes.length} bytes exceeds the ${MAX_REQUEST_BYTES} byte limit`, "$");
  }
  return bytes;
}

function head(w, type, req, fields) {
  checkReq(req);
  w.mapHeader(fields);
  w.str("type");
  w.str(type);
  w.str("req");
  w.uint(req);
}

/** `refresh`: a fresh token for the open connection (same subject, no wider claims). */
export function encodeRefresh(req, token) {
  if (typeof token !== "string" || token.length === 0) throw new RequestError("token must be a non-empty string", "$.token");
  if (new TextEncoder().encode(token).length > MAX_TOKEN_BYTES) {
    throw new RequestError(`token is longer than ${MAX_TOKEN_BYTES} bytes`, "$.token");
  }
  const w = new MsgpackWriter();
  head(w, "refresh", req, 3);
  w.str("token");
  w.str(token);
  return finish(w);
}

const u64 = (v, field) => {
  const n = typeof v === "bigint" ? v : Number.isInteger(v) ? BigInt(v) : -1n;
  if (n < 0n || n > U64) throw new RequestError(`${v} is not a uint64`, field);
  return n;
};

/**
 * `report`: the glass audit's CUMULATIVE counts since the connection opened, and the last
 * regression as `[key, held_epoch, held_seq, got_epoch, got_seq]` (omitted when none).
 * @param {number} req @param {number | bigint} regressions @param {number | bigint} gaps
 * @param {[string, bigint, bigint, bigint, bigint] | null} [last]
 */
export function encodeReport(req, regressions, gaps, last = null) {
  const w = new MsgpackWriter();
  head(w, "report", req, last ? 5 : 4);
  w.str("regressions");
  w.uint(u64(regressions, "$.regressions"));
  w.str("gaps");
  w.uint(u64(gaps, "$.gaps"));
  if (last) {
    if (!Array.isArray(last) || last.length !== 5 || typeof last[0] !== "string") {
      throw new RequestError("last is [key, held_epoch, held_seq, got_epoch, got_seq]", "$.last");
    }
    if (codePoints(last[0]) > MAX_KEY_TEXT) throw new RequestError(`last key is longer than ${MAX_KEY_TEXT} characters`, "$.last[0]");
    w.str("last");
    w.arrayHeader(5);
    w.str(last[0]);
    for (let i = 1; i < 5; i++) w.uint(u64(last[i], `$.last[${i}]`));
  }
  return finish(w);
}

/**
 * `rate`: the terminal's max_hz, one of MAX_HZ: a whole number as an int, else a float64 (the
 * node takes either; `asFloat` writes a float64 always, as msgspec does for a Python float).
 */
export function encodeRate(req, maxHz, asFloat = false) {
  if (!MAX_HZ.includes(maxHz)) throw new RequestError(`max_hz ${maxHz} is not one of ${MAX_HZ.join(", ")}`, "$.max_hz");
  const w = new MsgpackWriter();
  head(w, "rate", req, 3);
  w.str("max_hz");
  if (Number.isInteger(maxHz) && !asFloat) w.uint(maxHz);
  else w.float64(maxHz);
  return finish(w);
}

/**
 * A request given as the vectors spell it: `{type, req, keys, on?}`, `{type: "refresh", req,
 * token}`, `{type: "report", req, regressions, gaps, last?}`, `{type: "rate", req, max_hz}`.
 * @param {any} request
 */
export function encodeRequest(request) {
  switch (request.type) {
    case "refresh":
      return encodeRefresh(request.req, request.token);
    case "report":
      return encodeReport(request.req, request.regressions, request.gaps, request.last ?? null);
    case "rate":
      return encodeRate(request.req, request.max_hz);
    case "subscribe":
      return encodeSubscribe(request.req, request.keys);
    case "unsubscribe":
      return encodeUnsubscribe(request.req, request.keys);
    case "priority":
      return encodePriority(request.req, request.keys, request.on ?? true);
    default:
      throw new RequestError(`unknown request type ${JSON.stringify(request.type)}`, "$.type");
  }
}
