// The OpenAI-compatible API as a function from request to response, knowing nothing of sockets
// (http-server.ts adapts it to node:http; tests call it in-process). Routes: POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models[/{id}], GET /health. Every failure is an OpenAI error body
// with the status from openai-errors.ts; nothing reaches the backend before it is validated.
import { createHash, randomBytes, randomInt, timingSafeEqual } from 'node:crypto';
import type { z } from 'zod';
import { KiwiError, isKiwiError } from '../errors.js';
import { DEFAULT_SAMPLING } from '../runtime/sampling.js';
import type { SamplingOptions } from '../runtime/sampling.js';
import type { CompletionBackend, FinishReason, GenerationEvent, PreparedPrompt, PromptInput } from './completion-backend.js';
import { toOpenAiError } from './openai-errors.js';
import { chatCompletionRequestSchema, completionRequestSchema, describeZodError, messageText, toSamplingRequest } from './openai-schema.js';
import type { SamplingRequest } from './openai-schema.js';
import { RequestQueue } from './request-queue.js';
import { StopSequenceFilter } from './stop-sequences.js';

export interface ApiRequest {
  method: string;
  /** Path without the query, e.g. `/v1/models`. */
  path: string;
  /** Lower-case header names. */
  headers: Readonly<Record<string, string | undefined>>;
  body: AsyncIterable<Uint8Array>;
  /** Aborted when the client goes away or the server shuts down: the request's work stops. */
  signal: AbortSignal;
}

export type ApiResponse =
  | { status: number; headers: Record<string, string>; body: string }
  /** Server-sent events: each string is one or more complete `data: ...\n\n` events. */
  | { status: number; headers: Record<string, string>; stream: AsyncIterable<string> };

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
}

export interface OpenAiApi {
  handle(req: ApiRequest): Promise<ApiResponse>;
  readonly queue: RequestQueue;
}

const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;
/** How far back presence/frequency/repeat penalties look (llama.cpp's repeat_last_n default). */
const PENALTY_WINDOW = 64;

const JSON_HEADERS = { 'content-type': 'application/json; charset=utf-8' };
const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' };

type Route = { methods: readonly string[]; match: (path: string) => boolean };
const ROUTES: readonly Route[] = [
  { methods: ['POST'], match: (p) => p === '/v1/chat/completions' },
  { methods: ['POST'], match: (p) => p === '/v1/completions' },
  { methods: ['GET'], match: (p) => p === '/v1/models' || p.startsWith('/v1/models/') },
  { methods: ['GET'], match: (p) => p === '/health' },
];

