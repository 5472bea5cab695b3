// Black-box tests of a real server on loopback serving stories260K: the official `openai` SDK and
// the Vercel AI SDK (@ai-sdk/openai-compatible) streaming and not, greedy exactness against the
// runtime, 16 concurrent streams, 429 on a full queue, disconnects and shutdown that give the KV
// blocks back, a slow reader that stalls no one, and OpenAI errors as the SDKs see them.
import { connect } from 'node:net';
import { request as httpRequest } from 'node:http';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, streamText } from 'ai';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import type { LocalModel } from '../runtime/local-model.js';
import { startOpenAiServer } from './http-server.js';
import type { OpenAiServer, OpenAiServerOptions } from './http-server.js';
import { LocalBackend } from './local-backend.js';
import { directGreedy, eventually, openDirect, parseSse } from './test-helpers.js';

const MODEL = 'stories260K';
let backend: LocalBackend;
let direct: LocalModel;
const servers: OpenAiServer[] = [];

beforeAll(async () => {
  const path = await testModelPath('stories260K.gguf');
  backend = await LocalBackend.open(path, { threads: 1, maxBatch: 16 });
  direct = await openDirect(path);
});
afterAll(async () => {
  for (const s of servers) await s.close();
  await backend?.close();
  await direct?.dispose();
});

async function serve(opts: OpenAiServerOptions = {}, b: LocalBackend = backend): Promise<OpenAiServer> {
  const s = await startOpenAiServer(b, { port: 0, ...opts });
  servers.push(s);
  return s;
}

function kvPoolIsFull(): boolean {
  return backend.kvPool.freeBlocks === backend.kvPool.totalBlocks;
}

describe('the official openai SDK', () => {
  let server: OpenAiServer;
  let client: OpenAI;
  beforeAll(async () => {
    server = await serve({ apiKey: 'test-key', maxActive: 16 });
    client = new OpenAI({ baseURL: server.url, apiKey: 'test-key', maxRetries: 0 });
  });

  test('listens on loopback on a port chosen for it', () => {
    expect(server.host).toBe('127.0.0.1');
    expect(server.url).toBe(`http://127.0.0.1:${server.port}/v1`);
    expect(server.port).toBeGreaterThan(0);
  });

  test('lists the model', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL]);
  });

  test('gets a chat completion with usage', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 12, temperature: 0 });
    expect(r.choices[0]!.finish_reason).toBe('length');
    expect(r.choices[0]!.message.role).toBe('assistant');
    expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(r.usage).toMatchObject({ completion_tokens: 12 });
  });

  test('streams a chat completion with the same text as the non-streamed one', async () => {
    const params = { model: MODEL, messages: [{ role: 'user' as const, content: 'Tell me a story' }], max_tokens: 12, temperature: 0 };
    const whole = await client.chat.completions.create(params);
    const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    expect(text).toBe(whole.choices[0]!.message.content);
    expect(finish).toBe('length');
    expect(usage).toEqual(whole.usage);
  });

  test('greedy completions equal the runtime greedy generation, streamed and not', async () => {
    const expected = await directGreedy(direct, 'Once upon a time', 48);
    const whole = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 48, temperature: 0 });
    expect(whole.choices[0]!.text).toBe(expected.pieces.join(''));
    expect(whole.usage!.completion_tokens).toBe(expected.ids.length);
    const pieces: string[] = [];
    for await (const chunk of await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 48, temperature: 0, stream: true })) {
      if (chunk.choices[0]!.finish_reason === null) pieces.push(chunk.choices[0]!.text);
    }
    expect(pieces).toEqual(expected.pieces);
  });

  test('sees OpenAI errors: wrong key 401, unknown model 404, bad value 400', async () => {
    const wrongKey = new OpenAI({ baseURL: server.url, apiKey: 'wrong', maxRetries: 0 });
    await expect(wrongKey.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    const notFound = client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }] });
    await expect(notFound).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const bad = client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], temperature: 5 });
    await expect(bad).rejects.toMatchObject({ status: 400, param: 'temperature', type: 'invalid_request_error' });
  });

  test('16 simultaneous streaming clients all complete with their greedy text', async () => {
    const prompts = Array.from({ length: 16 }, (_, i) => `${['Once upon a time', 'The cat', 'Tom had a ball', 'One day, Lily'][i % 4]} ${'and '.repeat(Math.floor(i / 4))}`.trim());
    const expected: string[] = [];
    for (const p of prompts) expected.push((await directGreedy(direct, p, 24)).pieces.join(''));
    const texts = await Promise.all(
      prompts.map(async (prompt) => {
        let text = '';
        for await (const chunk of await client.completions.create({ model: MODEL, prompt, max_tokens: 24, temperature: 0, stream: true })) text += chunk.choices[0]?.text ?? '';
        return text;
      }),
    );
    expect(texts).toEqual(expected);
    expect(kvPoolIsFull()).toBe(true);
  });
});

