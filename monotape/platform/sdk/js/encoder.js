// Server -> client encoders: the other direction of decoder.js, byte for byte the reference
// encoder's output (monotape/platform/wire/codec.py), pinned by tests/vectors/. A terminal never
// needs them; tests and fake servers do (the view, client and page tests build real bytes with
// them), and they prove the vectors in both directions.

import { MsgpackWriter } from "./msgpack.js";
import { FLAG_DELTA, FLAG_NEW_EPOCH, FLAG_SEQ64 } from "./records.js";
import { Kind, PROTOCOL_VERSION } from "./decoder.js";

const U64_MAX = 0xffff_ffff_ffff_ffffn;
const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;

/**
 * A tick as the encoder takes it; any integer field may be a number or a BigInt.
 * @typedef {{iid: number, epoch: bigint | number, seq: bigint | number, bid: bigint | number, ask: bigint | number, last: bigint | number, size: bigint | number}} Tick
 */

/** @param {number[]} out @param {bigint} n */
function putUvarint(out, n) {
  if (n < 0n || n > U64_MAX) throw new RangeError(`${n} is not a uint64`);
  while (n > 0x7fn) {
    out.push(Number(n & 0x7fn) | 0x80);
    n >>= 7n;
  }
  out.push(Number(n));
}

/** @param {number[]} out @param {bigint} n an int64 */
function putZigzag(out, n) {
  if (n < I64_MIN || n > I64_MAX) throw new RangeError(`${n} is not an int64`);
  putUvarint(out, n >= 0n ? n << 1n : (-n << 1n) - 1n);
}

/** @param {number[]} out @param {bigint} n */
function putU64le(out, n) {
  for (let i = 0n; i < 8n; i++) out.push(Number((n >> (8n * i)) & 0xffn));
}

/** @param {Tick} t */
function big(t) {
  if (!Number.isInteger(t.iid) || t.iid < 0 || t.iid > 0xffff) throw new RangeError(`iid ${t.iid} is not a uint16`);
  const v = {
    iid: t.iid,
    epoch: BigInt(t.epoch),
    seq: BigInt(t.seq),
    bid: BigInt(t.bid),
    ask: BigInt(t.ask),
    last: BigInt(t.last),
    size: BigInt(t.size),
  };
  for (const f of ["epoch", "seq", "size"]) {
    if (v[f] < 0n || v[f] > U64_MAX) throw new RangeError(`iid ${t.iid}: ${f} is not a uint64`);
  }
  for (const f of ["bid", "ask", "last"]) {
    if (v[f] < I64_MIN || v[f] > I64_MAX) throw new RangeError(`iid ${t.iid}: ${f} is not an int64`);
  }
  return v;
}

/** @param {number[]} out @param {bigint} epoch @param {bigint} seq @returns {number} SEQ64 or 0 */
function putVersion(out, epoch, seq) {
  putUvarint(out, epoch);
  if (seq >> 56n) {
    putU64le(out, seq); // fixed64 iff seq >= 2^56, where it is shorter than the varint
    return FLAG_SEQ64;
  }
  putUvarint(out, seq);
  return 0;
}

/** A full record: absolute prices. @param {Tick} tick @returns {Uint8Array} */
export function encodeFullRecord(tick) {
  const t = big(tick);
  const out = [t.iid & 0xff, t.iid >> 8, 0];
  out[2] = putVersion(out, t.epoch, t.seq);
  putZigzag(out, t.bid);
  putZigzag(out, t.ask);
  putZigzag(out, t.last);
  putUvarint(out, t.size);
  return Uint8Array.from(out);
}

/**
 * The record that moves a client holding `base` to `tick` (`base` null: a full record).
 * @param {Tick | null} base
 * @param {Tick} tick
 * @returns {Uint8Array}
 */
export function encodeDeltaRecord(base, tick) {
  if (base === null) return encodeFullRecord(tick);
  const b = big(base);
  const t = big(tick);
  if (b.iid !== t.iid) throw new RangeError(`delta base is iid ${b.iid}, new tick is iid ${t.iid}`);
  const out = [t.iid & 0xff, t.iid >> 8, 0];
  let flags = FLAG_DELTA | putVersion(out, b.epoch, b.seq);
  if (t.epoch === b.epoch) {
    if (t.seq < b.seq) throw new RangeError(`iid ${t.iid}: seq ${t.seq} is below its base seq ${b.seq}`);
    putUvarint(out, t.seq - b.seq);
  } else {
    flags |= FLAG_NEW_EPOCH;
    putUvarint(out, t.epoch);
    putUvarint(out, t.seq);
  }
  out[2] = flags;
  putZigzag(out, BigInt.asIntN(64, t.bid - b.bid));
  putZigzag(out, BigInt.asIntN(64, t.ask - b.ask));
  putZigzag(out, BigInt.asIntN(64, t.last - b.last));
  putUvarint(out, t.size);
  return Uint8Array.from(out);
}

