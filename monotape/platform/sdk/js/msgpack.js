// The slice of MessagePack (https://github.com/msgpack/msgpack/blob/master/spec.md) the wire
// uses, read by schema and strictly (docs/wire.md, "Primitive encodings"): every read names the
// type it expects, so a message of the wrong shape fails at the field that is wrong, and no
// input can make the reader recurse (a hostile hello of nested arrays costs one check).
//
// Integers come out as BigInt (uint64 fields: `uint64`) or as numbers after a range check
// (`uint`: u8/u16/u32 fields, always below 2^53). Any integer encoding is accepted for a value
// in range, as the reference decoder (msgspec) accepts it; floats, nil and bools never pass as
// integers.

import { WireError, Fault } from "./errors.js";

const UTF8 = new TextDecoder("utf-8", { fatal: true });
const UTF8_OUT = new TextEncoder();

/** @param {number} b a msgpack type byte @returns {string} what it starts, for error messages */
function typeName(b) {
  if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3)) return "int";
  if (b <= 0x8f || b === 0xde || b === 0xdf) return "map";
  if (b <= 0x9f || b === 0xdc || b === 0xdd) return "array";
  if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb)) return "str";
  if (b === 0xc0) return "nil";
  if (b === 0xc2 || b === 0xc3) return "bool";
  if (b >= 0xc4 && b <= 0xc6) return "bin";
  if (b === 0xca || b === 0xcb) return "float";
  if (b === 0xc1) return "the never-used byte 0xc1";
  return "ext";
}

/** Code points in `s` (the reference decoder's string lengths count code points). */
function codePoints(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdbff) n++;
  }
  return n;
}

/** A cursor over one msgpack body (a message after its kind byte). */
export class MsgpackReader {
  /**
   * @param {Uint8Array} bytes the whole message
   * @param {number} start where the msgpack value begins
   * @param {string} kind the message's name, for errors ("HELLO")
   */
  constructor(bytes, start, kind) {
    this.bytes = bytes;
    this.pos = start;
    this.kind = kind;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /**
   * @param {string} fault one of Fault @param {string} detail @param {string} [field]
   * @returns {never}
   */
  fail(fault, detail, field) {
    throw new WireError(fault, `${this.kind}: ${detail}${field ? ` at ${field}` : ""}`, {
      kind: this.kind,
      offset: this.pos,
      field,
    });
  }

  need(n, field) {
    if (this.pos + n > this.bytes.length) {
      this.fail(Fault.TRUNCATED, `truncated at ${this.bytes.length} bytes`, field);
    }
  }

  peek(field) {
    this.need(1, field);
    return this.bytes[this.pos];
  }

  /** @returns {never} */
  wrongType(expected, field) {
    const b = this.bytes[this.pos];
    return this.fail(Fault.WRONG_TYPE, `expected ${expected}, got ${typeName(b)}`, field);
  }

  /** An array header; `exact`: the only length allowed ([lo, hi]: a range). */
  arrayHeader(field, lo, hi = lo) {
    const b = this.peek(field);
    let n;
    if (b >= 0x90 && b <= 0x9f) {
      n = b & 0x0f;
      this.pos += 1;
    } else if (b === 0xdc) {
      this.need(3, field);
      n = this.view.getUint16(this.pos + 1);
      this.pos += 3;
    } else if (b === 0xdd) {
      this.need(5, field);
      n = this.view.getUint32(this.pos + 1);
      this.pos += 5;
    } else {
      this.wrongType("array", field);
    }
    if (n < lo || n > hi) {
      const want = lo === hi ? `${lo}` : `${lo}-${hi}`;
      this.fail(Fault.ARRAY_LENGTH, `array of ${n} elements, expected ${want}`, field);
    }
    return n;
  }

  /** Any msgpack integer as a BigInt. */
  int(field) {
    const b = this.peek(field);
    const v = this.view;
    const p = this.pos;
    if (b <= 0x7f) {
      this.pos += 1;
      return BigInt(b);
    }
    if (b >= 0xe0) {
      this.pos += 1;
      return BigInt(b - 0x100);
    }
    const widths = { 0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8 };
    const w = widths[b];
    if (w === undefined) this.wrongType("int", field);
    this.need(1 + w, field);
    this.pos += 1 + w;
    switch (b) {
      case 0xcc: return BigInt(v.getUint8(p + 1));
      case 0xcd: return BigInt(v.getUint16(p + 1));
      case 0xce: return BigInt(v.getUint32(p + 1));
      case 0xcf: return v.getBigUint64(p + 1);
      case 0xd0: return BigInt(v.getInt8(p + 1));
      case 0xd1: return BigInt(v.getInt16(p + 1));
      case 0xd2: return BigInt(v.getInt32(p + 1));
      default: return v.getBigInt64(p + 1);
    }
  }

  /** An unsigned integer no larger than `max` (< 2^53), as a number. */
  uint(field, max, min = 0) {
    const at = this.pos;
    const n = this.int(field);
    if (n < BigInt(min) || n > BigInt(max)) {
      this.pos = at;
      this.fail(Fault.OUT_OF_RANGE, `${n} is outside ${min}..${max}`, field);
    }
    return Number(n);
  }

  /** A uint64 as a BigInt (msgpack cannot hold more than 2^64 - 1). */
  uint64(field, min = 0n, max = 0xffff_ffff_ffff_ffffn) {
    const at = this.pos;
    const n = this.int(field);
    if (n < min || n > max) {
      this.pos = at;
      this.fail(Fault.OUT_OF_RANGE, `${n} is outside ${min}..${max}`, field);
    }
    return n;
  }

  /** A UTF-8 string of `minChars`..`maxChars` code points. */
  str(field, maxChars, minChars = 0) {
    const b = this.peek(field);
    let n;
    let head;
    if (b >= 0xa0 && b <= 0xbf) {
      n = b & 0x1f;
      head = 1;
    } else if (b === 0xd9) {
      this.need(2, field);
      n = this.bytes[this.pos + 1];
      head = 2;
    } else if (b === 0xda) {
      this.need(3, field);
      n = this.view.getUint16(this.pos + 1);
      head = 3;
    } else if (b === 0xdb) {
      this.need(5, field);
      n = this.view.getUint32(this.pos + 1);
      head = 5;
    } else {
      this.wrongType("str", field);
    }
    this.need(head + n, field);
    let s;
    try {
      s = UTF8.decode(this.bytes.subarray(this.pos + head, this.pos + head + n));
    } catch {
      this.fail(Fault.BAD_UTF8, "invalid UTF-8 in a string", field);
    }
    const chars = codePoints(s);
    if (chars < minChars || chars > maxChars) {
      this.fail(Fault.OUT_OF_RANGE, `a string of ${chars} characters, expected ${minChars}-${maxChars}`, field);
    }
    this.pos += head + n;
    return s;
  }

  bool(field) {
    const b = this.peek(field);
    if (b !== 0xc2 && b !== 0xc3) this.wrongType("bool", field);
    this.pos += 1;
    return b === 0xc3;
  }

  /** Nothing may follow the value (docs/wire.md: "trailing bytes are an error"). */
  end() {
    const left = this.bytes.length - this.pos;
    if (left !== 0) this.fail(Fault.TRAILING_BYTES, `${left} trailing bytes`);
  }
}

/** Builds msgpack the way the reference encoder does: the shortest form of every value. */
export class MsgpackWriter {
  constructor() {
    /** @type {number[]} */
    this.out = [];
  }

