// The JavaScript codec against every vector in tests/vectors/, in both directions where a vector
// gives bytes and values: the same files the Python codec passes (tests/wire/).

import test from "node:test";
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";

import { decodeMessage, Fault, WireError } from "../../monotape/platform/sdk/js/index.js";
import { applyRecord, decodeRecord } from "../../monotape/platform/sdk/js/records.js";
import * as enc from "../../monotape/platform/sdk/js/encoder.js";
import { encodeRate, encodeRequest, RequestError, MAX_REQUEST_BYTES } from "../../monotape/platform/sdk/js/requests.js";
import { rng } from "./support/rng.mjs";
import { VECTORS, fromHex, loadVectors, msgpackValue, toHex, typed } from "./support/vectors.mjs";

const records = loadVectors("records.json").cases;
const messages = loadVectors("messages.json").cases;
const bad = loadVectors("bad_messages.json").cases;
const requests = loadVectors("requests.json");
const byName = Object.fromEntries(records.map((c) => [c.name, c]));
const chunk = (name) => enc.encodeDeltaRecord(byName[name].base, byName[name].new);

// A vector file this suite does not read must be named here with why, so a new file fails
// until someone decides.
const NOT_FOR_A_TERMINAL = {
  "websocket.json": "RFC 6455 server framing: the runtime's WebSocket (browser or Node) unframes",
  "batches.json": "the feed handlers' tick batches to the sequencer (docs/batches.md): never on a terminal's socket",
};

test("every vector file is checked or named as not a terminal's", () => {
  const checked = ["records.json", "messages.json", "bad_messages.json", "requests.json"];
  for (const f of readdirSync(VECTORS).filter((f) => f.endsWith(".json"))) {
    assert.ok(checked.includes(f) || f in NOT_FOR_A_TERMINAL, `tests/vectors/${f} is not checked by the JS SDK`);
  }
});

test("records: bytes decode to the vector's values, values encode to its bytes", () => {
  assert.ok(records.length >= 10);
  for (const c of records) {
    assert.deepEqual(decodeRecord(fromHex(c.hex)), typed(c.decoded), c.name);
    assert.equal(toHex(chunk(c.name)), c.hex, c.name);
  }
});

test("records: 64-bit fields are BigInt at any size, iid a number", () => {
  const r = decodeRecord(fromHex(byName.full_small.hex));
  for (const f of ["epoch", "seq", "base_epoch", "base_seq", "bid", "ask", "last", "size"]) {
    assert.equal(typeof r[f], "bigint", f);
  }
  assert.equal(typeof r.iid, "number");
  const x = decodeRecord(fromHex(byName.full_extremes.hex));
  assert.equal(x.seq, 18446744073709551615n);
  assert.equal(x.bid, -9223372036854775808n);
});

function expectedMessage(c) {
  if (c.name === "unknown_kind_is_skipped") return { kind: "unknown", code: c.decoded.kind };
  const kind = c.name.startsWith("frame") ? "frame" : c.name.startsWith("stale") ? "stale" : c.name;
  return { kind, ...typed(c.decoded) };
}

function encodeMessage(c) {
  const i = c.input;
  switch (c.name.startsWith("frame") ? "frame" : c.name.startsWith("stale") ? "stale" : c.name) {
    case "frame": return enc.encodeFrame(i.frame_no, i.records.map(chunk));
    case "snapshot": return enc.encodeSnapshot(i.frame_no, i.records.map(chunk));
    case "priority": return enc.encodePriority(chunk(i.record));
    case "hello": return enc.encodeHello(i);
    case "heartbeat": return enc.encodeHeartbeat(i.frame_no, i.server_wall_ms);
    case "error": return enc.encodeError(i.code, i.message, i.req);
    case "close": return enc.encodeClose(i.code, i.reconnect_after_ms, i.reason);
    case "ack": return enc.encodeAck(i.req, i.subscribed, i.priority);
    case "refused": return enc.encodeRefused(i.req, i.keys);
    case "stale": return enc.encodeStale(i.frame_no, i.grid_since_ms, i.venues);
    default: return null; // a kind this protocol does not define: only decoded (skipped)
  }
}

test("messages: every kind decodes to the vector's values and encodes to its bytes", () => {
  const kinds = new Set();
  for (const c of messages) {
    const msg = decodeMessage(fromHex(c.hex));
    kinds.add(msg.kind);
    assert.deepEqual(msg, expectedMessage(c), c.name);
    const bytes = encodeMessage(c);
    if (bytes !== null) assert.equal(toHex(bytes), c.hex, c.name);
  }
  for (const k of ["hello", "snapshot", "frame", "priority", "heartbeat", "error", "close", "ack", "refused", "stale", "unknown"]) {
    assert.ok(kinds.has(k), `no vector decoded as ${k}`);
  }
});

