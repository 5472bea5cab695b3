// The OpenAI API core in-process (no sockets) against stories260K in a LocalBackend: response
// shapes, streaming, stop sequences, greedy exactness against the runtime, every error status, the
// queue's 429 and cancellation that gives the KV blocks back.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import type { LocalModel } from '../runtime/local-model.js';
import type { CompletionBackend } from '../completion/completion-backend.js';
import { LocalBackend } from './local-backend.js';
import { createOpenAiApi } from './openai-api.js';
import type { ApiRequest, ApiResponse, OpenAiApi, OpenAiApiOptions } from './openai-api.js';
import { directGreedy, eventually, openDirect, parseSse } from './test-helpers.js';

let backend: LocalBackend;
let direct: LocalModel;
let api: OpenAiApi;

beforeAll(async () => {
  const path = await testModelPath('stories260K.gguf');
  backend = await LocalBackend.open(path, { threads: 1 });
  direct = await openDirect(path);
  api = createOpenAiApi({ backend });
});
afterAll(async () => {
  await backend?.close();
  await direct?.dispose();
});

function request(method: string, path: string, body?: unknown, opts: { headers?: Record<string, string>; signal?: AbortSignal; raw?: string } = {}): ApiRequest {
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

async function text(res: ApiResponse): Promise<string> {
  if ('body' in res) return res.body;
  let out = '';
  for await (const chunk of res.stream) out += chunk;
  return out;
}

async function call(target: OpenAiApi, method: string, path: string, body?: unknown, opts: Parameters<typeof request>[3] = {}) {
  const res = await target.handle(request(method, path, body, opts));
  return { status: res.status, headers: res.headers, text: await text(res) };
}

async function jsonCall(target: OpenAiApi, method: string, path: string, body?: unknown, opts: Parameters<typeof request>[3] = {}) {
  const r = await call(target, method, path, body, opts);
  return { ...r, json: JSON.parse(r.text) as Record<string, any> };
}

describe('chat completions', () => {
  test('answers a chat completion with the assistant message, finish reason and usage', async () => {
    const r = await jsonCall(api, 'POST', '/v1/chat/completions', { model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, temperature: 0 });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ object: 'chat.completion', model: 'stories260K', choices: [{ index: 0, message: { role: 'assistant' }, finish_reason: 'length' }] });
    expect(r.json.id).toMatch(/^chatcmpl-/);
    expect(typeof r.json.choices[0].message.content).toBe('string');
    const u = r.json.usage;
    expect(u.completion_tokens).toBe(8);
    expect(u.prompt_tokens).toBe(backend.prepare({ kind: 'chat', messages: [{ role: 'user', content: 'Hi' }] }).ids.length);
    expect(u.total_tokens).toBe(u.prompt_tokens + 8);
  });

  test('streams a role delta first, then content deltas, the finish reason, usage and [DONE]', async () => {
    const body = { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true } };
    const r = await call(api, 'POST', '/v1/chat/completions', body);
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toMatch(/^text\/event-stream/);
    const { events, done } = parseSse(r.text);
    expect(done).toBe(true);
    expect(events[0]).toMatchObject({ object: 'chat.completion.chunk', choices: [{ delta: { role: 'assistant', content: '' }, finish_reason: null }], usage: null });
    const last = events[events.length - 1]!;
    expect(last).toMatchObject({ choices: [], usage: { completion_tokens: 8 } });
    expect(events[events.length - 2]).toMatchObject({ choices: [{ delta: {}, finish_reason: 'length' }] });
    const streamed = events.slice(1, -2).map((e: any) => e.choices[0].delta.content).join('');
    const whole = await jsonCall(api, 'POST', '/v1/chat/completions', { ...body, stream: false });
    expect(streamed).toBe(whole.json.choices[0].message.content);
    expect(new Set(events.map((e) => e.id)).size).toBe(1);
  });

  test('without include_usage a stream has no usage chunk', async () => {
    const r = await call(api, 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, stream: true });
    const { events } = parseSse(r.text);
    expect(events.every((e) => !('usage' in e))).toBe(true);
  });

  test('max_completion_tokens limits the completion like max_tokens', async () => {
    const r = await jsonCall(api, 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_completion_tokens: 5 });
    expect(r.json.usage.completion_tokens).toBe(5);
    expect(r.json.choices[0].finish_reason).toBe('length');
  });
});

