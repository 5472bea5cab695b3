// The OpenAI-compatible API as a function from request to response, knowing nothing of sockets
// (http-server.ts adapts it to node:http; tests call it in-process). Routes: POST /v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/responses (responses-api.ts), GET /v1/models[/{id}], GET /health,
// and llama-server's POST /tokenize, /detokenize, /apply-template. Every failure is an OpenAI error
// body with the status from openai-errors.ts; nothing reaches the backend before it is validated, and
// a known parameter Kiwi cannot honour is refused by name (openai-schema.ts), never ignored.
import { createHash, randomBytes, randomInt, timingSafeEqual } from 'node:crypto';
import type { z } from 'zod';
import { KiwiError, isKiwiError } from '../errors.js';
import { DEFAULT_SAMPLING } from '../runtime/sampling.js';
import type { SamplingOptions } from '../runtime/sampling.js';
import type { TokenLogprobs } from '../runtime/sampling.js';
import type { CompletionBackend, FinishReason, GenerationEvent, PreparedPrompt, PromptInput } from '../completion/completion-backend.js';
import type { JsonGrammar } from '../runtime/constrained/json-automaton.js';
import { ChatToolOutput, chatGrammar, chatTurns, planChatTools, type ToolCallOut } from './tools/chat-tools.js';
import { toOpenAiError } from './openai-errors.js';
import {
  applyTemplateRequestSchema,
  chatCompletionRequestSchema,
  completionRequestSchema,
  describeZodError,
  detokenizeRequestSchema,
  embeddingInputs,
  embeddingsRequestSchema,
  messageText,
  tokenizeRequestSchema,
  toSamplingRequest,
  unsupportedParameter,
} from './openai-schema.js';
import type { EmbeddingsRequest, SamplingRequest } from './openai-schema.js';
import {
  functionCallItem,
  messageItem,
  outputPart,
  ResponseEventWriter,
  responseObject,
  responsesRequestSchema,
  responseStatus,
  responsesToolRequest,
  responsesTurns,
  unsupportedResponsesParameter,
} from './responses-api.js';
import type { ResponseIds, ResponsesRequest } from './responses-api.js';
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
/** How far back presence/frequency/repeat penalties look (llama.cpp's repeat_last_n default). */
const PENALTY_WINDOW = 64;

const JSON_HEADERS = { 'content-type': 'application/json; charset=utf-8' };
const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' };

type Route = { methods: readonly string[]; path: string; match: (path: string) => boolean };
const exact = (methods: readonly string[], path: string): Route => ({ methods, path, match: (p) => p === path });
const ROUTES: readonly Route[] = [
  exact(['POST'], '/v1/chat/completions'),
  exact(['POST'], '/v1/completions'),
  exact(['POST'], '/v1/embeddings'),
  exact(['POST'], '/v1/responses'),
  { methods: ['GET'], path: '/v1/models', match: (p) => p === '/v1/models' || p.startsWith('/v1/models/') },
  exact(['GET'], '/health'),
  exact(['POST'], '/tokenize'),
  exact(['POST'], '/detokenize'),
  exact(['POST'], '/apply-template'),
];
const ENDPOINTS = ROUTES.map((r) => `${r.methods.join('/')} ${r.path}`).join(', ');

