// Real bytes for the view and client tests: every message goes through the encoder and the
// decoder, as it would off a socket.

import { decodeMessage } from "../../../monotape/platform/sdk/js/decoder.js";
import * as enc from "../../../monotape/platform/sdk/js/encoder.js";

export const KEYS = Array.from({ length: 60 }, (_, i) => `XNAS:S${i}`);

export function helloBytes(keys = KEYS, { iidOf = (i) => i, protocol = 2 } = {}) {
  return enc.encodeHello({
    protocol,
    server_id: "t",
    frame_ms: 40,
    max_subscriptions: 256,
    max_priority: 8,
    instruments: keys.map((key, i) => ({ iid: iidOf(i), key, price_decimals: 2, tick_size: 1 })),
  });
}

/** A tick: iid, (epoch, seq), prices around `bid`. */
export const tick = (iid, seq, bid = 100, epoch = 1) => ({ iid, epoch, seq, bid, ask: bid + 1, last: bid, size: 10 });

export const full = (t) => enc.encodeFullRecord(t);
export const delta = (base, t) => enc.encodeDeltaRecord(base, t);
export const frame = (n, chunks) => enc.encodeFrame(n, chunks);
export const snapshot = (n, chunks) => enc.encodeSnapshot(n, chunks);
export const priority = (t) => enc.encodePriority(enc.encodeFullRecord(t));
export const decode = decodeMessage;
export { enc };

/** A clock tests move by hand (ms). */
export class FakeClock {
  constructor(now = 1000) {
    this.now = now;
    this.read = () => this.now;
  }
}