describe('completions', () => {
  test('greedy output through the API is the runtime greedy generation token for token', async () => {
    const prompt = 'Once upon a time';
    const expected = await directGreedy(direct, prompt, 40);
    const r = await call(api, 'POST', '/v1/completions', { model: 'stories260K', prompt, max_tokens: 40, temperature: 0, stream: true, stream_options: { include_usage: true } });
    const { events } = parseSse(r.text);
    const pieces = events.filter((e: any) => e.choices.length > 0 && e.choices[0].finish_reason === null).map((e: any) => e.choices[0].text);
    expect(pieces).toEqual(expected.pieces);
    expect(events.at(-1)).toMatchObject({ usage: { completion_tokens: expected.ids.length } });
    const whole = await jsonCall(api, 'POST', '/v1/completions', { prompt, max_tokens: 40, temperature: 0 });
    expect(whole.json).toMatchObject({ object: 'text_completion', choices: [{ text: expected.pieces.join(''), finish_reason: 'length' }] });
  });

  test('accepts a prompt as token ids and echoes the prompt when asked', async () => {
    const ids = direct.tokenizer.encode('Once upon a time', { parseSpecial: true });
    const expected = await directGreedy(direct, 'Once upon a time', 6);
    const r = await jsonCall(api, 'POST', '/v1/completions', { prompt: ids, max_tokens: 6, temperature: 0, echo: true });
    expect(r.json.choices[0].text).toBe(direct.tokenizer.decode(ids, { special: true }) + expected.pieces.join(''));
    expect(r.json.usage.prompt_tokens).toBe(ids.length);
  });

  test('the same seed gives the same sampled text, and penalties and extras are accepted', async () => {
    const body = { prompt: 'The cat', max_tokens: 16, temperature: 0.9, top_p: 0.95, top_k: 40, min_p: 0.05, seed: 42, presence_penalty: 0.5, frequency_penalty: 0.5, repeat_penalty: 1.1 };
    const a = await jsonCall(api, 'POST', '/v1/completions', body);
    const b = await jsonCall(api, 'POST', '/v1/completions', body);
    expect(a.status).toBe(200);
    expect(a.json.choices[0].text).toBe(b.json.choices[0].text);
  });
});

describe('stop sequences', () => {
  // The greedy continuation of this prompt is ", there was a little girl named Lily. She loved ...".
  const prompt = 'Once upon a time';

  test('end the text right before the stop string, with finish reason stop', async () => {
    const full = (await directGreedy(direct, prompt, 30)).pieces.join('');
    const at = full.indexOf('Lily');
    expect(at).toBeGreaterThan(0);
    const r = await jsonCall(api, 'POST', '/v1/completions', { prompt, max_tokens: 30, temperature: 0, stop: ['Lily', 'never appears'] });
    expect(r.json.choices[0]).toMatchObject({ text: full.slice(0, at), finish_reason: 'stop' });
  });

  test('in a stream, never send any part of the stop string', async () => {
    const full = (await directGreedy(direct, prompt, 30)).pieces.join('');
    const stop = 'named Lily';
    const r = await call(api, 'POST', '/v1/completions', { prompt, max_tokens: 30, temperature: 0, stop, stream: true });
    const { events, done } = parseSse(r.text);
    expect(done).toBe(true);
    const streamed = events.map((e: any) => e.choices[0].text).join('');
    expect(streamed).toBe(full.slice(0, full.indexOf(stop)));
    expect((events.at(-1) as any).choices[0].finish_reason).toBe('stop');
  });
});