export function createOpenAiApi(opts: OpenAiApiOptions): OpenAiApi {
  const { backend } = opts;
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const queue = new RequestQueue(opts.maxActive ?? 8, opts.maxQueue ?? 64, () => backend.waitingForAdmission?.() ?? 0);
  const keyDigest = opts.apiKey !== undefined ? sha256(opts.apiKey) : undefined;
  /** Tokenizes where the backend can without holding the event loop (long prompts go to a worker thread). */
  const prepare = async (p: PromptInput): Promise<PreparedPrompt> => (backend.prepareAsync !== undefined ? backend.prepareAsync(p) : backend.prepare(p));

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
      const route = ROUTES.find((r) => r.match(req.path));
      if (route === undefined) throw new KiwiError('API_NOT_FOUND', `no endpoint ${req.method} ${req.path}; this server has ${ENDPOINTS}`);
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
      switch (req.path) {
        case '/v1/chat/completions':
          refuseUnsupported(unsupportedParameter('chat', body));
          return await chatCompletion(req, parse(chatCompletionRequestSchema, body), log);
        case '/v1/completions':
          refuseUnsupported(unsupportedParameter('completions', body));
          return await completion(req, parse(completionRequestSchema, body), log);
        case '/v1/embeddings':
          return await embeddings(req, parse(embeddingsRequestSchema, body), log);
        case '/v1/responses':
          refuseUnsupported(unsupportedResponsesParameter(body));
          return await responses(req, parse(responsesRequestSchema, body), log);
        default:
          return utility(req.path, body);
      }
    } catch (err) {
      return error(err);
    }
  }

  function modelObject() {
    return {
      id: backend.modelId,
      object: 'model',
      created: backend.createdAt,
      owned_by: 'kiwi',
      // The positions one request may use here (LM Studio's and vLLM's field names), and llama-server's meta.
      context_length: backend.contextTokens,
      max_model_len: backend.contextTokens,
      meta: { n_ctx: backend.contextTokens, n_ctx_train: backend.trainContextTokens ?? backend.contextTokens, n_vocab: backend.vocabSize ?? null },
    };
  }

  function refuseUnsupported(u: { param: string; message: string } | undefined): void {
    if (u !== undefined) throw new KiwiError('API_BAD_REQUEST', u.message, { param: u.param });
  }

  async function chatCompletion(req: ApiRequest, body: z.infer<typeof chatCompletionRequestSchema>, log: RequestLog): Promise<ApiResponse> {
    checkModel(body.model);
    if (body.top_logprobs != null && body.logprobs !== true) {
      throw new KiwiError('API_BAD_REQUEST', "'top_logprobs' needs 'logprobs': true", { param: 'top_logprobs' });
    }
    // Tools and response_format (server/tools/chat-tools.ts): what the template renders, what the grammar forces.
    const tools = planChatTools(body);
    const prompt = await prepare({ kind: 'chat', messages: chatTurns(body.messages, messageText), tools: tools.offered });
    const syntax = prompt.toolSyntax ?? 'generic';
    const grammar = chatGrammar(body, tools, syntax);
    const s = toSamplingRequest(body);
    const topLogprobs = body.logprobs === true ? (body.top_logprobs ?? 0) : undefined;
    const choices = Array.from({ length: s.n }, (_, i): ChoiceSpec => ({ prompt, index: i, echo: '' }));
    const job = await start(req, choices, s, body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens', topLogprobs, grammar);
    const id = `chatcmpl-${randomBytes(12).toString('base64url')}`;
    const created = Math.floor(Date.now() / 1000);
    const model = backend.modelId;
    const chatLogprobs = (tokens: readonly TokenInfo[]) => (topLogprobs === undefined ? null : { content: tokens.map(chatLogprob), refusal: null });
    if (!s.stream) {
      const results = await collectAll(job);
      log.tokens = sumTokens(results);
      return json(200, {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: results.map((r, i) => {
          const out = new ChatToolOutput(tools, syntax);
          out.push(r.text);
          out.finish();
          return { index: i, message: out.message(), logprobs: chatLogprobs(r.tokens), finish_reason: out.finishReason(r.finishReason) };
        }),
        usage: usage([prompt], sumTokens(results)),
      });
    }
    const chunk = (index: number, delta: Record<string, unknown>, tokens: readonly TokenInfo[] | null, finishReason: FinishReason | 'tool_calls' | null): string =>
      event({
        id,
        object: 'chat.completion.chunk',
        created,
        model,
        choices: [{ index, delta, logprobs: tokens === null ? null : chatLogprobs(tokens), finish_reason: finishReason }],
        ...(s.includeUsage ? { usage: null } : {}),
      });
    // Text that may be a tool call is held back by the parser; finished calls go out as delta.tool_calls.
    const outs = choices.map(() => new ChatToolOutput(tools, syntax));
    const toolPiece = (i: number, d: { content: string; calls: ToolCallOut[] }, tokens: readonly TokenInfo[] | null): string =>
      (d.content !== '' || (!tools.parse && tokens !== null) ? chunk(i, { content: d.content }, tokens, null) : '') +
      outs[i]!.deltas(d.calls).map((delta) => chunk(i, delta, null, null)).join('');
    return stream(job, log, {
      first: (i) => chunk(i, { role: 'assistant', content: '' }, null, null),
      piece: (i, p) => toolPiece(i, outs[i]!.push(p.text), p.tokens),
      last: (i, finishReason) => toolPiece(i, outs[i]!.finish(), null) + chunk(i, {}, null, outs[i]!.finishReason(finishReason)),
      usage: (completionTokens) => event({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: usage([prompt], completionTokens) }),
    });
  }

  async function completion(req: ApiRequest, body: z.infer<typeof completionRequestSchema>, log: RequestLog): Promise<ApiResponse> {
    checkModel(body.model);
    if (body.best_of != null && body.best_of !== (body.n ?? 1)) {
      throw new KiwiError('API_BAD_REQUEST', "'best_of' other than 'n' is not supported (no server-side ranking); drop it or set it to n", { param: 'best_of' });
    }
    const p = body.prompt;
    const inputs: PromptInput[] =
      typeof p === 'string'
        ? [{ kind: 'text', text: p }]
        : typeof p[0] === 'string'
          ? (p as string[]).map((text) => ({ kind: 'text', text }))
          : typeof p[0] === 'number'
            ? [{ kind: 'ids', ids: p as number[] }]
            : (p as number[][]).map((ids) => ({ kind: 'ids', ids }));
    const suffix = body.suffix ?? undefined;
    const prompts = await Promise.all(inputs.map((input) => (suffix !== undefined && suffix !== '' ? prepare(fillInTheMiddle(input, suffix)) : prepare(input))));
    const s = toSamplingRequest(body);
    const topLogprobs = body.logprobs ?? undefined;
    const echo = body.echo === true;
    // OpenAI's order: the n choices of prompt 0, then those of prompt 1, ...
    const choices = prompts.flatMap((prompt, pi) => Array.from({ length: s.n }, (_, i): ChoiceSpec => ({ prompt, index: pi * s.n + i, echo: echo ? prompt.text : '' })));
    const job = await start(req, choices, s, 'max_tokens', topLogprobs);
    const id = `cmpl-${randomBytes(12).toString('base64url')}`;
    const created = Math.floor(Date.now() / 1000);
    const model = backend.modelId;
    // echo with logprobs: the prompt's own tokens are scored first (one forced pass per prompt).
    const echoScores = echo && topLogprobs !== undefined ? await Promise.all(prompts.map((prompt) => scorePrompt(job, prompt, topLogprobs))) : undefined;
    const echoTokens = (c: ChoiceSpec): TokenInfo[] => echoScores?.[prompts.indexOf(c.prompt)] ?? [];
    if (!s.stream) {
      const results = await collectAll(job);
      log.tokens = sumTokens(results);
      return json(200, {
        id,
        object: 'text_completion',
        created,
        model,
        choices: results.map((r, i) => {
          const c = choices[i]!;
          return {
            index: c.index,
            text: c.echo + r.text,
            logprobs: topLogprobs === undefined ? null : completionLogprobs([...echoTokens(c), ...r.tokens], 0),
            finish_reason: r.finishReason,
          };
        }),
        usage: usage(prompts, sumTokens(results)),
      });
    }
    const offsets = choices.map(() => 0);
    const chunk = (i: number, text: string, tokens: readonly TokenInfo[] | null, finishReason: FinishReason | null): string => {
      const logprobs = topLogprobs === undefined || tokens === null ? null : completionLogprobs(tokens, offsets[i]!);
      offsets[i]! += text.length;
      return event({
        id,
        object: 'text_completion',
        created,
        model,
        choices: [{ index: choices[i]!.index, text, logprobs, finish_reason: finishReason }],
        ...(s.includeUsage ? { usage: null } : {}),
      });
    };
    return stream(job, log, {
      first: (i) => (choices[i]!.echo !== '' ? chunk(i, choices[i]!.echo, echoTokens(choices[i]!), null) : ''),
      piece: (i, piece) => chunk(i, piece.text, piece.tokens, null),
      last: (i, finishReason) => chunk(i, '', null, finishReason),
      usage: (completionTokens) => event({ id, object: 'text_completion', created, model, choices: [], usage: usage(prompts, completionTokens) }),
    });
  }

  /** Rebuilds a completion prompt as fill-in-the-middle when the vocabulary has FIM tokens; else a 400 naming `suffix`. */
  function fillInTheMiddle(input: PromptInput, suffix: string): PromptInput {
    const fim = backend.fimTokens?.();
    if (fim === undefined) {
      throw new KiwiError('API_BAD_REQUEST', `'suffix' needs a model with fill-in-the-middle tokens; ${backend.modelId} has none`, { param: 'suffix' });
    }
    if (input.kind !== 'text') throw new KiwiError('API_BAD_REQUEST', "'suffix' works with text prompts, not token ids", { param: 'suffix' });
    return { kind: 'text', text: `${fim.prefix}${input.text}${fim.suffix}${suffix}${fim.middle}` };
  }

  async function responses(req: ApiRequest, body: ResponsesRequest, log: RequestLog): Promise<ApiResponse> {
    checkModel(body.model);
    // Function tools and text.format go through chat's tool calling and constrained decoding (server/tools).
    const toolRequest = responsesToolRequest(body);
    const tools = planChatTools(toolRequest);
    const prompt = await prepare({ kind: 'chat', messages: responsesTurns(body), tools: tools.offered });
    const syntax = prompt.toolSyntax ?? 'generic';
    const grammar = chatGrammar(toolRequest, tools, syntax);
    const s = toSamplingRequest({ temperature: body.temperature, top_p: body.top_p, max_tokens: body.max_output_tokens, stream: body.stream });
    const job = await start(req, [{ prompt, index: 0, echo: '' }], s, 'max_output_tokens', undefined, grammar);
    const ids: ResponseIds = {
      id: `resp_${randomBytes(16).toString('hex')}`,
      messageId: `msg_${randomBytes(16).toString('hex')}`,
      createdAt: Math.floor(Date.now() / 1000),
      model: backend.modelId,
    };
    const out = new ChatToolOutput(tools, syntax);
    const callOf = (c: ToolCallOut) => ({ id: `fc_${randomBytes(16).toString('hex')}`, call: { call_id: c.id, name: c.function.name, arguments: c.function.arguments } });
    // A call ends the response as completed even where the text ran to max_output_tokens.
    const statusOf = (finishReason: FinishReason) => (out.calls.length > 0 ? 'completed' : responseStatus(finishReason));
    if (!s.stream) {
      const [r] = await collectAll(job);
      log.tokens = r!.completionTokens;
      out.push(r!.text);
      out.finish();
      const text = out.message().content ?? '';
      const output = [
        ...(text !== '' || out.calls.length === 0 ? [messageItem(ids, text, 'completed')] : []),
        ...out.calls.map(callOf).map((f) => functionCallItem(f.id, f.call, 'completed')),
      ];
      const usageNow = { inputTokens: prompt.ids.length, outputTokens: r!.completionTokens };
      return json(200, responseObject(body, ids, { status: statusOf(r!.finishReason), outputText: text, output, finishReason: r!.finishReason, usage: usageNow }));
    }
    const w = new ResponseEventWriter();
    const output: Record<string, unknown>[] = [];
    let text = '';
    let message: { index: number } | undefined;
    const part = () => ({ output_index: message!.index, item_id: ids.messageId, content_index: 0 });
    const openMessage = (): string => {
      message = { index: output.length };
      output.push(messageItem(ids, '', 'in_progress'));
      return w.write('response.output_item.added', { output_index: message.index, item: messageItem(ids, '', 'in_progress') }) + w.write('response.content_part.added', { ...part(), part: outputPart('') });
    };
    const closeMessage = (): string => {
      if (message === undefined) return '';
      const events =
        w.write('response.output_text.done', { ...part(), text, logprobs: [] }) +
        w.write('response.content_part.done', { ...part(), part: outputPart(text) }) +
        w.write('response.output_item.done', { output_index: message.index, item: messageItem(ids, text, 'completed') });
      output[message.index] = messageItem(ids, text, 'completed');
      message = undefined;
      return events;
    };
    // Content streams as it comes; each finished call closes the message so far and goes out as its own item.
    const emit = (d: { content: string; calls: ToolCallOut[] }): string => {
      let events = '';
      if (d.content !== '') {
        if (message === undefined && output.length === 0) events += openMessage();
        if (message !== undefined) {
          text += d.content;
          events += w.write('response.output_text.delta', { ...part(), delta: d.content, logprobs: [] });
        }
      }
      for (const f of d.calls.map(callOf)) {
        events += closeMessage();
        const index = output.length;
        output.push(functionCallItem(f.id, f.call, 'completed'));
        events +=
          w.write('response.output_item.added', { output_index: index, item: functionCallItem(f.id, f.call, 'in_progress') }) +
          w.write('response.function_call_arguments.delta', { output_index: index, item_id: f.id, delta: f.call.arguments }) +
          w.write('response.function_call_arguments.done', { output_index: index, item_id: f.id, name: f.call.name, arguments: f.call.arguments }) +
          w.write('response.output_item.done', { output_index: index, item: functionCallItem(f.id, f.call, 'completed') });
      }
      return events;
    };
    return stream(job, log, {
      first: () =>
        w.write('response.created', { response: responseObject(body, ids, { status: 'in_progress' }) }) +
        w.write('response.in_progress', { response: responseObject(body, ids, { status: 'in_progress' }) }),
      piece: (_, p) => emit(out.push(p.text)),
      last: () => {
        let events = emit(out.finish());
        if (output.length === 0) events += openMessage();
        return events + closeMessage();
      },
      usage: () => '',
      end: (finishReason, completionTokens) => {
        const status = statusOf(finishReason);
        const usageNow = { inputTokens: prompt.ids.length, outputTokens: completionTokens };
        return w.write(`response.${status}`, { response: responseObject(body, ids, { status, outputText: text, output, finishReason, usage: usageNow }) });
      },
    });
  }

  async function embeddings(req: ApiRequest, body: EmbeddingsRequest, log: RequestLog): Promise<ApiResponse> {
    checkModel(body.model);
    const embed = backend.embed?.bind(backend);
    if (embed === undefined) {
      throw new KiwiError('API_BAD_REQUEST', `embeddings are not available from this backend (${backend.modelId} through the ring); use kiwi serve for /v1/embeddings`, { param: 'input' });
    }
    const prompts = await Promise.all(embeddingInputs(body.input).map((input) => prepare(input)));
    for (const [i, p] of prompts.entries()) {
      if (p.ids.length > backend.contextTokens) {
        throw new KiwiError('CONTEXT_EXCEEDED', `input ${i} has ${p.ids.length} tokens but the context holds ${backend.contextTokens}; shorten it`, { param: 'input' });
      }
    }
    const release = await admit(req);
    try {
      const vectors: Float32Array[] = [];
      for (const p of prompts) vectors.push(await embed(p.ids, req.signal));
      const dims = vectors[0]?.length ?? 0;
      if (body.dimensions != null && body.dimensions !== dims) {
        throw new KiwiError('API_BAD_REQUEST', `'dimensions' must be ${dims} for ${backend.modelId} (its hidden size); Kiwi does not shorten embeddings`, { param: 'dimensions' });
      }
      const tokens = prompts.reduce((a, p) => a + p.ids.length, 0);
      log.tokens = tokens;
      return json(200, {
        object: 'list',
        data: vectors.map((v, index) => ({
          object: 'embedding',
          index,
          embedding: body.encoding_format === 'base64' ? Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') : Array.from(v),
        })),
        model: backend.modelId,
        usage: { prompt_tokens: tokens, total_tokens: tokens },
      });
    } finally {
      release();
    }
  }

  /** llama-server's POST /tokenize, /detokenize and /apply-template. */
  function utility(path: string, body: unknown): ApiResponse {
    if (path === '/tokenize') {
      const b = parse(tokenizeRequestSchema, body);
      const ids = tokenizeText(b.content, { addSpecial: b.add_special ?? false, parseSpecial: b.parse_special ?? true });
      return json(200, { tokens: b.with_pieces === true ? ids.map((id) => ({ id, piece: backend.tokenPiece!(id) })) : ids });
    }
    if (path === '/detokenize') {
      const b = parse(detokenizeRequestSchema, body);
      checkTokenIds(b.tokens, 'tokens');
      return json(200, { content: backend.detokenize!(b.tokens) });
    }
    const b = parse(applyTemplateRequestSchema, body);
    const prompt = backend.prepare({ kind: 'chat', messages: b.messages.map((m) => ({ role: m.role, content: messageText(m) })) });
    return json(200, { prompt: prompt.text });
  }

  function tokenizeText(text: string, opts: { addSpecial: boolean; parseSpecial: boolean }): number[] {
    if (backend.tokenize === undefined) throw new KiwiError('API_NOT_FOUND', 'this backend cannot tokenize');
    return backend.tokenize(text, opts);
  }

  function checkTokenIds(ids: readonly number[], param: string): void {
    const vocab = backend.vocabSize;
    if (vocab === undefined) return;
    const bad = ids.find((id) => id >= vocab);
    if (bad !== undefined) throw new KiwiError('TOKEN_INVALID', `token ${bad} is outside the vocabulary of ${vocab} tokens`, { param });
  }

  /** Checks the prompts against the context, waits for a slot, and starts one generation per choice. */
  async function start(req: ApiRequest, choices: readonly ChoiceSpec[], s: SamplingRequest, maxParam: string, topLogprobs: number | undefined, grammar?: JsonGrammar): Promise<Job> {
    const context = backend.contextTokens;
    for (const c of choices) {
      if (c.prompt.ids.length >= context) {
        throw new KiwiError(
          'CONTEXT_EXCEEDED',
          `this model's context holds ${context} tokens, but the prompt has ${c.prompt.ids.length} and the completion needs at least one; shorten the prompt`,
          { param: null },
        );
      }
    }
    if (s.logitBias !== undefined) checkTokenIds([...s.logitBias.keys()], 'logit_bias');
    const release = await admit(req);
    const baseSeed = s.seed ?? randomInt(2 ** 31);
    const sampling = (i: number): SamplingOptions => ({
      ...DEFAULT_SAMPLING,
      temperature: s.temperature,
      topK: s.topK,
      topP: s.topP,
      minP: s.minP,
      repetitionPenalty: s.repeatPenalty,
      presencePenalty: s.presencePenalty,
      frequencyPenalty: s.frequencyPenalty,
      penaltyWindow: PENALTY_WINDOW,
      // Each choice draws its own stream: the same seed gives the same n choices, which differ from each other.
      seed: (baseSeed + i) % 2 ** 31,
      ...(s.logitBias !== undefined ? { logitBias: s.logitBias } : {}),
      ...(topLogprobs !== undefined ? { topLogprobs } : {}),
    });
    const runs = choices.map((c, i): Run => {
      // max_tokens beyond the context is clamped to what is left: the choice ends with 'length' there (llama-server's rule).
      const room = context - c.prompt.ids.length;
      const maxTokens = Math.min(s.maxTokens ?? room, room);
      return { events: backend.generate({ promptIds: c.prompt.ids, maxTokens, sampling: sampling(i), stop: s.stop, ...(grammar !== undefined ? { grammar } : {}) }, req.signal), stop: s.stop };
    });
    return { runs, includeUsage: s.includeUsage, release, signal: req.signal, sampling };
  }

  /** The request's queue slot; freed by the returned function, or when the request is cancelled even if its stream was never read. */
  async function admit(req: ApiRequest): Promise<() => void> {
    const acquired = await queue.acquire(req.signal);
    let released = false;
    const onAbort = (): void => release();
    const release = (): void => {
      if (released) return;
      released = true;
      req.signal.removeEventListener('abort', onAbort);
      acquired();
    };
    req.signal.addEventListener('abort', onAbort, { once: true });
    return release;
  }

  /** The log-probabilities of a prompt's own tokens (completions `echo` with `logprobs`): its first token has none. */
  async function scorePrompt(job: Job, prompt: PreparedPrompt, topLogprobs: number): Promise<TokenInfo[]> {
    const first: TokenInfo = { id: prompt.ids[0]!, text: backend.tokenPiece?.(prompt.ids[0]!) ?? '' };
    if (prompt.ids.length === 1) return [first];
    const sampling = { ...job.sampling(0), temperature: 0, forcedIds: prompt.ids.slice(1), topLogprobs, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0 };
    const tokens: TokenInfo[] = [first];
    for await (const e of backend.generate({ promptIds: prompt.ids.slice(0, 1), maxTokens: prompt.ids.length - 1, sampling, stop: [] }, job.signal)) {
      if (e.type === 'token') tokens.push(tokenInfo(backend, e.id, e.text, e.logprobs));
    }
    return tokens;
  }

  /** Runs every choice to the end: text without the stop sequence, finish reason, token count. */
  async function collectAll(job: Job): Promise<CollectResult[]> {
    try {
      return await Promise.all(job.runs.map(collect));
    } finally {
      job.release();
    }
  }

  async function collect(run: Run): Promise<CollectResult> {
    let text = '';
    const tokens: TokenInfo[] = [];
    const pieces = drive(run, backend);
    try {
      for (;;) {
        const next = await pieces.next();
        if (next.done === true) return { text, tokens, ...next.value };
        text += next.value.text;
        tokens.push(...next.value.tokens);
      }
    } finally {
      await stopDriving(pieces);
    }
  }

  interface StreamShape {
    /** Each choice's opening event(s) ('' for none). */
    first(choice: number): string;
    piece(choice: number, piece: Piece): string;
    last(choice: number, finishReason: FinishReason): string;
    usage(completionTokens: number): string;
    /** The closing event; default `data: [DONE]`. */
    end?(finishReason: FinishReason, completionTokens: number): string;
  }

  function stream(job: Job, log: RequestLog, shape: StreamShape): ApiResponse {
    // Tokens arrive from the backend as they are generated and wait here, per response, while this
    // client's socket is slow: the batch never waits for one client. With n > 1 the choices'
    // events interleave as they come, each chunk naming its choice.
    let completionTokens = 0;
    let lastReason: FinishReason = 'stop';
    async function* choice(i: number, run: Run): AsyncGenerator<string> {
      const pieces = drive(run, backend);
      try {
        const first = shape.first(i);
        if (first !== '') yield first;
        let next = await pieces.next();
        for (; next.done !== true; next = await pieces.next()) yield shape.piece(i, next.value);
        completionTokens += next.value.completionTokens;
        lastReason = next.value.finishReason;
        yield shape.last(i, next.value.finishReason);
      } finally {
        await stopDriving(pieces);
      }
    }
    async function* events(): AsyncGenerator<string> {
      const merged = mergeStreams(job.runs.map((run, i) => choice(i, run)));
      try {
        yield* merged;
        log.tokens = completionTokens;
        if (job.includeUsage) yield shape.usage(completionTokens);
        yield shape.end !== undefined ? shape.end(lastReason, completionTokens) : 'data: [DONE]\n\n';
      } catch (err) {
        // Headers are sent: the failure travels as an error event (the openai SDK raises it).
        if (!isKiwiError(err) && !isAbort(err)) opts.onError?.(err);
        yield event(toOpenAiError(err).body);
      } finally {
        await merged.return(undefined);
        job.release();
      }
    }
    return { status: 200, headers: { ...SSE_HEADERS }, stream: events() };
  }

  return { handle, queue };
}

