// Request bodies of the OpenAI-compatible API (/v1/chat/completions, /v1/completions), validated
// with zod where they enter. Unknown fields are ignored (clients send many); known ones are
// checked strictly and turned into one SamplingRequest the server understands. Pure.
import { z } from 'zod';
import { chatToolMessageFields, chatToolRequestFields } from './tools/chat-tools.js';
import type { PromptInput } from '../completion/completion-backend.js';

const MAX_STOP_SEQUENCES = 16; // OpenAI allows 4; Continue's autocomplete sends more, llama-server takes any number.
export const MAX_CHOICES = 8;
const MAX_PROMPTS = 64;
const MAX_LOGPROBS = 20;
const MAX_STOP_CHARS = 256;
const MAX_MESSAGES = 1024;
const MAX_TEXT_CHARS = 4 * 1024 * 1024;
const MAX_PROMPT_IDS = 1 << 20;

const text = z.string().max(MAX_TEXT_CHARS);
const stopText = z.string().max(MAX_STOP_CHARS);
const stop = z.union([stopText, z.array(stopText).max(MAX_STOP_SEQUENCES)]).nullish();

/** Message content: a string, or the array-of-parts form with text parts only. */
const content = z.union([text, z.array(z.object({ type: z.literal('text'), text })).max(256), z.null()]);

const message = z.object({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
  content: content.optional(),
  name: z.string().max(256).nullish(),
  ...chatToolMessageFields,
});

/** Sampling fields shared by both endpoints, with OpenAI's ranges (plus llama.cpp's extras top_k, min_p, repeat_penalty). */
const samplingFields = {
  model: z.string().max(512).optional(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  max_tokens: z.number().int().min(1).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(0).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  n: z.number().int().min(1).max(MAX_CHOICES).nullish(),
  stop,
  seed: z.number().int().nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  repeat_penalty: z.number().gt(0).max(10).nullish(),
  user: z.string().max(512).nullish(),
  // Token id (as a string, OpenAI's form) -> bias added to its logit; -100 bans it.
  logit_bias: z.record(z.string().regex(/^\d+$/, 'keys are token ids'), z.number().min(-100).max(100)).nullish(),
};

export const chatCompletionRequestSchema = z.object({
  ...samplingFields,
  messages: z.array(message).min(1).max(MAX_MESSAGES),
  max_completion_tokens: z.number().int().min(1).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(MAX_LOGPROBS).nullish(),
  ...chatToolRequestFields,
});

export const completionRequestSchema = z.object({
  ...samplingFields,
  // A string, token ids, or a batch of either: one choice (n choices) per prompt, OpenAI's forms.
  prompt: z.union([
    text,
    z.array(text).min(1).max(MAX_PROMPTS),
    z.array(z.number().int().min(0)).min(1).max(MAX_PROMPT_IDS),
    z.array(z.array(z.number().int().min(0)).min(1).max(MAX_PROMPT_IDS)).min(1).max(MAX_PROMPTS),
  ]),
  echo: z.boolean().nullish(),
  // The number of alternatives per token (OpenAI allows 5; llama-server's n_probs more).
  logprobs: z.number().int().min(0).max(MAX_LOGPROBS).nullish(),
  suffix: text.nullish(),
  // Only the trivial best_of (= n): anything else would need server-side ranking Kiwi does not do.
  best_of: z.number().int().min(1).max(MAX_CHOICES).nullish(),
});

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>;
export type CompletionRequest = z.infer<typeof completionRequestSchema>;
export type ChatMessage = z.infer<typeof message>;

export interface SamplingRequest {
  /** Undefined: as many as the context leaves. */
  maxTokens: number | undefined;
  temperature: number;
  topP: number;
  topK: number;
  minP: number;
  /** Undefined: a fresh random seed. */
  seed: number | undefined;
  stop: string[];
  presencePenalty: number;
  frequencyPenalty: number;
  repeatPenalty: number;
  stream: boolean;
  includeUsage: boolean;
  /** Choices per prompt. */
  n: number;
  /** Token id -> bias; ids are checked against the vocabulary by the caller. */
  logitBias: Map<number, number> | undefined;
}

type SamplingFields = z.infer<z.ZodObject<typeof samplingFields>>;

/** OpenAI's defaults where a field is absent (temperature 1, top_p 1, no penalties). */
export function toSamplingRequest(body: SamplingFields & { max_completion_tokens?: number | null | undefined }): SamplingRequest {
  const stopList = body.stop == null ? [] : typeof body.stop === 'string' ? [body.stop] : body.stop;
  return {
    maxTokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
    temperature: body.temperature ?? 1,
    topP: body.top_p ?? 1,
    topK: body.top_k ?? 0,
    minP: body.min_p ?? 0,
    seed: body.seed ?? undefined,
    stop: stopList.filter((s) => s.length > 0),
    presencePenalty: body.presence_penalty ?? 0,
    frequencyPenalty: body.frequency_penalty ?? 0,
    repeatPenalty: body.repeat_penalty ?? 1,
    stream: body.stream === true,
    includeUsage: body.stream === true && body.stream_options?.include_usage === true,
    n: body.n ?? 1,
    logitBias: body.logit_bias == null ? undefined : new Map(Object.entries(body.logit_bias).map(([id, b]) => [Number(id), b])),
  };
}

/** Flattens array-of-parts content into the plain string chat templates expect. */
export function messageText(m: ChatMessage): string {
  if (m.content == null) return '';
  if (typeof m.content === 'string') return m.content;
  return m.content.map((part) => part.text).join('');
}

/** The first problem of a failed parse, phrased like OpenAI's errors: which field and why. */
export function describeZodError(error: z.ZodError): { message: string; param: string | null } {
  const issue = error.issues[0];
  if (issue === undefined) return { message: 'Invalid request body.', param: null };
  const param = issue.path.length > 0 ? issue.path.map(String).join('.') : null;
  return { message: param !== null ? `Invalid value for '${param}': ${issue.message}` : `Invalid request body: ${issue.message}`, param };
}

/**
 * OpenAI parameters Kiwi knows and cannot honour: refused with a 400 naming them rather than
 * silently ignored. `allowed` is the value that asks for nothing (e.g. modalities ['text']).
 * Parameters that change nothing of the output (store, metadata, user, service_tier,
 * prompt_cache_key, safety_identifier, stream_options) are accepted and ignored instead.
 */
const UNSUPPORTED: Record<'chat' | 'completions', ReadonlyArray<{ param: string; why: string; allowed?: (v: unknown) => boolean }>> = {
  chat: [
    { param: 'audio', why: 'audio output is not supported' },
    { param: 'modalities', why: "only text output is supported", allowed: (v) => Array.isArray(v) && v.every((m) => m === 'text') },
    { param: 'prediction', why: 'predicted outputs are not supported' },
    { param: 'web_search_options', why: 'web search is not supported' },
    { param: 'functions', why: "the legacy 'functions' parameter is not supported; send the same functions as 'tools'" },
    { param: 'function_call', why: "the legacy 'function_call' parameter is not supported; use 'tool_choice'" },
  ],
  completions: [],
};

/** The first parameter of `body` that Kiwi refuses, with the reason; undefined when none. */
export function unsupportedParameter(endpoint: 'chat' | 'completions', body: unknown): { param: string; message: string } | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const record = body as Record<string, unknown>;
  for (const u of UNSUPPORTED[endpoint]) {
    const v = record[u.param];
    if (v === undefined || v === null || u.allowed?.(v) === true) continue;
    return { param: u.param, message: `'${u.param}' is not supported by this server: ${u.why}; remove it from the request` };
  }
  return undefined;
}

