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

import { MsgpackWriter, codePoints } from "./msgpack.js";

export const MAX_REQUEST_BYTES = 15 * 1024;
export const MAX_KEYS = 256;
export const MAX_PRIORITY_KEYS = 16; // an order ticket holds a handful of symbols
export const MAX_KEY_TEXT = 128;
const U32 = 0xffff_ffff;

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

/**
 * A request given as the vectors spell it: `{type, req, keys, on?}`.
 * @param {{type: "subscribe" | "unsubscribe" | "priority", req: number, keys: string[], on?: boolean}} request
 */
export function encodeRequest(request) {
  switch (request.type) {
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