/** One choice to generate: its prompt, its index in the response, the text echoed before it. */
interface ChoiceSpec {
  prompt: PreparedPrompt;
  index: number;
  echo: string;
}

interface Run {
  events: AsyncIterable<GenerationEvent>;
  stop: readonly string[];
}

/** The generations of one request, sharing its queue slot. */
interface Job {
  runs: Run[];
  includeUsage: boolean;
  release: () => void;
  signal: AbortSignal;
  sampling: (choice: number) => SamplingOptions;
}

interface DriveResult {
  finishReason: FinishReason;
  completionTokens: number;
}

interface CollectResult extends DriveResult {
  text: string;
  tokens: TokenInfo[];
}

/** A generated token as the logprobs of a response show it. */
interface TokenInfo {
  id: number;
  /** The token's own text (its piece). */
  text: string;
  logprobs?: { logprob: number; top: Array<{ text: string; logprob: number }> } | undefined;
}

function tokenInfo(backend: CompletionBackend, id: number, text: string, lp: TokenLogprobs | undefined): TokenInfo {
  const piece = (i: number): string => backend.tokenPiece?.(i) ?? text;
  return { id, text: piece(id), logprobs: lp === undefined ? undefined : { logprob: lp.logprob, top: lp.top.map((a) => ({ text: piece(a.id), logprob: a.logprob })) } };
}