test("messages: decode takes an ArrayBuffer, as a browser WebSocket delivers it", () => {
  const c = messages.find((m) => m.name === "close");
  const bytes = fromHex(c.hex);
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
  assert.deepEqual(decodeMessage(buf), expectedMessage(c));
  // a view into a bigger buffer (Node's ws hands out Buffers that share a pool)
  const pooled = new Uint8Array(bytes.length + 7);
  pooled.set(bytes, 5);
  assert.deepEqual(decodeMessage(pooled.subarray(5, 5 + bytes.length)), expectedMessage(c));
});

// What each malformed vector must be refused for: a decoder that throws for the wrong reason
// would hide the check that is missing.
const FAULTS = {
  empty: Fault.EMPTY,
  kind_zero: Fault.KIND_ZERO,
  frame_truncated_header: Fault.TRUNCATED,
  frame_count_exceeds_bytes: Fault.COUNT_EXCEEDS_BYTES,
  frame_trailing_bytes: Fault.TRAILING_BYTES,
  record_unknown_flag: Fault.UNKNOWN_FLAGS,
  record_new_epoch_without_base: Fault.UNKNOWN_FLAGS,
  varint_non_canonical: Fault.VARINT_NON_CANONICAL,
  varint_too_long: Fault.VARINT_TOO_LONG,
  seq64_below_2_56: Fault.SEQ64_BELOW_2_56,
  snapshot_with_delta: Fault.DELTA_NOT_ALLOWED,
  priority_with_delta: Fault.DELTA_NOT_ALLOWED,
  heartbeat_wrong_type: Fault.WRONG_TYPE,
  hello_garbage: Fault.WRONG_TYPE,
  ack_trailing_element: Fault.ARRAY_LENGTH,
  heartbeat_trailing_element: Fault.ARRAY_LENGTH,
  error_trailing_element: Fault.ARRAY_LENGTH,
  close_trailing_element: Fault.ARRAY_LENGTH,
  hello_trailing_element: Fault.ARRAY_LENGTH,
  hello_instrument_trailing_element: Fault.ARRAY_LENGTH,
  refused_trailing_element: Fault.ARRAY_LENGTH,
  refusal_trailing_element: Fault.ARRAY_LENGTH,
  refused_no_keys: Fault.ARRAY_LENGTH,
  refused_empty: Fault.TRUNCATED,
  stale_empty: Fault.TRUNCATED,
  stale_trailing_element: Fault.ARRAY_LENGTH,
  stale_missing_venues: Fault.ARRAY_LENGTH,
  stale_venue_trailing_element: Fault.ARRAY_LENGTH,
  stale_venue_empty_name: Fault.OUT_OF_RANGE,
  stale_venue_name_too_long: Fault.OUT_OF_RANGE,
};

test("bad messages: every one throws a WireError naming what was wrong", () => {
  for (const c of bad) {
    assert.ok(c.name in FAULTS, `bad_messages.json ${c.name}: add its expected fault here`);
    assert.throws(
      () => decodeMessage(fromHex(c.hex)),
      (e) => e instanceof WireError && e.fault === FAULTS[c.name] && e.message.length > 0,
      c.name,
    );
  }
});

// `rate` takes max_hz as an int or a float64; JSON cannot say which (5.0 parses as 5), so the
// vector's own bytes pick the form asked of the encoder.
const FLOAT_MAX_HZ = "a66d61785f687acb";
const encodeGood = (c) =>
  c.input.type === "rate" ? encodeRate(c.input.req, c.input.max_hz, c.hex.includes(FLOAT_MAX_HZ)) : encodeRequest(c.input);

test("requests: the encoder writes every good vector's bytes, and they read back as its input", () => {
  for (const c of requests.good) {
    assert.equal(toHex(encodeGood(c)), c.hex, c.name);
    assert.deepEqual(msgpackValue(fromHex(c.hex)), c.input, c.name);
  }
});

test("requests: judged vectors' requests re-encode to the same bytes; REFUSED and ACK decode", () => {
  for (const c of requests.judged) {
    const request = msgpackValue(fromHex(c.request_hex));
    assert.equal(toHex(encodeRequest(request)), c.request_hex, c.name);
    if (c.refused_hex !== null) {
      assert.deepEqual(decodeMessage(fromHex(c.refused_hex)), { kind: "refused", req: request.req, keys: c.refused }, c.name);
      assert.equal(toHex(enc.encodeRefused(request.req, c.refused)), c.refused_hex, c.name);
    } else {
      assert.equal(c.refused.length, 0, c.name);
    }
    const ack = decodeMessage(fromHex(c.ack_hex));
    assert.equal(ack.kind, "ack", c.name);
    assert.equal(ack.req, request.req, c.name);
  }
});

