// The one error type for expected failures: a stable code for programs, a message for people
// that says what to do. Bugs are not KiwiErrors; they are assertions that fail loudly.

/**
 * Every code a KiwiError may carry, the one list: the union below is made from it, so a code not
 * written here does not compile, and a code that arrives over a wire (a peer's, the rendezvous',
 * a worker's) is checked against it with isKiwiErrorCode().
 */
export const KIWI_ERROR_CODES = [
  'USAGE',
  'FILE_NOT_FOUND',
  'GGUF_INVALID',
  'GGUF_UNSUPPORTED',
  'MODEL_UNSUPPORTED',
  'TOKENIZER_UNSUPPORTED',
  'TEMPLATE_ERROR',
  'TOKEN_INVALID',
  'DOWNLOAD_FAILED',
  'CHECKSUM_MISMATCH',
  'TEST_MODEL_MISSING',
  'FLEET_INVALID',
  'PLAN_INSUFFICIENT_MEMORY',
  'PLAN_TOO_MANY_DEVICES',
  /** A member's --memory-mb budget cannot hold the runtime, one layer of the session's model and its KV cache (the host says the figure). */
  'MEMORY_BUDGET_TOO_SMALL',
  'BENCH_FAILED',
  'RUNTIME_SESSION_FAILED',
  'RUNTIME_RUN_FAILED',
  /** The worker thread running a stage died; its runs fail instead of hanging. */
  'RUNTIME_WORKER_FAILED',
  'RUNTIME_SESSION_CLOSED',
  /** The execution provider asked for (--provider cuda|dml) is not installed or cannot run a session here. */
  'PROVIDER_UNAVAILABLE',
  'RANGE_OUT_OF_MODEL',
  'CONTEXT_EXCEEDED',
  'KV_POOL_EXHAUSTED',
  // the OpenAI-compatible HTTP API (electron/engine/server)
  'API_BAD_REQUEST',
  'API_INVALID_JSON',
  'API_BODY_TOO_LARGE',
  'API_MODEL_NOT_FOUND',
  'API_NOT_FOUND',
  'API_METHOD_NOT_ALLOWED',
  'API_UNAUTHORIZED',
  'API_QUEUE_FULL',
  'API_NOT_SERVING',
  'API_SHUTTING_DOWN',
  'API_CLIENT_CLOSED',
  /** Constrained decoding (runtime/constrained) reached a state no token can continue. */
  'GRAMMAR_DEAD_END',
  // HTTP guard of the API and control API (server/http-guard.ts): Host, Origin, Content-Type
  'HTTP_HOST_NOT_ALLOWED',
  'HTTP_ORIGIN_NOT_ALLOWED',
  'HTTP_UNSUPPORTED_MEDIA_TYPE',
  // sessions, rendezvous and links (electron/engine/session, transport, rendezvous)
  'CHANNEL_AUTH_FAILED',
  'CHANNEL_COUNTER_EXHAUSTED',
  'CHANNEL_NOT_SEALED',
  'CHANNEL_OUT_OF_ORDER',
  'CHANNEL_RECORD_TOO_SHORT',
  'CHANNEL_REPLAY',
  'CONNECT_FAILED',
  'CONTROL_MALFORMED',
  'CONTROL_TOO_LARGE',
  'CONTROL_UNEXPECTED',
  'FRAME_BAD_FLAGS',
  'FRAME_BAD_MAGIC',
  'FRAME_BAD_VERSION',
  'FRAME_TOO_LARGE',
  'FRAME_TRAILING_BYTES',
  'FRAME_TRUNCATED',
  'FRAME_UNKNOWN_TYPE',
  'ICE_FAILED',
  'ICE_UNAVAILABLE',
  'STUN_MALFORMED',
  'LINK_AUTH_FAILED',
  'LINK_BUSY',
  'LINK_CLOSED',
  'LINK_HANDSHAKE_FAILED',
  'LINK_OVERFLOW',
  'LINK_PEER_ERROR',
  'LINK_PROTOCOL_VIOLATION',
  'LINK_TIMEOUT',
  'LINK_UNKNOWN',
  'LISTEN_FAILED',
  'NAMEPLATE_BUSY',
  'NAMEPLATE_CLOSED',
  'NAMEPLATE_FULL',
  'NAMEPLATE_UNKNOWN',
  'PAKE_CONFIRMATION_FAILED',
  'PAKE_INVALID_MESSAGE',
  'PAKE_UNEXPECTED',
  'RELAY_CONGESTED',
  'RELAY_MALFORMED',
  'RELAY_TOO_LARGE',
  'RENDEZVOUS_ALREADY_ADMITTED',
  'RENDEZVOUS_ALREADY_BOUND',
  'RENDEZVOUS_CLOSED',
  'RENDEZVOUS_FULL',
  'RENDEZVOUS_MALFORMED',
  'RENDEZVOUS_MESSAGE_TOO_LARGE',
  'RENDEZVOUS_NOT_ADMITTED',
  'RENDEZVOUS_NOT_BOUND',
  'RENDEZVOUS_NOT_HOST',
  'RENDEZVOUS_NO_PEER',
  'RENDEZVOUS_RATE_LIMITED',
  'RENDEZVOUS_TOO_MANY_SESSIONS',
  'RENDEZVOUS_UNEXPECTED',
  'SESSION_CODE_INVALID',
  'SESSION_DISCONNECTED',
  'SESSION_ENDED',
  'SESSION_EVICTED',
  'SESSION_NOT_CONNECTED',
  'SESSION_NOT_FOUND_ON_LAN',
  'SESSION_REJECTED',
  /** Another process joined with this member's identity. */
  'SESSION_REPLACED',
  'SESSION_TIMEOUT',
  'SESSION_UNREACHABLE',
  /** A hello whose key does not own its member id, or whose signature over the PAKE transcript fails. */
  'IDENTITY_INVALID',
  'IDENTITY_FILE_INVALID',
  /** The host answers no more key exchanges with the code (too many wrong ones); a new code is needed. */
  'PAKE_LOCKED',
  'MEMBER_NAME_INVALID',
  /** `approve NAME` matches more than one member: name one by fingerprint or id. */
  'MEMBER_AMBIGUOUS',
  'MEMBER_NOT_FOUND',
  // the distributed pipeline (electron/engine/pipeline, transport/tensor-frame.ts)
  'TENSOR_FRAME_INVALID',
  'COMPRESSION_INVALID',
  'RING_PROTOCOL',
  'RING_NOT_READY',
  'RING_BROKEN',
  /** A re-plan replaced the ring (its steps are recomputed on the next one). */
  'RING_REPLAN',
  /** The members left cannot hold the model and none returned in time. */
  'RING_UNAVAILABLE',
  /** A member sent ring data no honest Kiwi sends (wrong shape, size, encoding): it is planned out. */
  'RING_PEER_MALFORMED',
  /** A member's activations hold NaN or infinity (a precision problem, e.g. fp16 overflow): the request fails, the member stays. */
  'RING_PEER_NUMERIC',
  /** A member's stage could not run a step. */
  'RING_STAGE_FAILED',
  /** A frame uses an encoding or compression its link did not agree on. */
  'WIRE_NOT_AGREED',
  /** The zstd codec failed (never a peer's input: that is COMPRESSION_INVALID). */
  'COMPRESSION_FAILED',
  'WEIGHTS_TRANSFER_FAILED',
  'CONTROL_UNAUTHORIZED',
  'CONTROL_BAD_REQUEST',
  'CONTROL_NOT_FOUND',
  'CONTROL_BUSY',
  'CONTROL_NOT_SERVING',
] as const;

export type KiwiErrorCode = (typeof KIWI_ERROR_CODES)[number];

const KNOWN_CODES: ReadonlySet<string> = new Set(KIWI_ERROR_CODES);

/** Whether `code` (e.g. read off a wire) is one of this build's codes. */
export function isKiwiErrorCode(code: unknown): code is KiwiErrorCode {
  return typeof code === 'string' && KNOWN_CODES.has(code);
}

/** A code read off a wire if this build knows it, else `fallback` (a newer peer's code is not passed on as ours). */
export function knownCodeOr(code: string, fallback: KiwiErrorCode): KiwiErrorCode {
  return isKiwiErrorCode(code) ? code : fallback;
}

export class KiwiError extends Error {
  readonly code: KiwiErrorCode;
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: KiwiErrorCode, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = 'KiwiError';
    this.code = code;
    this.details = details;
  }

  toJSON(): { code: string; message: string } & Record<string, unknown> {
    return { code: this.code, message: this.message, ...this.details };
  }
}

export function isKiwiError(err: unknown, code?: KiwiErrorCode): err is KiwiError {
  return err instanceof KiwiError && (code === undefined || err.code === code);
}