/** Text to send, with the tokens whose text it holds (for logprobs). */
interface Piece {
  text: string;
  tokens: TokenInfo[];
}

/** What one request measured, for --log-requests. */
export interface RequestLog {
  tokens: number;
}

/**
 * The backend's text through the stop filter: yields the text to send with the tokens that made it,
 * returns how it ended. Ends at a stop sequence (leaving the backend's iterable early, which cancels
 * the generation and frees its KV blocks) or at the backend's end event. A token goes out with the
 * first text that holds any of its characters; tokens wholly inside a stop sequence are dropped.
 */
async function* drive(run: Run, backend: CompletionBackend): AsyncGenerator<Piece, DriveResult> {
  const filter = new StopSequenceFilter(run.stop);
  let completionTokens = 0;
  let received = 0; // characters the filter was given
  let sent = 0; // characters it let through
  const held: Array<{ token: TokenInfo; start: number }> = [];
  // Tokens that showed some of their text (or every one, once nothing is held back).
  const take = (): TokenInfo[] => {
    const out: TokenInfo[] = [];
    while (held.length > 0 && (held[0]!.start < sent || sent === received)) out.push(held.shift()!.token);
    return out;
  };
  for await (const e of run.events) {
    if (e.type === 'token') {
      completionTokens++;
      held.push({ token: tokenInfo(backend, e.id, e.text, e.logprobs), start: received });
    }
    received += e.text.length;
    const r = filter.push(e.text);
    sent += r.text.length;
    if (r.text !== '') yield { text: r.text, tokens: take() };
    if (r.stopped) return { finishReason: 'stop', completionTokens };
    if (e.type === 'end') {
      const rest = filter.flush();
      sent += rest.length;
      const tokens = held.splice(0).map((h) => h.token);
      if (rest !== '' || tokens.length > 0) yield { text: rest, tokens };
      return { finishReason: e.finishReason, completionTokens };
    }
  }
  throw new Error('the backend ended a generation without an end event');
}