export function createOpenAiApi(opts: OpenAiApiOptions): OpenAiApi {
  const { backend } = opts;
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const queue = new RequestQueue(opts.maxActive ?? 8, opts.maxQueue ?? 64, () => backend.waitingForAdmission?.() ?? 0);
  const keyDigest = opts.apiKey !== undefined ? sha256(opts.apiKey) : undefined;

  function json(status: number, value: unknown, headers: Record<string, string> = {}): ApiResponse {
    return { status, headers: { ...JSON_HEADERS, ...headers }, body: JSON.stringify(value) };
  }

  function error(err: unknown): ApiResponse {
    if (isAbort(err)) err = new KiwiError('API_CLIENT_CLOSED', 'the client closed the request');
    if (!isKiwiError(err)) opts.onError?.(err);
    const { status, body } = toOpenAiError(err);
    const headers: Record<string, string> = {};
    if (status === 429 || (isKiwiError(err, 'API_NOT_SERVING') && backend.status() === 'starting')) headers['retry-after'] = String(opts.retryAfterS ?? 1);
    if (status === 401) headers['www-authenticate'] = 'Bearer';
    return json(status, body, headers);
  }

  function checkAuth(req: ApiRequest): void {
    if (keyDigest === undefined) return;
    const m = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
    // Compare digests so the comparison takes the same time whatever the key's length.
    if (m === null || !timingSafeEqual(sha256(m[1]!.trim()), keyDigest)) {
      throw new KiwiError('API_UNAUTHORIZED', m === null ? 'missing API key: send the header Authorization: Bearer <key>' : 'incorrect API key');
    }
  }

  function checkServing(): void {
    const status = backend.status();
    if (status !== 'serving') {
      throw new KiwiError('API_NOT_SERVING', status === 'starting' ? 'the model is still loading; retry in a moment' : 'the model is not available right now; retry later');
    }
  }

  function checkModel(model: string | undefined): void {
    if (model !== undefined && model !== backend.modelId) {
      throw new KiwiError('API_MODEL_NOT_FOUND', `the model '${model}' does not exist; this server serves '${backend.modelId}'`, { param: 'model' });
    }
  }

  async function handle(req: ApiRequest): Promise<ApiResponse> {
    try {
      const route = ROUTES.find((r) => r.match(req.path));
      if (route === undefined) throw new KiwiError('API_NOT_FOUND', `no route ${req.method} ${req.path}; the API is under /v1`);
      if (!route.methods.includes(req.method)) {
        const res = error(new KiwiError('API_METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${req.path}; use ${route.methods.join(', ')}`));
        res.headers.allow = route.methods.join(', ');
        return res;
      }
      if (req.path === '/health') {
        const status = backend.status();
        return json(status === 'serving' ? 200 : 503, { status, ...queue.load(), ...backend.health?.() });
      }
      checkAuth(req);
      if (req.path === '/v1/models') {
        return json(200, { object: 'list', data: backend.status() === 'serving' ? [modelObject()] : [] });
      }
      if (req.path.startsWith('/v1/models/')) {
        const id = safeDecode(req.path.slice('/v1/models/'.length));
        if (backend.status() !== 'serving' || id !== backend.modelId) {
          throw new KiwiError('API_MODEL_NOT_FOUND', `the model '${id}' does not exist; this server serves '${backend.modelId}'`, { param: 'model' });
        }
        return json(200, modelObject());
      }
      checkServing();
      const body = await readJson(req, maxBodyBytes);
      if (req.path === '/v1/chat/completions') return await chatCompletion(req, parse(chatCompletionRequestSchema, body));
      return await completion(req, parse(completionRequestSchema, body));
    } catch (err) {
      return error(err);
    }
  }

  function modelObject() {
    return { id: backend.modelId, object: 'model', created: backend.createdAt, owned_by: 'kiwi' };
  }

  async function chatCompletion(req: ApiRequest, body: z.infer<typeof chatCompletionRequestSchema>): Promise<ApiResponse> {
    checkModel(body.model);
    const prompt = backend.prepare({ kind: 'chat', messages: body.messages.map((m) => ({ role: m.role, content: messageText(m) })) });
    const s = toSamplingRequest(body);
    const run = await start(req, prompt, s, body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens');
    const id = `chatcmpl-${randomBytes(12).toString('base64url')}`;
    const created = Math.floor(Date.now() / 1000);
    const model = backend.modelId;
    if (!s.stream) {
      const r = await collect(run);
      return json(200, {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: r.text }, logprobs: null, finish_reason: r.finishReason }],
        usage: usage(prompt, r.completionTokens),
      });
    }
    const chunk = (delta: Record<string, string>, finishReason: FinishReason | null): string =>
      event({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }], ...(s.includeUsage ? { usage: null } : {}) });
    return stream(run, {
      first: () => chunk({ role: 'assistant', content: '' }, null),
      text: (text) => chunk({ content: text }, null),
      last: (finishReason) => chunk({}, finishReason),
      usage: (completionTokens) => event({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: usage(prompt, completionTokens) }),
    });
  }

  async function completion(req: ApiRequest, body: z.infer<typeof completionRequestSchema>): Promise<ApiResponse> {
    checkModel(body.model);
    const p = body.prompt;
    const input: PromptInput = typeof p === 'string' ? { kind: 'text', text: p } : typeof p[0] === 'string' ? { kind: 'text', text: p[0] } : { kind: 'ids', ids: p as number[] };
    const prompt = backend.prepare(input);
    const s = toSamplingRequest(body);
    const run = await start(req, prompt, s, 'max_tokens');
    const id = `cmpl-${randomBytes(12).toString('base64url')}`;
    const created = Math.floor(Date.now() / 1000);
    const model = backend.modelId;
    const echo = body.echo === true ? prompt.text : '';
    if (!s.stream) {
      const r = await collect(run);
      return json(200, {
        id,
        object: 'text_completion',
        created,
        model,
        choices: [{ index: 0, text: echo + r.text, logprobs: null, finish_reason: r.finishReason }],
        usage: usage(prompt, r.completionTokens),
      });
    }
    const chunk = (text: string, finishReason: FinishReason | null): string =>
      event({ id, object: 'text_completion', created, model, choices: [{ index: 0, text, logprobs: null, finish_reason: finishReason }], ...(s.includeUsage ? { usage: null } : {}) });
    return stream(run, {
      first: () => (echo !== '' ? chunk(echo, null) : ''),
      text: (text) => chunk(text, null),
      last: (finishReason) => chunk('', finishReason),
      usage: (completionTokens) => event({ id, object: 'text_completion', created, model, choices: [], usage: usage(prompt, completionTokens) }),
    });
  }

  /** Checks the request's length against the context, waits for a slot, and starts generating. */
  async function start(req: ApiRequest, prompt: PreparedPrompt, s: SamplingRequest, maxParam: string): Promise<Run> {
    const context = backend.contextTokens;
    if (prompt.ids.length >= context || (s.maxTokens !== undefined && prompt.ids.length + s.maxTokens > context)) {
      throw new KiwiError(
        'CONTEXT_EXCEEDED',
        `this model's context holds ${context} tokens, but the request needs ${prompt.ids.length} for the prompt` +
          (s.maxTokens !== undefined ? ` plus ${s.maxTokens} for the completion` : ' and at least one for the completion') +
          `; shorten the prompt${s.maxTokens !== undefined ? ` or lower ${maxParam}` : ''}`,
        { param: s.maxTokens !== undefined && prompt.ids.length < context ? maxParam : null },
      );
    }
    const acquired = await queue.acquire(req.signal);
    // The slot is freed when the response is done, or when the request is cancelled even if its
    // stream was never read (an unstarted async generator runs no finally).
    const onAbort = (): void => release();
    const release = (): void => {
      req.signal.removeEventListener('abort', onAbort);
      acquired();
    };
    req.signal.addEventListener('abort', onAbort, { once: true });
    const sampling: SamplingOptions = {
      ...DEFAULT_SAMPLING,
      temperature: s.temperature,
      topK: s.topK,
      topP: s.topP,
      minP: s.minP,
      repetitionPenalty: s.repeatPenalty,
      presencePenalty: s.presencePenalty,
      frequencyPenalty: s.frequencyPenalty,
      penaltyWindow: PENALTY_WINDOW,
      seed: s.seed ?? randomInt(2 ** 31),
    };
    const events = backend.generate({ promptIds: prompt.ids, maxTokens: s.maxTokens ?? context - prompt.ids.length, sampling, stop: s.stop }, req.signal);
    return { events, stop: s.stop, includeUsage: s.includeUsage, release };
  }

  /** Runs a generation to the end: text without the stop sequence, finish reason, token count. */
  async function collect(run: Run): Promise<{ text: string; finishReason: FinishReason; completionTokens: number }> {
    let text = '';
    const pieces = drive(run);
    try {
      for (;;) {
        const next = await pieces.next();
        if (next.done === true) return { text, ...next.value };
        text += next.value;
      }
    } finally {
      await stopDriving(pieces);
      run.release();
    }
  }

  interface StreamShape {
    first(): string;
    text(text: string): string;
    last(finishReason: FinishReason): string;
    usage(completionTokens: number): string;
  }

  function stream(run: Run, shape: StreamShape): ApiResponse {
    // Tokens arrive from the backend as they are generated and wait here, per response, while this
    // client's socket is slow: the batch never waits for one client.
    async function* events(): AsyncGenerator<string> {
      const pieces = drive(run);
      try {
        const first = shape.first();
        if (first !== '') yield first;
        let next = await pieces.next();
        for (; next.done !== true; next = await pieces.next()) yield shape.text(next.value);
        const result = next.value;
        yield shape.last(result.finishReason);
        if (run.includeUsage) yield shape.usage(result.completionTokens);
        yield 'data: [DONE]\n\n';
      } catch (err) {
        // Headers are sent: the failure travels as an error event (the openai SDK raises it).
        if (!isKiwiError(err) && !isAbort(err)) opts.onError?.(err);
        yield event(toOpenAiError(err).body);
      } finally {
        await stopDriving(pieces);
        run.release();
      }
    }
    return { status: 200, headers: { ...SSE_HEADERS }, stream: events() };
  }

  return { handle, queue };
}

