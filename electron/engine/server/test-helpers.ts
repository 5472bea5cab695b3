// Shared by the server tests: the direct (no-API) greedy run of the runtime on a model, to compare
// what the API returns against, the API over stories260K called in-process (no sockets), and small
// readers for SSE bodies.
import { afterAll, beforeAll } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { openLocalModel } from '../runtime/local-model.js';
import type { LocalModel } from '../runtime/local-model.js';
import { generate } from '../runtime/generation.js';
import { DEFAULT_SAMPLING, Sampler } from '../runtime/sampling.js';
import { LocalBackend } from './local-backend.js';
import { createOpenAiApi, type ApiRequest, type ApiResponse, type OpenAiApi, type OpenAiApiOptions } from './openai-api.js';

export interface DirectRun {
  ids: number[];
  /** The text of each generated token as it is streamed (token_to_piece, UTF-8 completed). */
  pieces: string[];
  finishReason: 'stop' | 'length';
}

/** Greedy generation straight on the runtime, with the prompt tokenized as the API tokenizes a text prompt. */
export async function directGreedy(model: LocalModel, prompt: string, maxTokens: number): Promise<DirectRun> {
  const tok = model.tokenizer;
  const r = await generate(model.chain, {
    promptIds: tok.encode(prompt, { parseSpecial: true }),
    maxTokens,
    sampler: new Sampler(DEFAULT_SAMPLING),
    isEndOfGeneration: (id) => tok.isEndOfGeneration(id),
  });
  const decoder = tok.createStreamDecoder();
  const pieces = r.ids.map((id) => decoder.push(id));
  const rest = decoder.flush();
  if (rest !== '') pieces.push(rest);
  return { ids: r.ids, pieces, finishReason: r.finishReason };
}

export async function openDirect(path: string): Promise<LocalModel> {
  return openLocalModel(path, { threads: 1 });
}

/** The JSON payloads of an SSE body, and whether it ended with `data: [DONE]`. */
export function parseSse(body: string): { events: Record<string, unknown>[]; done: boolean } {
  const events: Record<string, unknown>[] = [];
  let done = false;
  for (const block of body.split('\n\n')) {
    if (block.trim() === '') continue;
    if (!block.startsWith('data: ')) throw new Error(`not an SSE data event: ${JSON.stringify(block)}`);
    const data = block.slice('data: '.length);
    if (data === '[DONE]') done = true;
    else events.push(JSON.parse(data) as Record<string, unknown>);
  }
  return { events, done };
}

/** Waits until `condition` holds (the runtime frees a cancelled request's blocks at its next step). */
export async function eventually(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const started = Date.now();
  while (!condition()) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * For one test file: stories260K in a LocalBackend (one thread) and the API over it, opened before
 * its tests (handed to `set`) and closed after them; with `direct`, the same model on the runtime too.
 * `call` calls that API in-process; `chat` asks it for a chat completion of 'Once upon a time'
 * (8 tokens), with `extra` fields.
 */
export function withStoriesApi(
  set: (s: { backend: LocalBackend; api: OpenAiApi; direct: LocalModel | undefined }) => void = () => {},
  opts: { api?: Omit<OpenAiApiOptions, 'backend'>; direct?: boolean } = {},
): { call: (method: string, path: string, body?: unknown) => Promise<ApiCallResult>; chat: (extra: Record<string, unknown>) => Promise<ApiCallResult> } {
  let backend: LocalBackend | undefined;
  let direct: LocalModel | undefined;
  let api: OpenAiApi | undefined;
  beforeAll(async () => {
    const path = await testModelPath('stories260K.gguf');
    backend = await LocalBackend.open(path, { threads: 1 });
    if (opts.direct === true) direct = await openDirect(path);
    api = createOpenAiApi({ ...opts.api, backend });
    set({ backend, api, direct });
  });
  afterAll(async () => {
    await backend?.close();
    await direct?.dispose();
  });
  const call = (method: string, path: string, body?: unknown) => apiCall(api!, method, path, body);
  const chat = (extra: Record<string, unknown>) => call('POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 8, ...extra });
  return { call, chat };
}

export interface RequestOptions {
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** The body as sent, instead of `body` as JSON. */
  raw?: string;
}

/** An in-process request: a JSON body (or `raw`) in one chunk, sent as application/json. */
export function apiRequest(method: string, path: string, body?: unknown, opts: RequestOptions = {}): ApiRequest {
  const bytes = Buffer.from(opts.raw ?? (body === undefined ? '' : JSON.stringify(body)));
  return {
    method,
    path,
    headers: { 'content-type': 'application/json', ...opts.headers },
    body: (async function* () {
      yield bytes;
    })(),
    signal: opts.signal ?? new AbortController().signal,
  };
}

/** The whole body of a response, a stream read to its end. */
export async function responseText(res: ApiResponse): Promise<string> {
  if ('body' in res) return res.body;
  let out = '';
  for await (const chunk of res.stream) out += chunk;
  return out;
}

export interface ApiCallResult {
  status: number;
  headers: Record<string, string>;
  text: string;
  /** The body parsed as JSON; undefined when it is not JSON (an SSE stream). */
  json: any;
  res: ApiResponse;
}

/** Calls `api` in-process and reads the whole answer. */
export async function apiCall(api: OpenAiApi, method: string, path: string, body?: unknown, opts: RequestOptions = {}): Promise<ApiCallResult> {
  const res = await api.handle(apiRequest(method, path, body, opts));
  const text = await responseText(res);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json, res };
}
