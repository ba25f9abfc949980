// Reading tests/vectors/*.json without losing digits: JSON.parse turns 1760000000123456789 into
// 1760000000123456768, which would make a codec test pass against the wrong number. This small
// parser keeps every integer outside the safe range as a BigInt.

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

export const VECTORS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "vectors");

/** @param {string} text */
export function parseJson(text) {
  let i = 0;
  const ws = () => {
    while (" \t\n\r".includes(text[i])) i++;
  };
  const value = () => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const obj = {};
      ws();
      if (text[i] === "}") return i++, obj;
      for (;;) {
        ws();
        const k = value();
        ws();
        if (text[i++] !== ":") throw new SyntaxError(`expected : at ${i}`);
        obj[k] = value();
        ws();
        if (text[i] === ",") i++;
        else if (text[i++] === "}") return obj;
        else throw new SyntaxError(`expected , or } at ${i}`);
      }
    }
    if (c === "[") {
      i++;
      const arr = [];
      ws();
      if (text[i] === "]") return i++, arr;
      for (;;) {
        arr.push(value());
        ws();
        if (text[i] === ",") i++;
        else if (text[i++] === "]") return arr;
        else throw new SyntaxError(`expected , or ] at ${i}`);
      }
    }
    if (c === '"') {
      const m = /^"(?:[^"\\]|\\.)*"/.exec(text.slice(i));
      i += m[0].length;
      return JSON.parse(m[0]);
    }
    const m = /^-?\d+(\.\d+)?([eE][+-]?\d+)?|^true|^false|^null/.exec(text.slice(i, i + 64));
    if (!m) throw new SyntaxError(`unexpected ${c} at ${i}`);
    i += m[0].length;
    if (/^-?\d+$/.test(m[0])) {
      const n = BigInt(m[0]);
      return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
    }
    return JSON.parse(m[0]);
  };
  const v = value();
  ws();
  if (i !== text.length) throw new SyntaxError(`trailing text at ${i}`);
  return v;
}

export function loadVectors(name) {
  return parseJson(readFileSync(join(VECTORS, name), "utf8"));
}

export const fromHex = (hex) => Uint8Array.from(hex.match(/../g) ?? [], (b) => parseInt(b, 16));
export const toHex = (bytes) => Buffer.from(bytes).toString("hex");

// The fields docs/wire.md types uint64 or int64: BigInt in the SDK, whatever size the value is.
const BIG = new Set(["epoch", "seq", "base_epoch", "base_seq", "bid", "ask", "last", "size", "frame_no", "server_wall_ms", "tick_size", "grid_since_ms", "since_ms"]);

/** A vector's expected value with the SDK's types: BigInt for 64-bit fields, numbers else. */
export function typed(value, key = "") {
  if (Array.isArray(value)) return value.map((v) => typed(v, key));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, typed(v, k)]));
  }
  if (BIG.has(key) && (typeof value === "number" || typeof value === "bigint")) return BigInt(value);
  return value;
}

/** The plain msgpack values of a request (maps, arrays, str, int, bool), for round trips. */
export function msgpackValue(bytes) {
  let p = 0;
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const str = (n) => new TextDecoder().decode(bytes.subarray(p, (p += n)));
  const read = () => {
    const b = bytes[p++];
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 256; // negative fixint
    if (b >= 0x80 && b <= 0x8f) return map(b & 0x0f);
    if (b >= 0x90 && b <= 0x9f) return arr(b & 0x0f);
    if (b >= 0xa0 && b <= 0xbf) return str(b & 0x1f);
    switch (b) {
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xcc: return bytes[p++];
      case 0xcd: return (p += 2), dv.getUint16(p - 2);
      case 0xce: return (p += 4), dv.getUint32(p - 4);
      case 0xcf: {
        const v = ((p += 8), dv.getBigUint64(p - 8)); // a Number where exact, else a BigInt
        return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
      }
      case 0xcb: return (p += 8), dv.getFloat64(p - 8);
      case 0xc0: return null;
      case 0xd9: return str(bytes[p++]);
      case 0xda: return (p += 2), str(dv.getUint16(p - 2));
      case 0xdc: return (p += 2), arr(dv.getUint16(p - 2));
      default: throw new Error(`msgpackValue: byte 0x${b.toString(16)} not handled`);
    }
  };
  const arr = (n) => Array.from({ length: n }, read);
  const map = (n) => {
    const o = {};
    for (let k = 0; k < n; k++) o[read()] = read();
    return o;
  };
  const v = read();
  if (p !== bytes.length) throw new Error("msgpackValue: trailing bytes");
  return v;
}