describe('the Vercel AI SDK (OpenAI-compatible provider)', () => {
  let provider: ReturnType<typeof createOpenAICompatible>;
  beforeAll(async () => {
    const server = await serve();
    provider = createOpenAICompatible({ name: 'kiwi', baseURL: server.url, includeUsage: true });
  });

  test('generates chat text with usage', async () => {
    const r = await generateText({ model: provider(MODEL), prompt: 'Tell me a story', maxOutputTokens: 10, temperature: 0 });
    expect(r.text.length).toBeGreaterThan(0);
    expect(r.finishReason).toBe('length');
    expect(r.usage.outputTokens).toBe(10);
  });

  test('streams chat text equal to the generated text', async () => {
    const opts = { model: provider(MODEL), prompt: 'Tell me a story', maxOutputTokens: 10, temperature: 0 };
    const whole = await generateText(opts);
    const r = streamText(opts);
    let text = '';
    for await (const piece of r.textStream) text += piece;
    expect(text).toBe(whole.text);
    expect((await r.usage).outputTokens).toBe(10);
  });

  test('completes text with the completion model exactly as the runtime does', async () => {
    // The SDK sends the prompt as 'user:\n...\n\nassistant:\n' with the stop sequence '\nuser:'.
    const full = (await directGreedy(direct, 'user:\nOne day, Lily\n\nassistant:\n', 20)).pieces.join('');
    const cut = full.indexOf('\nuser:');
    const r = await generateText({ model: provider.completionModel(MODEL), prompt: 'One day, Lily', maxOutputTokens: 20, temperature: 0 });
    expect(r.text).toBe(cut >= 0 ? full.slice(0, cut) : full);
    expect(r.text.length).toBeGreaterThan(0);
  });
});

