// The contract between the router (openai-api.ts) and the endpoints (endpoints/*.ts): what every
// endpoint is given, what a route needs checked before its handler runs, and the one way a POST
// endpoint with a JSON body is declared (refusals by name, then its schema, then its handler).
import type { z } from 'zod';
import type { CompletionBackend, PreparedPrompt, PromptInput } from '../completion/completion-backend.js';
import { parseRequest, refuseUnsupported, type ApiRequest } from './api-request.js';
import type { ApiResponse } from './api-response.js';
import type { Jobs } from './generation-job.js';
import type { RequestQueue } from './request-queue.js';

/** What one request measured, for --log-requests. */
export interface RequestLog {
  tokens: number;
}

/** The API's parts, shared by every request. */
export interface EndpointContext {
  backend: CompletionBackend;
  /** Tokenizes where the backend can without holding the event loop (long prompts go to a worker thread). */
  prepare(p: PromptInput): Promise<PreparedPrompt>;
  queue: RequestQueue;
  jobs: Jobs;
  /** Unexpected failures (bugs) of a stream whose headers are sent. */
  onError?: ((err: unknown) => void) | undefined;
}

/** One request as an endpoint sees it. */
export interface EndpointCall {
  req: ApiRequest;
  log: RequestLog;
}

export interface Endpoint {
  methods: readonly string[];
  /** The path it answers (and names in the 404's list of endpoints). */
  path: string;
  /** Paths it answers besides `path` itself (e.g. /v1/models/{id}). */
  matchesBelow?: boolean;
  /**
   * What the router checks first: 'nothing' (GET /health), 'key' (the API key), 'body' (the API key,
   * a serving model, and a JSON body, read and handed to `handle`).
   */
  needs: 'nothing' | 'key' | 'body';
  handle(ctx: EndpointContext, call: EndpointCall, body: unknown): ApiResponse | Promise<ApiResponse>;
}

/**
 * POST `path` with a JSON body: the parameters `refuse` names are refused first (a 400 naming the
 * first), then the body is checked against `schema`, and `run` gets it typed.
 */
export function jsonEndpoint<T>(
  path: string,
  schema: z.ZodType<T>,
  run: (ctx: EndpointContext, call: EndpointCall, body: T) => ApiResponse | Promise<ApiResponse>,
  refuse?: (body: unknown) => { param: string; message: string } | undefined,
): Endpoint {
  return {
    methods: ['POST'],
    path,
    needs: 'body',
    handle: (ctx, call, body) => {
      if (refuse !== undefined) refuseUnsupported(refuse(body));
      return run(ctx, call, parseRequest(schema, body));
    },
  };
}
