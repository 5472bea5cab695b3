// What the OpenAI API checks of a request before an endpoint acts on it: the API key, that a model
// is served, the JSON body read under a byte limit (413 as soon as it passes it), the zod parse that
// becomes a 400 naming the field, parameters Kiwi refuses by name, and the model and token ids asked
// for. Each check throws the KiwiError whose code openai-errors.ts maps to the status.
import type { z } from 'zod';
import { KiwiError } from '../errors.js';
import type { CompletionBackend } from '../completion/completion-backend.js';
import { matchesSecret } from './bearer-secret.js';
import { describeZodError } from './openai-schema.js';

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

/** `Authorization: Bearer <key>` matching `keyDigest`; no key configured (undefined) lets every request through. */
export function checkApiKey(req: ApiRequest, keyDigest: Buffer | undefined): void {
  if (keyDigest === undefined) return;
  const m = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
  if (m === null || !matchesSecret(m[1]!.trim(), keyDigest)) {
    throw new KiwiError('API_UNAUTHORIZED', m === null ? 'missing API key: send the header Authorization: Bearer <key>' : 'incorrect API key');
  }
}

export function checkServing(backend: CompletionBackend): void {
  const status = backend.status();
  if (status !== 'serving') {
    throw new KiwiError('API_NOT_SERVING', status === 'starting' ? 'the model is still loading; retry in a moment' : 'the model is not available right now; retry later');
  }
}

/** The request's `model`, when it names one, is the model served here. */
export function checkModel(backend: CompletionBackend, model: string | undefined): void {
  if (model !== undefined && model !== backend.modelId) throw modelNotFound(backend, model);
}

export function modelNotFound(backend: CompletionBackend, model: string): KiwiError {
  return new KiwiError('API_MODEL_NOT_FOUND', `the model '${model}' does not exist; this server serves '${backend.modelId}'`, { param: 'model' });
}

/** Token ids a request names (logit_bias keys, /detokenize) are inside the vocabulary. */
export function checkTokenIds(backend: CompletionBackend, ids: readonly number[], param: string): void {
  const vocab = backend.vocabSize;
  if (vocab === undefined) return;
  const bad = ids.find((id) => id >= vocab);
  if (bad !== undefined) throw new KiwiError('TOKEN_INVALID', `token ${bad} is outside the vocabulary of ${vocab} tokens`, { param });
}

/** A parameter Kiwi knows and cannot honour (openai-schema.ts, responses-api.ts) is a 400 naming it. */
export function refuseUnsupported(u: { param: string; message: string } | undefined): void {
  if (u !== undefined) throw new KiwiError('API_BAD_REQUEST', u.message, { param: u.param });
}

/** `body` checked against `schema`; the first problem is a 400 naming its field, phrased like OpenAI's. */
export function parseRequest<T>(schema: z.ZodType<T>, body: unknown): T {
  const r = schema.safeParse(body);
  if (!r.success) {
    const { message, param } = describeZodError(r.error);
    throw new KiwiError('API_BAD_REQUEST', message, { param });
  }
  return r.data;
}

/** Reads and parses a JSON body, refusing it (413) as soon as it passes `limit` bytes. */
export async function readJson(req: ApiRequest, limit: number): Promise<unknown> {
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

/** A path segment percent-decoded; not valid percent-encoding: as written (it will then match nothing). */
export function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
