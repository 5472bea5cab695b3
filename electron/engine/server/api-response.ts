// What the OpenAI API answers, before any socket sees it: a JSON body or a stream of server-sent
// events, and every failure as an OpenAI error body with its status from openai-errors.ts (plus the
// Retry-After and WWW-Authenticate headers the status calls for). Pure: values in, values out.
import { KiwiError, isKiwiError } from '../errors.js';
import type { BackendStatus } from '../completion/completion-backend.js';
import { toOpenAiError } from './openai-errors.js';

export type ApiResponse =
  | { status: number; headers: Record<string, string>; body: string }
  /** Server-sent events: each string is one or more complete `data: ...\n\n` events. */
  | { status: number; headers: Record<string, string>; stream: AsyncIterable<string> };

const JSON_HEADERS = { 'content-type': 'application/json; charset=utf-8' };
const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' };

export function json(status: number, value: unknown, headers: Record<string, string> = {}): ApiResponse {
  return { status, headers: { ...JSON_HEADERS, ...headers }, body: JSON.stringify(value) };
}

/** A 200 whose body is `events`, sent as they come. */
export function sse(events: AsyncIterable<string>): ApiResponse {
  return { status: 200, headers: { ...SSE_HEADERS }, stream: events };
}

/** One SSE `data:` event. */
export function sseEvent(value: unknown): string {
  return `data: ${JSON.stringify(value)}\n\n`;
}

export interface ErrorResponseOptions {
  /** The backend's state now: a 503 while it starts tells the client when to retry. */
  backendStatus: () => BackendStatus;
  /** Seconds a 429 (or a 503 while starting) tells the client to wait. Default 1. */
  retryAfterS?: number | undefined;
  /** Unexpected failures (bugs), for the log. Aborts and KiwiErrors are not reported. */
  onError?: ((err: unknown) => void) | undefined;
}

/** The OpenAI error answer for a failure; a cancelled request is a 499, anything not a KiwiError a 500 that leaks nothing. */
export function errorResponse(err: unknown, opts: ErrorResponseOptions): ApiResponse {
  if (isAbort(err)) err = new KiwiError('API_CLIENT_CLOSED', 'the client closed the request');
  if (!isKiwiError(err)) opts.onError?.(err);
  const { status, body } = toOpenAiError(err);
  const headers: Record<string, string> = {};
  if (status === 429 || (isKiwiError(err, 'API_NOT_SERVING') && opts.backendStatus() === 'starting')) headers['retry-after'] = String(opts.retryAfterS ?? 1);
  if (status === 401) headers['www-authenticate'] = 'Bearer';
  return json(status, body, headers);
}

/** An AbortSignal's default reason (a DOMException named AbortError): a cancelled request, not a failure. */
export function isAbort(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { name?: unknown }).name === 'AbortError';
}