interface Run {
  events: AsyncIterable<GenerationEvent>;
  stop: readonly string[];
  includeUsage: boolean;
  release: () => void;
}

interface DriveResult {
  finishReason: FinishReason;
  completionTokens: number;
}

/**
 * The backend's text through the stop filter: yields the text to send, returns how it ended. Ends at a
 * stop sequence (leaving the backend's iterable early, which cancels the generation and frees its KV
 * blocks) or at the backend's end event.
 */
async function* drive(run: Run): AsyncGenerator<string, DriveResult> {
  const filter = new StopSequenceFilter(run.stop);
  let completionTokens = 0;
  for await (const e of run.events) {
    if (e.type === 'token') completionTokens++;
    const r = filter.push(e.text);
    if (r.text !== '') yield r.text;
    if (r.stopped) return { finishReason: 'stop', completionTokens };
    if (e.type === 'end') {
      const rest = filter.flush();
      if (rest !== '') yield rest;
      return { finishReason: e.finishReason, completionTokens };
    }
  }
  throw new Error('the backend ended a generation without an end event');
}

/** Ends a drive() left suspended (the response stopped early), which cancels its generation; no-op once it finished. */
async function stopDriving(pieces: AsyncGenerator<string, DriveResult>): Promise<void> {
  // return()'s value is only what a finished generator reports; nobody reads it here.
  await pieces.return(undefined as unknown as DriveResult);
}

