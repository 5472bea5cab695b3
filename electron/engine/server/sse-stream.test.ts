// A stream's end in-process against stories260K: cancelled, or no longer read, it stops its
// generation and gives back the KV blocks and the queue slot.
import { describe, expect, test } from 'vitest';
import type { CompletionBackend } from '../completion/completion-backend.js';
import type { LocalBackend } from './local-backend.js';
import { createOpenAiApi, type OpenAiApi } from './openai-api.js';
import { apiRequest, eventually, withStoriesApi } from './test-helpers.js';

let backend: LocalBackend;
let api: OpenAiApi;
withStoriesApi((s) => ({ backend, api } = s));

describe('cancellation', () => {
  test('a cancelled stream stops generating and gives back its KV blocks and its slot', async () => {
    const pool = backend.kvPool;
    const controller = new AbortController();
    const res = await api.handle(apiRequest('POST', '/v1/completions', { prompt: 'Once upon a time', max_tokens: 1500, stream: true }, { signal: controller.signal }));
    if (!('stream' in res)) throw new Error('expected a stream');
    const it = res.stream[Symbol.asyncIterator]();
    await it.next();
    await it.next();
    expect(pool.freeBlocks).toBeLessThan(pool.totalBlocks);
    const cancelled = backend.stats().cancelled;
    controller.abort();
    let rest = '';
    for (let n = await it.next(); n.done !== true; n = await it.next()) rest += n.value;
    expect(rest).not.toContain('[DONE]');
    expect(backend.stats().cancelled).toBe(cancelled + 1);
    await eventually(() => pool.freeBlocks === pool.totalBlocks, 'the KV pool is full again');
    expect(api.queue.active).toBe(0);
  });

  test('a stream that is stopped being read (without an abort) still ends its generation', async () => {
    // The real backend, observed: did the server close its event iterable before the end?
    let closedEarly = false;
    const observed: CompletionBackend = {
      modelId: backend.modelId,
      createdAt: backend.createdAt,
      contextTokens: backend.contextTokens,
      status: () => backend.status(),
      prepare: (p) => backend.prepare(p),
      async *generate(r, signal) {
        let ended = false;
        try {
          for await (const e of backend.generate(r, signal)) {
            ended = e.type === 'end';
            yield e;
          }
        } finally {
          closedEarly = !ended;
        }
      },
    };
    const target = createOpenAiApi({ backend: observed });
    const res = await target.handle(apiRequest('POST', '/v1/completions', { prompt: 'Once upon a time', max_tokens: 1500, stream: true }));
    if (!('stream' in res)) throw new Error('expected a stream');
    const it = res.stream[Symbol.asyncIterator]();
    await it.next();
    await it.return?.();
    expect(closedEarly).toBe(true);
    await eventually(() => backend.kvPool.freeBlocks === backend.kvPool.totalBlocks, 'the KV pool is full again');
    expect(target.queue.active).toBe(0);
  });
});