  /** @param {number} n @param {number} fix @param {number} b16 @param {number} b32 */
  header(n, fix, fixMax, b8, b16, b32) {
    const o = this.out;
    if (n <= fixMax) o.push(fix | n);
    else if (b8 !== 0 && n <= 0xff) o.push(b8, n);
    else if (n <= 0xffff) o.push(b16, n >> 8, n & 0xff);
    else o.push(b32, n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff);
  }

  arrayHeader(n) {
    this.header(n, 0x90, 15, 0, 0xdc, 0xdd);
  }

  mapHeader(n) {
    this.header(n, 0x80, 15, 0, 0xde, 0xdf);
  }

  /** A non-negative integer (number or BigInt) below 2^64. */
  uint(value) {
    const n = BigInt(value);
    if (n < 0n || n > 0xffff_ffff_ffff_ffffn) throw new RangeError(`${n} is not a uint64`);
    const o = this.out;
    if (n <= 0x7fn) o.push(Number(n));
    else if (n <= 0xffn) o.push(0xcc, Number(n));
    else if (n <= 0xffffn) o.push(0xcd, Number(n >> 8n), Number(n & 0xffn));
    else {
      const wide = n > 0xffff_ffffn;
      const width = wide ? 8 : 4;
      o.push(wide ? 0xcf : 0xce);
      for (let i = width - 1; i >= 0; i--) o.push(Number((n >> BigInt(8 * i)) & 0xffn));
    }
  }

  str(s) {
    const bytes = UTF8_OUT.encode(s);
    this.header(bytes.length, 0xa0, 31, 0xd9, 0xda, 0xdb);
    for (const b of bytes) this.out.push(b);
  }

  bool(b) {
    this.out.push(b ? 0xc3 : 0xc2);
  }

  /** A float64 (0xcb), the form msgspec writes for every Python float. */
  float64(x) {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setFloat64(0, x);
    this.out.push(0xcb, ...b);
  }

  /** @param {number} kind a leading kind byte, or -1 for none */
  bytes(kind = -1) {
    return kind < 0 ? Uint8Array.from(this.out) : Uint8Array.from([kind, ...this.out]);
  }
}

export { codePoints };
