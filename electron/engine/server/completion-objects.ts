// The objects chat and text completions share: one id, creation time and model for the whole
// response and each of its chunks, the non-streamed answer (every choice run to the end, with
// usage), and the stream's choice and usage chunks. Endpoints give only what a choice holds.
import { randomBytes } from 'node:crypto';
import type { PreparedPrompt } from '../completion/completion-backend.js';
import type { RequestLog } from './api-endpoint.js';
import { json, sseEvent, type ApiResponse } from './api-response.js';
import type { Job, Jobs } from './generation-job.js';
import type { CollectResult } from './generation-pieces.js';

export interface CompletionObjects {
  /** Runs every choice to the end and answers the whole object, one `choice(result, i)` per choice. */
  whole(jobs: Jobs, job: Job, log: RequestLog, choice: (r: CollectResult, i: number) => unknown): Promise<ApiResponse>;
  /** A stream chunk for one choice (with `usage: null` when the stream ends with a usage chunk). */
  chunk(choice: unknown): string;
  /** The stream's usage chunk: no choices. */
  usageChunk(completionTokens: number): string;
}

export function completionObjects(o: {
  /** 'chatcmpl', 'cmpl'. */
  idPrefix: string;
  /** The whole answer's `object` ('chat.completion') and each chunk's ('chat.completion.chunk'). */
  object: string;
  chunkObject: string;
  model: string;
  prompts: readonly PreparedPrompt[];
  includeUsage: boolean;
}): CompletionObjects {
  const id = `${o.idPrefix}-${randomBytes(12).toString('base64url')}`;
  const created = Math.floor(Date.now() / 1000);
  const { model } = o;
  return {
    async whole(jobs, job, log, choice) {
      const results = await jobs.collectAll(job);
      log.tokens = sumTokens(results);
      return json(200, { id, object: o.object, created, model, choices: results.map((r, i) => choice(r, i)), usage: usage(o.prompts, sumTokens(results)) });
    },
    chunk: (choice) => sseEvent({ id, object: o.chunkObject, created, model, choices: [choice], ...(o.includeUsage ? { usage: null } : {}) }),
    usageChunk: (completionTokens) => sseEvent({ id, object: o.chunkObject, created, model, choices: [], usage: usage(o.prompts, completionTokens) }),
  };
}

function sumTokens(results: readonly CollectResult[]): number {
  return results.reduce((a, r) => a + r.completionTokens, 0);
}

function usage(prompts: readonly PreparedPrompt[], completionTokens: number) {
  const promptTokens = prompts.reduce((a, p) => a + p.ids.length, 0);
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}