/** @param {number} kind @param {bigint | number} frameNo @param {Uint8Array[]} chunks */
function records(kind, frameNo, chunks) {
  const out = [kind];
  putUvarint(out, BigInt(frameNo));
  putUvarint(out, BigInt(chunks.length));
  for (const c of chunks) for (const b of c) out.push(b);
  return Uint8Array.from(out);
}

/** FRAME: frame_no, then delta or full record chunks. */
export function encodeFrame(frameNo, chunks) {
  return records(Kind.FRAME, frameNo, chunks);
}

/** SNAPSHOT: the frame whose published state it shows, then full record chunks. */
export function encodeSnapshot(frameNo, chunks) {
  return records(Kind.SNAPSHOT, frameNo, chunks);
}

/** PRIORITY: exactly one full record chunk. @param {Uint8Array} chunk */
export function encodePriority(chunk) {
  if (chunk.length < 9 || chunk[2] & FLAG_DELTA) throw new RangeError("a priority update carries exactly one full record");
  return Uint8Array.from([Kind.PRIORITY, ...chunk]);
}

/**
 * HELLO: the dictionary as an array of [iid, key, price_decimals, tick_size] rows.
 * @param {{server_id: string, frame_ms: number, max_subscriptions: number, max_priority: number,
 *   instruments: {iid: number, key: string, price_decimals: number, tick_size: bigint | number}[],
 *   protocol?: number}} hello
 */
export function encodeHello(hello) {
  const w = new MsgpackWriter();
  w.arrayHeader(6);
  w.uint(hello.protocol ?? PROTOCOL_VERSION);
  w.str(hello.server_id);
  w.uint(hello.frame_ms);
  w.uint(hello.max_subscriptions);
  w.uint(hello.max_priority);
  w.arrayHeader(hello.instruments.length);
  for (const i of hello.instruments) {
    w.arrayHeader(4);
    w.uint(i.iid);
    w.str(i.key);
    w.uint(i.price_decimals);
    w.uint(i.tick_size);
  }
  return w.bytes(Kind.HELLO);
}

/** @param {number} kind @param {(w: MsgpackWriter) => void} fill */
function small(kind, n, fill) {
  const w = new MsgpackWriter();
  w.arrayHeader(n);
  fill(w);
  return w.bytes(kind);
}

export const encodeHeartbeat = (frameNo, serverWallMs) =>
  small(Kind.HEARTBEAT, 2, (w) => (w.uint(frameNo), w.uint(serverWallMs)));

export const encodeError = (code, message, req = 0) =>
  small(Kind.ERROR, 3, (w) => (w.uint(code), w.str(message), w.uint(req)));

export const encodeClose = (code, reconnectAfterMs, reason) =>
  small(Kind.CLOSE, 3, (w) => (w.uint(code), w.uint(reconnectAfterMs), w.str(reason)));

export const encodeAck = (req, subscribed, priority) =>
  small(Kind.ACK, 3, (w) => (w.uint(req), w.uint(subscribed), w.uint(priority)));

/** REFUSED for request `req`: 1-256 `{key, code, reason}`. */
export function encodeRefused(req, refusals) {
  if (refusals.length < 1 || refusals.length > 256) throw new RangeError(`REFUSED carries 1-256 keys, not ${refusals.length}`);
  return small(Kind.REFUSED, 2, (w) => {
    w.uint(req);
    rows(w, refusals, 3, (r) => (w.str(r.key), w.uint(r.code), w.str(r.reason)));
  });
}

/** `items` as an array of fixed-width arrays (REFUSED's keys, STALE's venues). */
function rows(w, items, width, put) {
  w.arrayHeader(items.length);
  for (const item of items) {
    w.arrayHeader(width);
    put(item);
  }
}

/** STALE (kind 10): `venues` as [{venue, since_ms}], at most 256 (docs/wire.md, STALE). */
export function encodeStale(frameNo, gridSinceMs, venues) {
  if (venues.length > 256) throw new RangeError(`STALE names at most 256 venues, not ${venues.length}`);
  return small(Kind.STALE, 3, (w) => {
    w.uint(frameNo);
    w.uint(gridSinceMs);
    rows(w, venues, 2, (v) => (w.str(v.venue), w.uint(v.since_ms)));
  });
}