describe('models and routes', () => {
  test('lists the served model', async () => {
    const r = await jsonCall(api, 'GET', '/v1/models');
    const ctx = backend.contextTokens;
    expect(r.json).toEqual({
      object: 'list',
      data: [
        {
          id: 'stories260K',
          object: 'model',
          created: backend.createdAt,
          owned_by: 'kiwi',
          context_length: ctx,
          max_model_len: ctx,
          meta: { n_ctx: ctx, n_ctx_train: backend.trainContextTokens, n_vocab: 512 },
        },
      ],
    });
    expect((await jsonCall(api, 'GET', '/v1/models/stories260K')).json.id).toBe('stories260K');
    expect((await jsonCall(api, 'GET', '/v1/models/gpt-4')).status).toBe(404);
  });

  test('answers 404 for an unknown route and 405 with Allow for a wrong method', async () => {
    const missing = await jsonCall(api, 'GET', '/v2/things');
    expect(missing.status).toBe(404);
    expect(missing.json.error.type).toBe('not_found_error');
    const wrong = await jsonCall(api, 'GET', '/v1/chat/completions');
    expect(wrong.status).toBe(405);
    expect(wrong.headers.allow).toBe('POST');
  });
});

describe('bad requests', () => {
  const chat = (extra: Record<string, unknown>) => jsonCall(api, 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, ...extra });

  test('malformed JSON is a 400 invalid_request_error', async () => {
    const r = await jsonCall(api, 'POST', '/v1/chat/completions', undefined, { raw: '{"messages": [' });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_json' });
  });

  test('a field of the wrong type is a 400 naming the field', async () => {
    const r = await chat({ temperature: 'hot' });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: 'invalid_request_error', param: 'temperature' });
  });

  test('empty messages are a 400', async () => {
    const r = await jsonCall(api, 'POST', '/v1/chat/completions', { messages: [] });
    expect(r.status).toBe(400);
    expect(r.json.error.param).toBe('messages');
  });

  test('an unknown model is a 404 model_not_found', async () => {
    const r = await chat({ model: 'gpt-4o' });
    expect(r.status).toBe(404);
    expect(r.json.error).toMatchObject({ code: 'model_not_found', param: 'model' });
  });

  test('max_tokens beyond the context is clamped to it and ends with finish reason length (llama-server), not a 400', async () => {
    const r = await chat({ max_tokens: 1_000_000, temperature: 0, logit_bias: { [String(backend.prepare({ kind: 'ids', ids: [2] }).ids[0])]: -100 } });
    expect(r.status).toBe(200);
    expect(r.json.choices[0].finish_reason).toBe('length');
    expect(r.json.usage.total_tokens).toBe(backend.contextTokens);
  });

  test('a prompt that fills the context is a 400 context_length_exceeded', async () => {
    const r = await jsonCall(api, 'POST', '/v1/completions', { prompt: Array.from({ length: backend.contextTokens }, () => 100), max_tokens: 1 });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ code: 'context_length_exceeded' });
  });

  test('a prompt token outside the vocabulary is a 400', async () => {
    const r = await jsonCall(api, 'POST', '/v1/completions', { prompt: [1, 99999] });
    expect(r.status).toBe(400);
  });

  test('a body over the limit is refused with 413 before it is read to the end', async () => {
    const small = createOpenAiApi({ backend, maxBodyBytes: 1024 });
    let chunksRead = 0;
    const req: ApiRequest = {
      ...request('POST', '/v1/completions'),
      body: (async function* () {
        for (let i = 0; i < 1000; i++) {
          chunksRead++;
          yield new Uint8Array(100);
        }
      })(),
    };
    const r = await small.handle(req);
    expect(r.status).toBe(413);
    expect(chunksRead).toBeLessThan(20);
    const declared = await small.handle(request('POST', '/v1/completions', { prompt: 'x' }, { headers: { 'content-length': '5000' } }));
    expect(declared.status).toBe(413);
  });

  test('a configured API key is required: missing or wrong is a 401, the right one passes', async () => {
    const locked = createOpenAiApi({ backend, apiKey: 'sesame' });
    const missing = await jsonCall(locked, 'GET', '/v1/models');
    expect(missing.status).toBe(401);
    expect(missing.json.error).toMatchObject({ type: 'authentication_error', code: 'invalid_api_key' });
    expect((await jsonCall(locked, 'GET', '/v1/models', undefined, { headers: { authorization: 'Bearer nope' } })).status).toBe(401);
    expect((await jsonCall(locked, 'GET', '/v1/models', undefined, { headers: { authorization: 'Bearer sesame' } })).status).toBe(200);
  });

  test('a backend that is not serving answers 503', async () => {
    const loading = new LocalBackend(await testModelPath('stories260K.gguf'));
    const r = await jsonCall(createOpenAiApi({ backend: loading }), 'POST', '/v1/completions', { prompt: 'x' });
    expect(r.status).toBe(503);
    expect(r.json.error.type).toBe('unavailable_error');
  });
});