/** Ends a drive() left suspended (the response stopped early), which cancels its generation; no-op once it finished. */
async function stopDriving(pieces: AsyncGenerator<Piece, DriveResult>): Promise<void> {
  // return()'s value is only what a finished generator reports; nobody reads it here.
  await pieces.return(undefined as unknown as DriveResult);
}

/** Interleaves several event streams as their items arrive; ends when all did, throws the first failure. */
async function* mergeStreams(streams: AsyncGenerator<string>[]): AsyncGenerator<string> {
  const next = (i: number) => streams[i]!.next().then((r) => ({ i, r }));
  const pending = new Map(streams.map((_, i) => [i, next(i)]));
  try {
    while (pending.size > 0) {
      const { i, r } = await Promise.race(pending.values());
      if (r.done === true) pending.delete(i);
      else {
        pending.set(i, next(i));
        yield r.value;
      }
    }
  } finally {
    // Settle every stream (a cancelled request ends them all through its signal, or by return()).
    await Promise.allSettled(streams.map((s) => s.return(undefined)));
  }
}

function sumTokens(results: readonly DriveResult[]): number {
  return results.reduce((a, r) => a + r.completionTokens, 0);
}

function tokenBytes(text: string): number[] {
  return [...Buffer.from(text, 'utf8')];
}

