// Records, the per-symbol chunk of SNAPSHOT, FRAME and PRIORITY (docs/wire.md, "Records").
//
// Every uint64 and int64 of the spec is a BigInt here (epoch, seq, base_epoch, base_seq, bid,
// ask, last, size): ns-timestamp seqs are about 1.76e18, far past 2^53, and a Number would
// silently round them, turning a new version into an old one on the glass. iid (uint16) is a
// number. Varints are read in Number arithmetic while they fit in 49 bits (7 bytes: every
// price step, size and update-id seq) and only longer ones take the BigInt path.

import { WireError, Fault } from "./errors.js";

export const FLAG_DELTA = 0x01; // the record names a base version; prices are deltas
export const FLAG_NEW_EPOCH = 0x02; // delta only: the new version as epoch + seq, not a step
export const FLAG_SEQ64 = 0x04; // the first seq field is u64le (set iff it is >= 2^56)
const KNOWN_FLAGS = FLAG_DELTA | FLAG_NEW_EPOCH | FLAG_SEQ64;
export const MIN_RECORD_BYTES = 9; // iid(2) + flags(1) + six 1-byte varints: bounds a count
const U64_MAX = 0xffff_ffff_ffff_ffffn;
const SEQ64_FROM = 1n << 56n;

/**
 * One decoded record. With `has_base`, bid/ask/last are int64 DELTAS against the base's prices
 * (see `applyRecord`); otherwise they are absolute. For a full record base_epoch and base_seq
 * are 0n.
 * @typedef {object} WireRecord
 * @property {number} iid instrument id (uint16) from HELLO's dictionary
 * @property {bigint} epoch
 * @property {bigint} seq
 * @property {boolean} has_base
 * @property {bigint} base_epoch
 * @property {bigint} base_seq
 * @property {bigint} bid int64
 * @property {bigint} ask int64
 * @property {bigint} last int64
 * @property {bigint} size uint64
 */

/** A reading position in one message; `kind` names the message in errors. */
export class Cursor {
  /** @param {Uint8Array} bytes @param {number} pos @param {string} kind */
  constructor(bytes, pos, kind) {
    this.bytes = bytes;
    this.pos = pos;
    this.kind = kind;
  }

  /** @returns {never} */
  fail(fault, detail, offset = this.pos) {
    throw new WireError(fault, `${this.kind}: ${detail}`, { kind: this.kind, offset });
  }

  byte() {
    if (this.pos >= this.bytes.length) {
      this.fail(Fault.TRUNCATED, `truncated at ${this.bytes.length} bytes`);
    }
    return this.bytes[this.pos++];
  }

  /**
   * A canonical uvarint (at most 10 bytes, no trailing 0x00 group, < 2^64) as a BigInt.
   * @param {string} what the field, for errors
   */
  uvarint(what) {
    const start = this.pos;
    let b = this.byte();
    if (b < 0x80) return BigInt(b);
    // Number arithmetic for the first 7 groups (49 bits, exact in a double)
    let n = b & 0x7f;
    let scale = 0x80;
    for (let i = 1; i < 7; i++) {
      b = this.byte();
      n += (b & 0x7f) * scale;
      if (b < 0x80) {
        if (b === 0) this.fail(Fault.VARINT_NON_CANONICAL, `${what}: non-canonical varint`, start);
        return BigInt(n);
      }
      scale *= 0x80;
    }
    let v = BigInt(n);
    let shift = 49n;
    for (;;) {
      b = this.byte();
      v |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) break;
      shift += 7n;
      if (shift > 63n) this.fail(Fault.VARINT_TOO_LONG, `${what}: varint longer than 10 bytes`, start);
    }
    if (b === 0) this.fail(Fault.VARINT_NON_CANONICAL, `${what}: non-canonical varint`, start);
    if (v > U64_MAX) this.fail(Fault.VARINT_TOO_LONG, `${what}: varint above 2^64 - 1`, start);
    return v;
  }

  /** A canonical uvarint that must fit a Number (frame counts: bounded by the bytes left). */
  smallUvarint(what) {
    const v = this.uvarint(what);
    return v > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(v);
  }

  /** A zigzag-coded int64. */
  zigzag(what) {
    const z = this.uvarint(what);
    return z & 1n ? -(z >> 1n) - 1n : z >> 1n;
  }

  u64le(what) {
    if (this.pos + 8 > this.bytes.length) this.fail(Fault.TRUNCATED, `${what}: truncated fixed64`);
    const v = new DataView(this.bytes.buffer, this.bytes.byteOffset + this.pos, 8);
    this.pos += 8;
    return v.getBigUint64(0, true);
  }
}

