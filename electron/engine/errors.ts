// The one error type for expected failures: a stable code for programs, a message for people
// that says what to do. Bugs are not KiwiErrors; they are assertions that fail loudly.

export type KiwiErrorCode =
  | 'USAGE'
  | 'FILE_NOT_FOUND'
  | 'GGUF_INVALID'
  | 'GGUF_UNSUPPORTED'
  | 'MODEL_UNSUPPORTED'
  | 'TOKENIZER_UNSUPPORTED'
  | 'TEMPLATE_ERROR'
  | 'TOKEN_INVALID'
  | 'DOWNLOAD_FAILED'
  | 'CHECKSUM_MISMATCH'
  | 'TEST_MODEL_MISSING'
  | 'FLEET_INVALID'
  | 'PLAN_INSUFFICIENT_MEMORY'
  | 'PLAN_TOO_MANY_DEVICES'
  | 'BENCH_FAILED'
  | 'RUNTIME_SESSION_FAILED'
  | 'RUNTIME_RUN_FAILED'
  /** The worker thread running a stage died; its runs fail instead of hanging. */
  | 'RUNTIME_WORKER_FAILED'
  | 'RUNTIME_SESSION_CLOSED'
  | 'RANGE_OUT_OF_MODEL'
  | 'CONTEXT_EXCEEDED'
  | 'KV_POOL_EXHAUSTED'
  // the OpenAI-compatible HTTP API (electron/engine/server)
  | 'API_BAD_REQUEST'
  | 'API_INVALID_JSON'
  | 'API_BODY_TOO_LARGE'
  | 'API_MODEL_NOT_FOUND'
  | 'API_NOT_FOUND'
  | 'API_METHOD_NOT_ALLOWED'
  | 'API_UNAUTHORIZED'
  | 'API_QUEUE_FULL'
  | 'API_NOT_SERVING'
  | 'API_SHUTTING_DOWN'
  | 'API_CLIENT_CLOSED'
  // sessions, rendezvous and links (electron/engine/session, transport, rendezvous)
  | 'CHANNEL_AUTH_FAILED'
  | 'CHANNEL_COUNTER_EXHAUSTED'
  | 'CHANNEL_NOT_SEALED'
  | 'CHANNEL_OUT_OF_ORDER'
  | 'CHANNEL_RECORD_TOO_SHORT'
  | 'CHANNEL_REPLAY'
  | 'CONNECT_FAILED'
  | 'CONTROL_MALFORMED'
  | 'CONTROL_TOO_LARGE'
  | 'CONTROL_UNEXPECTED'
  | 'FRAME_BAD_FLAGS'
  | 'FRAME_BAD_MAGIC'
  | 'FRAME_BAD_VERSION'
  | 'FRAME_TOO_LARGE'
  | 'FRAME_TRAILING_BYTES'
  | 'FRAME_TRUNCATED'
  | 'FRAME_UNKNOWN_TYPE'
  | 'LINK_AUTH_FAILED'
  | 'LINK_BUSY'
  | 'LINK_CLOSED'
  | 'LINK_HANDSHAKE_FAILED'
  | 'LINK_OVERFLOW'
  | 'LINK_PEER_ERROR'
  | 'LINK_PROTOCOL_VIOLATION'
  | 'LINK_TIMEOUT'
  | 'LINK_UNKNOWN'
  | 'LISTEN_FAILED'
  | 'NAMEPLATE_BUSY'
  | 'NAMEPLATE_CLOSED'
  | 'NAMEPLATE_FULL'
  | 'NAMEPLATE_UNKNOWN'
  | 'PAKE_CONFIRMATION_FAILED'
  | 'PAKE_INVALID_MESSAGE'
  | 'PAKE_UNEXPECTED'
  | 'RELAY_CONGESTED'
  | 'RELAY_MALFORMED'
  | 'RELAY_TOO_LARGE'
  | 'RENDEZVOUS_ALREADY_ADMITTED'
  | 'RENDEZVOUS_ALREADY_BOUND'
  | 'RENDEZVOUS_CLOSED'
  | 'RENDEZVOUS_FULL'
  | 'RENDEZVOUS_MALFORMED'
  | 'RENDEZVOUS_MESSAGE_TOO_LARGE'
  | 'RENDEZVOUS_NOT_ADMITTED'
  | 'RENDEZVOUS_NOT_BOUND'
  | 'RENDEZVOUS_NOT_HOST'
  | 'RENDEZVOUS_NO_PEER'
  | 'RENDEZVOUS_RATE_LIMITED'
  | 'RENDEZVOUS_TOO_MANY_SESSIONS'
  | 'RENDEZVOUS_UNEXPECTED'
  | 'SESSION_CODE_INVALID'
  | 'SESSION_DISCONNECTED'
  | 'SESSION_ENDED'
  | 'SESSION_EVICTED'
  | 'SESSION_NOT_CONNECTED'
  | 'SESSION_NOT_FOUND_ON_LAN'
  | 'SESSION_REJECTED'
  /** Another process joined with this member's identity. */
  | 'SESSION_REPLACED'
  | 'SESSION_TIMEOUT'
  | 'SESSION_UNREACHABLE'
  // the distributed pipeline (electron/engine/pipeline, transport/tensor-frame.ts)
  | 'TENSOR_FRAME_INVALID'
  | 'COMPRESSION_INVALID'
  | 'RING_PROTOCOL'
  | 'RING_NOT_READY'
  | 'RING_BROKEN'
  /** A re-plan replaced the ring (its steps are recomputed on the next one). */
  | 'RING_REPLAN'
  /** The members left cannot hold the model and none returned in time. */
  | 'RING_UNAVAILABLE'
  | 'WEIGHTS_TRANSFER_FAILED'
  | 'CONTROL_UNAUTHORIZED'
  | 'CONTROL_BAD_REQUEST'
  | 'CONTROL_NOT_FOUND'
  | 'CONTROL_BUSY'
  | 'CONTROL_NOT_SERVING'
  | (string & {});

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
