// The one error the codec throws: a malformed message (docs/wire.md, "Message kinds": close the
// connection with 1002/1007 and reconnect). `fault` says what was wrong as a value a program
// can branch on; `message` says it for people, with the message kind and where.

/**
 * What was wrong with a malformed message.
 * @readonly
 * @enum {string}
 */
export const Fault = Object.freeze({
  EMPTY: "empty",
  KIND_ZERO: "kind_zero",
  TRUNCATED: "truncated",
  TRAILING_BYTES: "trailing_bytes",
  COUNT_EXCEEDS_BYTES: "count_exceeds_bytes",
  VARINT_TOO_LONG: "varint_too_long",
  VARINT_NON_CANONICAL: "varint_non_canonical",
  UNKNOWN_FLAGS: "unknown_flags",
  SEQ64_BELOW_2_56: "seq64_below_2_56",
  SEQ_NOT_SEQ64: "seq_at_or_above_2_56_not_seq64",
  SEQ_OVERFLOW: "seq_overflow",
  SAME_EPOCH: "new_epoch_same_epoch",
  DELTA_NOT_ALLOWED: "delta_not_allowed",
  WRONG_TYPE: "wrong_type",
  ARRAY_LENGTH: "array_length",
  OUT_OF_RANGE: "out_of_range",
  BAD_UTF8: "bad_utf8",
  BAD_KEY: "bad_key",
  NOT_BYTES: "not_bytes",
});

/** A message that is not valid by docs/wire.md. */
export class WireError extends Error {
  /**
   * @param {string} fault one of `Fault`
   * @param {string} message what and where, for people
   * @param {{kind?: string, offset?: number, field?: string}} [where]
   */
  constructor(fault, message, where = {}) {
    super(message);
    this.name = "WireError";
    /** @type {string} one of `Fault` */
    this.fault = fault;
    /** @type {string | undefined} the message kind ("FRAME", "HELLO", ...) */
    this.kind = where.kind;
    /** @type {number | undefined} the byte offset where reading failed */
    this.offset = where.offset;
    /** @type {string | undefined} the msgpack field path ("$[5][2][1]"), for msgpack bodies */
    this.field = where.field;
  }
}