describe('queue and cancellation', () => {
  test('a full queue answers 429 with Retry-After, and a waiting request runs once a slot frees', async () => {
    const opts: OpenAiApiOptions = { backend, maxActive: 1, maxQueue: 1 };
    const busy = createOpenAiApi(opts);
    const first = await busy.handle(request('POST', '/v1/completions', { prompt: 'Once', max_tokens: 4, stream: true }));
    const second = busy.handle(request('POST', '/v1/completions', { prompt: 'Once', max_tokens: 4 }));
    const third = await jsonCall(busy, 'POST', '/v1/completions', { prompt: 'Once', max_tokens: 4 });
    expect(third.status).toBe(429);
    expect(third.headers['retry-after']).toBe('1');
    expect(third.json.error.type).toBe('rate_limit_error');
    expect(busy.queue.waiting).toBe(1);
    await text(first);
    expect((await second).status).toBe(200);
    expect(busy.queue.active).toBe(0);
  });

  test('a cancelled stream stops generating and gives back its KV blocks and its slot', async () => {
    const pool = backend.kvPool;
    const controller = new AbortController();
    const res = await api.handle(request('POST', '/v1/completions', { prompt: 'Once upon a time', max_tokens: 1500, stream: true }, { signal: controller.signal }));
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
    const res = await target.handle(request('POST', '/v1/completions', { prompt: 'Once upon a time', max_tokens: 1500, stream: true }));
    if (!('stream' in res)) throw new Error('expected a stream');
    const it = res.stream[Symbol.asyncIterator]();
    await it.next();
    await it.return?.();
    expect(closedEarly).toBe(true);
    await eventually(() => backend.kvPool.freeBlocks === backend.kvPool.totalBlocks, 'the KV pool is full again');
    expect(target.queue.active).toBe(0);
  });

  test('GET /health counts a request that holds a slot but waits for KV blocks as waiting, not running', async () => {
    // A budget of one byte: the pool holds exactly one context, so the second request must wait for blocks.
    const small = await LocalBackend.open(await testModelPath('stories260K.gguf'), { threads: 1, kvBudgetBytes: 1 });
    try {
      const target = createOpenAiApi({ backend: small, maxActive: 4 });
      const health = async () => (await jsonCall(target, 'GET', '/health')).json;
      expect(await health()).toMatchObject({ status: 'serving', running: 0, waiting: 0 });
      const controller = new AbortController();
      const first = await target.handle(request('POST', '/v1/completions', { prompt: 'Once', max_tokens: 2000, stream: true }, { signal: controller.signal }));
      if (!('stream' in first)) throw new Error('expected a stream');
      const it = first.stream[Symbol.asyncIterator]();
      await it.next();
      await it.next();
      const second = target.handle(request('POST', '/v1/completions', { prompt: 'Once', max_tokens: 100 }));
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
    const first = await busy.handle(request('POST', '/v1/completions', { prompt: 'Once', max_tokens: 4, stream: true }));
    const controller = new AbortController();
    const waiting = busy.handle(request('POST', '/v1/completions', { prompt: 'Once', max_tokens: 4 }, { signal: controller.signal }));
    await eventually(() => busy.queue.waiting === 1, 'the request waits');
    controller.abort();
    expect((await waiting).status).toBe(499);
    expect(busy.queue.waiting).toBe(0);
    await text(first);
    expect(busy.queue.active).toBe(0);
  });
});
