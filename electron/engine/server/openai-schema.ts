// Request bodies of the OpenAI-compatible API (/v1/chat/completions, /v1/completions), validated
// with zod where they enter. Unknown fields are ignored (clients send many); known ones are
// checked strictly and turned into one SamplingRequest the server understands. Pure.
import { z } from 'zod';

const MAX_STOP_SEQUENCES = 4; // OpenAI's limit.
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
  name: z.string().max(256).optional(),
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
  n: z.literal(1).nullish(),
  stop,
  seed: z.number().int().nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  repeat_penalty: z.number().gt(0).max(10).nullish(),
  user: z.string().max(512).optional(),
};

export const chatCompletionRequestSchema = z.object({
  ...samplingFields,
  messages: z.array(message).min(1).max(MAX_MESSAGES),
  max_completion_tokens: z.number().int().min(1).nullish(),
});

export const completionRequestSchema = z.object({
  ...samplingFields,
  // One prompt: a string, a one-string array, or token ids (OpenAI's forms; batches are not supported).
  prompt: z.union([text, z.array(text).length(1), z.array(z.number().int().min(0)).min(1).max(MAX_PROMPT_IDS)]),
  echo: z.boolean().nullish(),
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