/** One entry of chat `logprobs.content`. */
function chatLogprob(t: TokenInfo) {
  return {
    token: t.text,
    logprob: t.logprobs?.logprob ?? 0,
    bytes: tokenBytes(t.text),
    top_logprobs: (t.logprobs?.top ?? []).map((a) => ({ token: a.text, logprob: a.logprob, bytes: tokenBytes(a.text) })),
  };
}

/** Completions' `logprobs` object for tokens whose text starts at `offset` of the choice's text; a token without logprobs (a prompt's first) gets null. */
function completionLogprobs(tokens: readonly TokenInfo[], offset: number) {
  const textOffset: number[] = [];
  let at = offset;
  for (const t of tokens) {
    textOffset.push(at);
    at += t.text.length;
  }
  return {
    tokens: tokens.map((t) => t.text),
    token_logprobs: tokens.map((t) => t.logprobs?.logprob ?? null),
    top_logprobs: tokens.map((t) => (t.logprobs === undefined ? null : Object.fromEntries(t.logprobs.top.map((a) => [a.text, a.logprob])))),
    text_offset: textOffset,
  };
}

function usage(prompts: readonly PreparedPrompt[], completionTokens: number) {
  const promptTokens = prompts.reduce((a, p) => a + p.ids.length, 0);
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
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
