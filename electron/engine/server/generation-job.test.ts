// A request's generations in-process against stories260K: the queue's 429 and its order, a slot
// held while the backend waits for KV blocks, cancellation while waiting, max_tokens clamped to the
// context, logit_bias ids checked against the vocabulary.
import { describe, expect, test } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { LocalBackend } from './local-backend.js';
import { createOpenAiApi, type OpenAiApiOptions } from './openai-api.js';
import { apiCall, apiRequest, eventually, responseText, withStoriesApi } from './test-helpers.js';

let backend: LocalBackend;
const { call, chat } = withStoriesApi((s) => (backend = s.backend));

const chatHi = (extra: Record<string, unknown>) => call('POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, ...extra });

describe('queue and cancellation', () => {
  test('a full queue answers 429 with Retry-After, and a waiting request runs once a slot frees', async () => {
    const opts: OpenAiApiOptions = { backend, maxActive: 1, maxQueue: 1 };
    const busy = createOpenAiApi(opts);
    const first = await busy.handle(apiRequest('POST', '/v1/completions', { prompt: 'Once', max_tokens: 4, stream: true }));
    const second = busy.handle(apiRequest('POST', '/v1/completions', { prompt: 'Once', max_tokens: 4 }));
    const third = await apiCall(busy, 'POST', '/v1/completions', { prompt: 'Once', max_tokens: 4 });
    expect(third.status).toBe(429);
    expect(third.headers['retry-after']).toBe('1');
    expect(third.json.error.type).toBe('rate_limit_error');
    expect(busy.queue.waiting).toBe(1);
    await responseText(first);
    expect((await second).status).toBe(200);
    expect(busy.queue.active).toBe(0);
  });

  test('GET /health counts a request that holds a slot but waits for KV blocks as waiting, not running', async () => {
    // A budget of one byte: the pool holds exactly one context, so the second request must wait for blocks.
    const small = await LocalBackend.open(await testModelPath('stories260K.gguf'), { threads: 1, kvBudgetBytes: 1 });
    try {
      const target = createOpenAiApi({ backend: small, maxActive: 4 });
      const health = async () => (await apiCall(target, 'GET', '/health')).json;
      expect(await health()).toMatchObject({ status: 'serving', running: 0, waiting: 0 });
      const controller = new AbortController();
      const first = await target.handle(apiRequest('POST', '/v1/completions', { prompt: 'Once', max_tokens: 2000, stream: true }, { signal: controller.signal }));
      if (!('stream' in first)) throw new Error('expected a stream');
      const it = first.stream[Symbol.asyncIterator]();
      await it.next();
      await it.next();
      const second = target.handle(apiRequest('POST', '/v1/completions', { prompt: 'Once', max_tokens: 100 }));
      await eventually(() => small.waitingForAdmission() === 1, 'the second request waits for KV blocks');
      expect(target.queue.active).toBe(2);
      expect(await health()).toMatchObject({ status: 'serving', running: 1, waiting: 1 });
      expect(small.stats()).toMatchObject({ running: 1, waiting: 1 });
      controller.abort();
      for (let n = await it.next(); n.done !== true; n = await it.next());
      expect((await second).status).toBe(200);
      expect(await health()).toMatchObject({ status: 'serving', running: 0, waiting: 0 });
    } finally {
      await small.close();
    }
  });

  test('a request cancelled while waiting for a slot leaves the queue', async () => {
    const busy = createOpenAiApi({ backend, maxActive: 1, maxQueue: 4 });
    const first = await busy.handle(apiRequest('POST', '/v1/completions', { prompt: 'Once', max_tokens: 4, stream: true }));
    const controller = new AbortController();
    const waiting = busy.handle(apiRequest('POST', '/v1/completions', { prompt: 'Once', max_tokens: 4 }, { signal: controller.signal }));
    await eventually(() => busy.queue.waiting === 1, 'the request waits');
    controller.abort();
    expect((await waiting).status).toBe(499);
    expect(busy.queue.waiting).toBe(0);
    await responseText(first);
    expect(busy.queue.active).toBe(0);
  });
});

describe('checks before generating', () => {
  test('max_tokens beyond the context is clamped to it and ends with finish reason length (llama-server), not a 400', async () => {
    const r = await chatHi({ max_tokens: 1_000_000, temperature: 0, logit_bias: { [String(backend.prepare({ kind: 'ids', ids: [2] }).ids[0])]: -100 } });
    expect(r.status).toBe(200);
    expect(r.json.choices[0].finish_reason).toBe('length');
    expect(r.json.usage.total_tokens).toBe(backend.contextTokens);
  });

  test('logit_bias for a token outside the vocabulary, or out of range, is a 400 naming it', async () => {
    expect((await chat({ logit_bias: { '999999': 1 } })).json.error.param).toBe('logit_bias');
    expect((await chat({ logit_bias: { '5': 101 } })).json.error.param).toMatch(/^logit_bias/);
  });
});
