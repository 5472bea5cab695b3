// The OpenAI-compatible API as a function from request to response, knowing nothing of sockets
// (http-server.ts adapts it to node:http; tests call it in-process). Routes: POST /v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/responses, GET /v1/models[/{id}], GET /health, and
// llama-server's POST /tokenize, /detokenize, /apply-template, each in endpoints/. This file is the
// router: it finds the endpoint, runs the checks the endpoint needs (api-request.ts) and turns every
// failure into an OpenAI error body (api-response.ts); nothing reaches the backend before it is
// validated, and a known parameter Kiwi cannot honour is refused by name, never ignored.
import { KiwiError } from '../errors.js';
import type { CompletionBackend, PreparedPrompt, PromptInput } from '../completion/completion-backend.js';
import type { Endpoint, EndpointContext, RequestLog } from './api-endpoint.js';
import { checkApiKey, checkServing, readJson, type ApiRequest } from './api-request.js';
import { errorResponse, type ApiResponse } from './api-response.js';
import { secretDigest } from './bearer-secret.js';
import { chatCompletionsEndpoint } from './endpoints/chat-completions.js';
import { completionsEndpoint } from './endpoints/completions.js';
import { embeddingsEndpoint } from './endpoints/embeddings.js';
import { applyTemplateEndpoint, detokenizeEndpoint, tokenizeEndpoint } from './endpoints/llama-utilities.js';
import { healthEndpoint, modelsEndpoint } from './endpoints/models.js';
import { responsesEndpoint } from './endpoints/responses.js';
import { createJobs } from './generation-job.js';
import { RequestQueue } from './request-queue.js';

export type { ApiRequest } from './api-request.js';
export type { ApiResponse } from './api-response.js';
export type { RequestLog } from './api-endpoint.js';

export interface OpenAiApiOptions {
  backend: CompletionBackend;
  /** When set, every /v1 request needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Largest request body; bigger ones are refused with 413 while reading. Default 8 MiB. */
  maxBodyBytes?: number;
  /** Generations running at once. Default 8. */
  maxActive?: number;
  /** Requests waiting for a slot before 429. Default 64. */
  maxQueue?: number;
  /** Seconds a 429 tells the client to wait. Default 1. */
  retryAfterS?: number;
  /** Unexpected failures (bugs), for the log. Aborts and KiwiErrors are not reported. */
  onError?: (err: unknown) => void;
  /** Called once per request when its response is done (streams: when the stream ended), for --log-requests. */
  onRequestDone?: (entry: RequestLogEntry) => void;
}

export interface RequestLogEntry {
  method: string;
  path: string;
  status: number;
  ms: number;
  /** Tokens generated (completions) or embedded (embeddings); 0 for the rest. */
  tokens: number;
}

/** One line of `kiwi serve --log-requests`. */
export function formatRequestLog(e: RequestLogEntry): string {
  return `${e.method} ${e.path} ${e.status} ${e.ms.toFixed(0)}ms ${e.tokens} tokens`;
}

export interface OpenAiApi {
  handle(req: ApiRequest): Promise<ApiResponse>;
  readonly queue: RequestQueue;
}

const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;

/** The routes, in the order the 404 lists them. */
const ENDPOINTS: readonly Endpoint[] = [
  chatCompletionsEndpoint,
  completionsEndpoint,
  embeddingsEndpoint,
  responsesEndpoint,
  modelsEndpoint,
  healthEndpoint,
  tokenizeEndpoint,
  detokenizeEndpoint,
  applyTemplateEndpoint,
];
const ENDPOINT_LIST = ENDPOINTS.map((e) => `${e.methods.join('/')} ${e.path}`).join(', ');

function matches(e: Endpoint, path: string): boolean {
  return path === e.path || (e.matchesBelow === true && path.startsWith(`${e.path}/`));
}

export function createOpenAiApi(opts: OpenAiApiOptions): OpenAiApi {
  const { backend } = opts;
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const queue = new RequestQueue(opts.maxActive ?? 8, opts.maxQueue ?? 64, () => backend.waitingForAdmission?.() ?? 0);
  const keyDigest = opts.apiKey !== undefined ? secretDigest(opts.apiKey) : undefined;
  const ctx: EndpointContext = {
    backend,
    prepare: async (p: PromptInput): Promise<PreparedPrompt> => (backend.prepareAsync !== undefined ? backend.prepareAsync(p) : backend.prepare(p)),
    queue,
    jobs: createJobs(backend, queue),
    onError: opts.onError,
  };
  const error = (err: unknown): ApiResponse => errorResponse(err, { backendStatus: () => backend.status(), retryAfterS: opts.retryAfterS, onError: opts.onError });

  async function handle(req: ApiRequest): Promise<ApiResponse> {
    if (opts.onRequestDone === undefined) return dispatch(req, { tokens: 0 });
    const started = performance.now();
    const log: RequestLog = { tokens: 0 };
    const res = await dispatch(req, log);
    const done = (): void => opts.onRequestDone?.({ method: req.method, path: req.path, status: res.status, ms: performance.now() - started, tokens: log.tokens });
    if ('body' in res) {
      done();
      return res;
    }
    const inner = res.stream;
    async function* logged(): AsyncGenerator<string> {
      try {
        yield* inner;
      } finally {
        done();
      }
    }
    return { ...res, stream: logged() };
  }

  async function dispatch(req: ApiRequest, log: RequestLog): Promise<ApiResponse> {
    try {
      const endpoint = ENDPOINTS.find((e) => matches(e, req.path));
      if (endpoint === undefined) throw new KiwiError('API_NOT_FOUND', `no endpoint ${req.method} ${req.path}; this server has ${ENDPOINT_LIST}`);
      if (!endpoint.methods.includes(req.method)) {
        const res = error(new KiwiError('API_METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${req.path}; use ${endpoint.methods.join(', ')}`));
        res.headers.allow = endpoint.methods.join(', ');
        return res;
      }
      if (endpoint.needs !== 'nothing') checkApiKey(req, keyDigest);
      let body: unknown;
      if (endpoint.needs === 'body') {
        checkServing(backend);
        body = await readJson(req, maxBodyBytes);
      }
      return await endpoint.handle(ctx, { req, log }, body);
    } catch (err) {
      return error(err);
    }
  }

  return { handle, queue };
}
