// Shared by the server tests: the direct (no-API) greedy run of the runtime on a model, to compare
// what the API returns against, and small readers for SSE bodies.
import { openLocalModel } from '../runtime/local-model.js';
import type { LocalModel } from '../runtime/local-model.js';
import { generate } from '../runtime/generation.js';
import { DEFAULT_SAMPLING, Sampler } from '../runtime/sampling.js';

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