/** POST /v1/embeddings: OpenAI's body (input a string, strings, token ids or arrays of them). */
export const embeddingsRequestSchema = z.object({
  model: z.string().max(512).optional(),
  input: z.union([
    text,
    z.array(text).min(1).max(MAX_PROMPTS * 32),
    z.array(z.number().int().min(0)).min(1).max(MAX_PROMPT_IDS),
    z.array(z.array(z.number().int().min(0)).min(1).max(MAX_PROMPT_IDS)).min(1).max(MAX_PROMPTS * 32),
  ]),
  encoding_format: z.enum(['float', 'base64']).nullish(),
  dimensions: z.number().int().min(1).nullish(),
  user: z.string().max(512).nullish(),
});

export type EmbeddingsRequest = z.infer<typeof embeddingsRequestSchema>;

/** The inputs of an embeddings request, one prompt each. */
export function embeddingInputs(input: EmbeddingsRequest['input']): PromptInput[] {
  if (typeof input === 'string') return [{ kind: 'text', text: input }];
  if (typeof input[0] === 'string') return (input as string[]).map((t) => ({ kind: 'text', text: t }));
  if (typeof input[0] === 'number') return [{ kind: 'ids', ids: input as number[] }];
  return (input as number[][]).map((ids) => ({ kind: 'ids', ids }));
}

/** llama-server's POST /tokenize: `content`, `add_special` (default false), `parse_special` (default true), `with_pieces`. */
export const tokenizeRequestSchema = z.object({
  content: text,
  add_special: z.boolean().nullish(),
  parse_special: z.boolean().nullish(),
  with_pieces: z.boolean().nullish(),
});

/** llama-server's POST /detokenize: `tokens`. */
export const detokenizeRequestSchema = z.object({ tokens: z.array(z.number().int().min(0)).max(MAX_PROMPT_IDS) });

/** llama-server's POST /apply-template: chat `messages`, answered with the rendered `prompt`. */
export const applyTemplateRequestSchema = z.object({ messages: z.array(message).min(1).max(MAX_MESSAGES) });