// The node refuses these whole (ERROR). Those a typed encoder could be asked to write, it
// refuses itself; the others it cannot produce at all.
const ENCODER_REFUSES = [
  "unknown_type",
  "req_not_int",
  "key_not_a_string",
  "key_longer_than_128",
  "no_keys",
  "too_many_priority",
  "refresh_no_token",
  "refresh_empty_token",
  "refresh_token_not_a_string",
  "report_negative",
  "report_no_gaps",
  "report_last_too_short",
  "rate_not_offered",
  "rate_zero",
  "rate_as_string",
];
const CANNOT_BE_WRITTEN = {
  text: "the SDK sends binary messages only",
  too_large: "15 KiB of zero bytes is not a map",
  garbage: "0xc1 is never written",
  trailing: "one value per message",
  field_named_twice: "each field is written once",
  unknown_field: "only the spec's fields are written",
  report_unknown_field: "only the spec's fields are written",
};

test("requests: the encoder never writes a request the node would refuse whole", () => {
  for (const c of requests.bad) {
    assert.ok(ENCODER_REFUSES.includes(c.name) || c.name in CANNOT_BE_WRITTEN, `requests.json bad ${c.name}: classify it here`);
    if (!ENCODER_REFUSES.includes(c.name)) continue;
    const input = msgpackValue(fromHex(c.hex));
    assert.throws(() => encodeRequest(input), RequestError, c.name);
  }
  const long = Array.from({ length: 256 }, (_, i) => `V:${String(i).padStart(126, "S")}`);
  assert.throws(() => encodeRequest({ type: "subscribe", req: 1, keys: long }), (e) => e instanceof RequestError && e.message.includes(`${MAX_REQUEST_BYTES}`));
});

test("property: any bytes decode to a message or throw WireError, never anything else", () => {
  const r = rng(3);
  const seeds = [...messages, ...bad].map((c) => fromHex(c.hex));
  for (let i = 0; i < 20_000; i++) {
    const b = [...seeds[Math.floor(r() * seeds.length)]];
    for (let m = 1 + Math.floor(r() * 3); m > 0; m--) {
      const at = Math.floor(r() * (b.length + 1));
      const op = Math.floor(r() * 4);
      if (op === 0 && b.length) b[at % b.length] = Math.floor(r() * 256);
      else if (op === 1 && b.length) b.splice(at % b.length, 1);
      else if (op === 2) b.splice(at, 0, Math.floor(r() * 256));
      else b.length = Math.min(b.length, at);
    }
    try {
      decodeMessage(Uint8Array.from(b));
    } catch (e) {
      assert.ok(e instanceof WireError, `${toHex(Uint8Array.from(b))}: ${e}`);
    }
  }
});

test("property: records round-trip, full and delta, across the whole uint64/int64 range", () => {
  const r = rng(5);
  const edges = [0n, 1n, 127n, 128n, (1n << 53n) + 1n, (1n << 56n) - 1n, 1n << 56n, 1760000000123456789n, (1n << 64n) - 1n];
  const u64 = () => (r() < 0.5 ? edges[Math.floor(r() * edges.length)] : BigInt(Math.floor(r() * 2 ** 40)));
  const i64 = () => BigInt.asIntN(64, u64() * (r() < 0.5 ? -1n : 1n));
  for (let i = 0; i < 3000; i++) {
    const base = { iid: Math.floor(r() * 65536), epoch: u64(), seq: u64(), bid: i64(), ask: i64(), last: i64(), size: u64() };
    const next = { ...base, epoch: r() < 0.7 ? base.epoch : u64(), bid: i64(), ask: i64(), last: i64(), size: u64() };
    next.seq = next.epoch === base.epoch ? base.seq + (u64() % ((1n << 64n) - base.seq)) : u64();
    const f = decodeRecord(enc.encodeFullRecord(next));
    assert.deepEqual([f.epoch, f.seq, f.bid, f.ask, f.last, f.size], [next.epoch, next.seq, next.bid, next.ask, next.last, next.size]);
    const d = decodeRecord(enc.encodeDeltaRecord(base, next));
    const p = applyRecord(base, d);
    assert.deepEqual([d.base_epoch, d.base_seq, d.epoch, d.seq], [base.epoch, base.seq, next.epoch, next.seq]);
    assert.deepEqual([p.bid, p.ask, p.last, d.size], [next.bid, next.ask, next.last, next.size]);
  }
});