/**
 * The record at the cursor (docs/wire.md, "Records"); WireError if it is malformed.
 * @param {Cursor} c
 * @returns {WireRecord}
 */
export function readRecord(c) {
  const start = c.pos;
  const iid = c.byte() | (c.byte() << 8);
  const flags = c.byte();
  if (flags & ~KNOWN_FLAGS || (flags & 3) === FLAG_NEW_EPOCH) {
    c.fail(Fault.UNKNOWN_FLAGS, `record at byte ${start}: unknown flags 0x${flags.toString(16).padStart(2, "0")}`, start);
  }
  const where = `record at byte ${start}`;
  const first = c.uvarint(`${where}, epoch`);
  let firstSeq;
  if (flags & FLAG_SEQ64) {
    firstSeq = c.u64le(`${where}, seq`);
    if (firstSeq < SEQ64_FROM) c.fail(Fault.SEQ64_BELOW_2_56, `${where}: fixed64 seq below 2^56`, start);
  } else {
    firstSeq = c.uvarint(`${where}, seq`);
    if (firstSeq >= SEQ64_FROM) c.fail(Fault.SEQ_NOT_SEQ64, `${where}: seq >= 2^56 must be fixed64`, start);
  }
  let epoch = first;
  let seq = firstSeq;
  const delta = (flags & FLAG_DELTA) !== 0;
  if (delta && flags & FLAG_NEW_EPOCH) {
    epoch = c.uvarint(`${where}, epoch`);
    seq = c.uvarint(`${where}, seq`);
    if (epoch === first) c.fail(Fault.SAME_EPOCH, `${where}: new-epoch flag with the same epoch`, start);
  } else if (delta) {
    seq = firstSeq + c.uvarint(`${where}, seq step`);
    if (seq > U64_MAX) c.fail(Fault.SEQ_OVERFLOW, `${where}: seq step overflows uint64`, start);
  }
  const bid = c.zigzag(`${where}, bid`);
  const ask = c.zigzag(`${where}, ask`);
  const last = c.zigzag(`${where}, last`);
  const size = c.uvarint(`${where}, size`);
  return {
    iid,
    epoch,
    seq,
    has_base: delta,
    base_epoch: delta ? first : 0n,
    base_seq: delta ? firstSeq : 0n,
    bid,
    ask,
    last,
    size,
  };
}

/**
 * Exactly one record (a chunk as the encoder produced it).
 * @param {Uint8Array} bytes
 * @returns {WireRecord}
 */
export function decodeRecord(bytes) {
  const c = new Cursor(bytes, 0, "record");
  const rec = readRecord(c);
  if (c.pos !== bytes.length) c.fail(Fault.TRAILING_BYTES, `${bytes.length - c.pos} trailing bytes after the record`);
  return rec;
}

/** `n` reduced modulo 2^64 into int64 range: how delta prices are added. */
export function wrapInt64(n) {
  return BigInt.asIntN(64, n);
}

/**
 * (bid, ask, last) after `record`, given the prices held at its base version. The caller has
 * already checked that it holds exactly (base_epoch, base_seq) (the gap rule); this only does
 * the int64 wrapping arithmetic docs/wire.md specifies for every client.
 * @param {{bid: bigint, ask: bigint, last: bigint} | null} base
 * @param {WireRecord} record
 * @returns {{bid: bigint, ask: bigint, last: bigint}}
 */
export function applyRecord(base, record) {
  if (!record.has_base) return { bid: record.bid, ask: record.ask, last: record.last };
  if (base === null) throw new RangeError(`iid ${record.iid}: a delta record needs its base prices`);
  return {
    bid: BigInt.asIntN(64, base.bid + record.bid),
    ask: BigInt.asIntN(64, base.ask + record.ask),
    last: BigInt.asIntN(64, base.last + record.last),
  };
}
