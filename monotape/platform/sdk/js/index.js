// The monotape terminal SDK for browsers and Node: plain ES modules, no build step, no
// dependencies (docs/terminal.md). One import for an application:
//
//   import { TerminalClient, formatPrice } from "/sdk/index.js";
//
// encoder.js (server -> client encoders) is not re-exported: tests and fake servers import it.

export { Fault, WireError } from "./errors.js";
export { CloseCode, ErrorCode, Kind, PROTOCOL_VERSION, decodeMessage, errorCodeName } from "./decoder.js";
export { applyRecord, decodeRecord, wrapInt64 } from "./records.js";
export {
  MAX_HZ,
  MAX_KEYS,
  MAX_PRIORITY_KEYS,
  MAX_REQUEST_BYTES,
  RequestError,
  encodePriority,
  encodeRate,
  encodeRefresh,
  encodeReport,
  encodeRequest,
  encodeSubscribe,
  encodeUnsubscribe,
} from "./requests.js";
export { Source, TerminalView, VersionGuard, ViewStats, Verdict, compareVersions, formatPrice } from "./view.js";
export { STALE_AFTER_MS, Staleness } from "./staleness.js";
export { ReconnectPolicy, hintFromReason, nextDelay, parseRetryAfter } from "./reconnect.js";
export { KeysRefused, NotConnectedError, ServerError } from "./answers.js";
export { GlassAudit, REFRESH_RETRY_MS, REPORT_INTERVAL_MS, TokenRefresh, refreshDelayMs, tokenExpiry } from "./upkeep.js";
export {
  CLOSE_GAVE_UP,
  CLOSE_PROTOCOL_ERROR,
  CLOSE_UNAUTHORIZED,
  ClientStats,
  PROTOCOLS,
  STATES,
  SUBPROTOCOL,
  TerminalClient,
} from "./client.js";