function usage(prompt: PreparedPrompt, completionTokens: number) {
  return { prompt_tokens: prompt.ids.length, completion_tokens: completionTokens, total_tokens: prompt.ids.length + completionTokens };
}

function event(value: unknown): string {
  return `data: ${JSON.stringify(value)}\n\n`;
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment; // not valid percent-encoding: look it up as written (it will not match)
  }
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/** An AbortSignal's default reason (a DOMException named AbortError): a cancelled request, not a failure. */
function isAbort(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { name?: unknown }).name === 'AbortError';
}

function parse<T>(schema: z.ZodType<T>, body: unknown): T {
  const r = schema.safeParse(body);
  if (!r.success) {
    const { message, param } = describeZodError(r.error);
    throw new KiwiError('API_BAD_REQUEST', message, { param });
  }
  return r.data;
}

/** Reads and parses a JSON body, refusing it (413) as soon as it passes `limit` bytes. */
async function readJson(req: ApiRequest, limit: number): Promise<unknown> {
  const tooLarge = () => new KiwiError('API_BODY_TOO_LARGE', `the request body is larger than ${limit} bytes`, { limitBytes: limit });
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) throw tooLarge();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of req.body) {
    total += chunk.length;
    if (total > limit) throw tooLarge();
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') throw new KiwiError('API_INVALID_JSON', 'the request body is empty; send a JSON object');
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new KiwiError('API_INVALID_JSON', `the request body is not valid JSON: ${(err as Error).message}`);
  }
}