describe('raw HTTP', () => {
  const body = (value: unknown) => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(value) });

  test('a full queue answers 429 with Retry-After', async () => {
    const server = await serve({ maxActive: 1, maxQueue: 0 });
    const controller = new AbortController();
    const first = await fetch(`${server.url}/completions`, { ...body({ prompt: 'Once', max_tokens: 1500, stream: true }), signal: controller.signal });
    expect(first.status).toBe(200);
    const second = await fetch(`${server.url}/completions`, body({ prompt: 'Once', max_tokens: 4 }));
    expect(second.status).toBe(429);
    expect(second.headers.get('retry-after')).toBe('1');
    expect(((await second.json()) as { error: { type: string } }).error.type).toBe('rate_limit_error');
    const cancelled = backend.stats().cancelled;
    controller.abort();
    await eventually(() => backend.stats().cancelled === cancelled + 1 && server.inFlight === 0 && kvPoolIsFull(), 'the first request is cancelled');
  });

  test('a client that disconnects mid-stream frees its KV blocks', async () => {
    const server = await serve();
    const controller = new AbortController();
    const res = await fetch(`${server.url}/completions`, { ...body({ prompt: 'Once upon a time', max_tokens: 1500, stream: true }), signal: controller.signal });
    const reader = res.body!.getReader();
    await reader.read();
    expect(kvPoolIsFull()).toBe(false);
    const cancelled = backend.stats().cancelled;
    controller.abort();
    await eventually(() => backend.stats().cancelled === cancelled + 1, 'the generation is cancelled');
    await eventually(() => server.inFlight === 0 && kvPoolIsFull() && server.api.queue.active === 0, 'the pool is full again');
  });

  test('a disconnect mid-stream leaves the streams decoded in the same batch intact', async () => {
    const server = await serve();
    const pool = backend.kvPool;
    const prompts = ['Once upon a time', 'The cat', 'Tom had a ball', 'One day, Lily'];
    const expected: string[] = [];
    for (const p of prompts) expected.push((await directGreedy(direct, p, 150)).pieces.join(''));
    const controller = new AbortController();
    const doomed = await fetch(`${server.url}/completions`, { ...body({ prompt: 'Once upon a time', max_tokens: 1500, stream: true }), signal: controller.signal });
    await doomed.body!.getReader().read();
    const others = prompts.map(async (prompt) => {
      const { events, done } = parseSse(await (await fetch(`${server.url}/completions`, body({ prompt, max_tokens: 150, temperature: 0, stream: true }))).text());
      expect(done).toBe(true);
      return events.map((e: any) => e.choices[0]?.text ?? '').join('');
    });
    // Cancel once all four hold their KV blocks, i.e. while they are being decoded with the doomed one.
    const cancelled = backend.stats().cancelled;
    const held = pool.blocksFor(5 + 1500) + prompts.reduce((n, p) => n + pool.blocksFor(direct.tokenizer.encode(p).length + 150), 0);
    await eventually(() => pool.totalBlocks - pool.freeBlocks >= held, 'the other requests run');
    controller.abort();
    expect(await Promise.all(others)).toEqual(expected);
    await eventually(() => server.inFlight === 0 && kvPoolIsFull(), 'the pool is full again');
    expect(backend.stats().cancelled).toBe(cancelled + 1);
  });

  test('refuses a body over the limit with 413, declared or streamed', async () => {
    const server = await serve({ maxBodyBytes: 2048 });
    const declared = await fetch(`${server.url}/completions`, body({ prompt: 'x'.repeat(4096) }));
    expect(declared.status).toBe(413);
    // Chunked, no Content-Length: refused while reading, before the whole body arrived.
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(`${server.url}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.write('{"prompt": "');
      const chunk = 'x'.repeat(1024);
      let sent = 0;
      const pump = (): void => {
        if (sent++ < 64 && !req.destroyed) req.write(chunk, () => setImmediate(pump));
      };
      pump();
    });
    expect(status).toBe(413);
  });

  test('a client that stops reading stalls no other client', async () => {
    const server = await serve();
    const sock = connect(server.port, '127.0.0.1');
    await new Promise<void>((resolve) => sock.once('connect', () => resolve()));
    const payload = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 1500, stream: true });
    sock.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
    sock.pause(); // never read: the server's writes to it back up
    await eventually(() => !kvPoolIsFull(), 'the slow request runs');
    const expected = await directGreedy(direct, 'The cat', 16);
    const r = (await (await fetch(`${server.url}/completions`, body({ prompt: 'The cat', max_tokens: 16, temperature: 0 }))).json()) as { choices: { text: string }[] };
    expect(r.choices[0]!.text).toBe(expected.pieces.join(''));
    const cancelled = backend.stats().cancelled;
    sock.destroy();
    await eventually(() => backend.stats().cancelled === cancelled + 1 && server.inFlight === 0 && kvPoolIsFull(), 'the slow request is cancelled');
  });

  test('answers 503 while the model loads, then serves', async () => {
    const loading = new LocalBackend(await testModelPath('stories260K.gguf'), { threads: 1 });
    const server = await serve({}, loading);
    try {
      const res = await fetch(`${server.url}/chat/completions`, body({ messages: [{ role: 'user', content: 'Hi' }] }));
      expect(res.status).toBe(503);
      expect((await fetch(`http://127.0.0.1:${server.port}/health`)).status).toBe(503);
      await loading.load();
      expect((await fetch(`http://127.0.0.1:${server.port}/health`)).status).toBe(200);
      expect((await fetch(`${server.url}/chat/completions`, body({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 }))).status).toBe(200);
    } finally {
      await server.close();
      await loading.close();
    }
  });

  test('closing the server cancels a running stream with an error event and frees its blocks', async () => {
    const server = await startOpenAiServer(backend, { port: 0, shutdownGraceMs: 50 });
    const res = await fetch(`${server.url}/completions`, body({ prompt: 'Once upon a time', max_tokens: 1500, stream: true }));
    const reader = res.body!.getReader();
    await reader.read();
    const cancelled = backend.stats().cancelled;
    await server.close();
    expect(backend.stats().cancelled).toBe(cancelled + 1);
    let rest = '';
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
    const { events, done } = parseSse(rest.slice(rest.indexOf('data: ')));
    expect(done).toBe(false);
    expect(events.at(-1)).toMatchObject({ error: { code: 'server_shutting_down' } });
    await eventually(kvPoolIsFull, 'the pool is full again');
    await expect(fetch(`${server.url}/models`)).rejects.toThrow();
  });
});
