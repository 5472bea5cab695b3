// One table from error codes to HTTP status and OpenAI error type (llama.cpp server's pattern), and
// the OpenAI-shaped error body every /v1 failure answers with. Pure: values in, values out.
import { KiwiError } from '../errors.js';
import type { KiwiErrorCode } from '../errors.js';

export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export type OpenAiErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'server_error'
  | 'unavailable_error';

interface HttpMapping {
  status: number;
  type: OpenAiErrorType;
  /** The `code` field of OpenAI's error body (their spelling where they have one). */
  code: string;
}

const TABLE: Partial<Record<KiwiErrorCode, HttpMapping>> = {
  API_BAD_REQUEST: { status: 400, type: 'invalid_request_error', code: 'invalid_request' },
  API_INVALID_JSON: { status: 400, type: 'invalid_request_error', code: 'invalid_json' },
  API_BODY_TOO_LARGE: { status: 413, type: 'invalid_request_error', code: 'request_too_large' },
  API_MODEL_NOT_FOUND: { status: 404, type: 'invalid_request_error', code: 'model_not_found' },
  API_NOT_FOUND: { status: 404, type: 'not_found_error', code: 'not_found' },
  API_METHOD_NOT_ALLOWED: { status: 405, type: 'invalid_request_error', code: 'method_not_allowed' },
  API_UNAUTHORIZED: { status: 401, type: 'authentication_error', code: 'invalid_api_key' },
  API_QUEUE_FULL: { status: 429, type: 'rate_limit_error', code: 'rate_limit_exceeded' },
  API_NOT_SERVING: { status: 503, type: 'unavailable_error', code: 'model_not_ready' },
  API_SHUTTING_DOWN: { status: 503, type: 'unavailable_error', code: 'server_shutting_down' },
  // The ring lost members and the rest cannot hold the model: retry once someone rejoins.
  RING_UNAVAILABLE: { status: 503, type: 'unavailable_error', code: 'ring_unavailable' },
  RING_BROKEN: { status: 503, type: 'unavailable_error', code: 'ring_broken' },
  RING_REPLAN: { status: 503, type: 'unavailable_error', code: 'ring_broken' },
  // A member's fault, not the client's (nginx's 502: a bad answer from upstream): malformed ring
  // data (the member is planned out), NaN/Inf activations (a precision problem), a stage that failed.
  RING_PEER_MALFORMED: { status: 502, type: 'server_error', code: 'ring_member_malformed' },
  RING_PEER_NUMERIC: { status: 502, type: 'server_error', code: 'ring_member_numeric' },
  RING_STAGE_FAILED: { status: 502, type: 'server_error', code: 'ring_stage_failed' },
  // nginx's 499: nobody reads it, but logs and tests see a cancellation, not a failure.
  API_CLIENT_CLOSED: { status: 499, type: 'invalid_request_error', code: 'client_closed_request' },
  // Runtime failures caused by what the request asked for.
  CONTEXT_EXCEEDED: { status: 400, type: 'invalid_request_error', code: 'context_length_exceeded' },
  KV_POOL_EXHAUSTED: { status: 400, type: 'invalid_request_error', code: 'context_length_exceeded' },
  TEMPLATE_ERROR: { status: 400, type: 'invalid_request_error', code: 'template_error' },
  TOKEN_INVALID: { status: 400, type: 'invalid_request_error', code: 'invalid_token' },
  USAGE: { status: 400, type: 'invalid_request_error', code: 'invalid_request' },
};

const INTERNAL: HttpMapping = { status: 500, type: 'server_error', code: 'internal_error' };

export function httpMapping(code: KiwiErrorCode): HttpMapping {
  return TABLE[code] ?? INTERNAL;
}

/** Status and body for a failure; anything that is not a KiwiError is a 500 that leaks nothing (the caller logs it). */
export function toOpenAiError(err: unknown): { status: number; body: OpenAiErrorBody } {
  if (err instanceof KiwiError) {
    const { status, type, code } = httpMapping(err.code);
    const param = typeof err.details.param === 'string' ? err.details.param : null;
    return { status, body: { error: { message: err.message, type, param, code } } };
  }
  return { status: INTERNAL.status, body: { error: { message: 'Internal server error; see the server log.', type: INTERNAL.type, param: null, code: INTERNAL.code } } };
}
