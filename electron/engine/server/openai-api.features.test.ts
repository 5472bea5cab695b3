// The OpenAI parameters and endpoints beyond plain chat, in-process against stories260K:
// logprobs, logit_bias, n > 1, prompt batches, echo with prompt logprobs, many stops, nulls,
// refusals that name the parameter, /v1/embeddings, /v1/responses, /tokenize, /detokenize,
// /apply-template, the 404 that lists the endpoints and the per-request log.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { LocalBackend } from './local-backend.js';
import { createOpenAiApi } from './openai-api.js';
import type { ApiResponse, OpenAiApi, RequestLogEntry } from './openai-api.js';
import { parseSse } from './test-helpers.js';

let backend: LocalBackend;
let api: OpenAiApi;
const logged: RequestLogEntry[] = [];

beforeAll(async () => {
  backend = await LocalBackend.open(await testModelPath('stories260K.gguf'), { threads: 1 });
  api = createOpenAiApi({ backend, onRequestDone: (e) => logged.push(e) });
});
afterAll(async () => {
  await backend?.close();
});

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; text: string; json: any; res: ApiResponse }> {
  const bytes = Buffer.from(body === undefined ? '' : JSON.stringify(body));
  const res = await api.handle({
    method,
    path,
    headers: { 'content-type': 'application/json' },
    body: (async function* () {
      yield bytes;
    })(),
    signal: new AbortController().signal,
  });
  let text = '';
  if ('body' in res) text = res.body;
  else for await (const chunk of res.stream) text += chunk;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json, res };
}

const chat = (extra: Record<string, unknown>) => call('POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 8, ...extra });
const complete = (extra: Record<string, unknown>) => call('POST', '/v1/completions', { prompt: 'Once upon a time', max_tokens: 8, ...extra });

describe('logprobs and logit_bias', () => {
  test('chat logprobs give each token, its log-probability and the top alternatives; greedy picks the first of them', async () => {
    const r = await chat({ temperature: 0, logprobs: true, top_logprobs: 3 });
    expect(r.status).toBe(200);
    const choice = r.json.choices[0];
    const content = choice.logprobs.content as Array<{ token: string; logprob: number; bytes: number[]; top_logprobs: Array<{ token: string; logprob: number }> }>;
    expect(content.length).toBe(r.json.usage.completion_tokens);
    expect(content.map((c) => c.token).join('')).toBe(choice.message.content);
    for (const c of content) {
      expect(c.top_logprobs).toHaveLength(3);
      expect(c.top_logprobs[0]!.token).toBe(c.token);
      expect(c.top_logprobs[0]!.logprob).toBeCloseTo(c.logprob, 6);
      expect(c.logprob).toBeLessThanOrEqual(0);
      expect(c.top_logprobs[1]!.logprob).toBeLessThanOrEqual(c.top_logprobs[0]!.logprob);
      expect(Buffer.from(c.bytes).toString('utf8')).toBe(c.token);
    }
  });

  test('top_logprobs without logprobs is a 400 naming it; more than 20 too', async () => {
    expect((await chat({ top_logprobs: 2 })).json.error.param).toBe('top_logprobs');
    expect((await chat({ logprobs: true, top_logprobs: 21 })).json.error.param).toBe('top_logprobs');
  });

  test('streamed chat chunks carry the logprobs of their tokens', async () => {
    const r = await chat({ temperature: 0, logprobs: true, top_logprobs: 1, stream: true });
    const { events } = parseSse(r.text);
    const entries = events.flatMap((e: any) => e.choices[0]?.logprobs?.content ?? []);
    const text = events.map((e: any) => e.choices[0]?.delta?.content ?? '').join('');
    expect(entries.map((c: any) => c.token).join('')).toBe(text);
    expect(entries.length).toBeGreaterThan(0);
  });

  test('a bias of -100 bans a token and +100 forces it', async () => {
    const greedy = await complete({ temperature: 0, logprobs: 0 });
    const first = greedy.json.choices[0].logprobs.tokens[0] as string;
    // Every id whose piece is the one the greedy run began with (a byte token can spell it too).
    const firstIds = Array.from({ length: backend.vocabSize }, (_, id) => id).filter((id) => backend.tokenPiece(id) === first);
    const banned = await complete({ temperature: 0, logprobs: 0, logit_bias: Object.fromEntries(firstIds.map((id) => [id, -100])) });
    expect(banned.json.choices[0].logprobs.tokens[0]).not.toBe(first);
    const forcedId = backend.tokenize('cat', { addSpecial: false, parseSpecial: false }).at(-1)!;
    const forced = await complete({ temperature: 1, seed: 3, max_tokens: 4, logit_bias: { [forcedId]: 100 } });
    expect(forced.json.choices[0].text).toBe(backend.tokenPiece(forcedId).repeat(4));
  });

  test('logit_bias for a token outside the vocabulary, or out of range, is a 400 naming it', async () => {
    expect((await chat({ logit_bias: { '999999': 1 } })).json.error.param).toBe('logit_bias');
    expect((await chat({ logit_bias: { '5': 101 } })).json.error.param).toMatch(/^logit_bias/);
  });

  test('completions echo with logprobs scores the prompt: its first token has none, the rest do', async () => {
    const r = await complete({ temperature: 0, echo: true, logprobs: 2, max_tokens: 4 });
    const c = r.json.choices[0];
    const promptIds = backend.prepare({ kind: 'text', text: 'Once upon a time' }).ids;
    expect(c.text.startsWith('Once upon a time')).toBe(true);
    expect(c.logprobs.tokens.length).toBe(promptIds.length + r.json.usage.completion_tokens);
    expect(c.logprobs.token_logprobs[0]).toBeNull();
    expect(c.logprobs.top_logprobs[0]).toBeNull();
    for (const lp of c.logprobs.token_logprobs.slice(1)) expect(lp).toBeLessThanOrEqual(0);
    expect(Object.keys(c.logprobs.top_logprobs[1]).length).toBeLessThanOrEqual(2);
    const offsets = c.logprobs.text_offset as number[];
    expect(offsets).toEqual([...offsets].sort((a, b) => a - b));
  });
});

describe('choices and prompts', () => {
  test('n gives independent choices with their own index; the same seed gives the same choices', async () => {
    const a = await chat({ n: 3, temperature: 1, seed: 11 });
    const b = await chat({ n: 3, temperature: 1, seed: 11 });
    expect(a.json.choices.map((c: any) => c.index)).toEqual([0, 1, 2]);
    expect(b.json.choices.map((c: any) => c.message.content)).toEqual(a.json.choices.map((c: any) => c.message.content));
    expect(new Set(a.json.choices.map((c: any) => c.message.content)).size).toBeGreaterThan(1);
    expect(a.json.usage.completion_tokens).toBe(24);
    expect((await chat({ n: 9 })).json.error.param).toBe('n');
  });

  test('a stream with n = 2 interleaves both choices, each with its index and its own finish', async () => {
    const whole = await chat({ n: 2, temperature: 1, seed: 5 });
    const r = await chat({ n: 2, temperature: 1, seed: 5, stream: true });
    const { events, done } = parseSse(r.text);
    expect(done).toBe(true);
    for (const i of [0, 1]) {
      const mine = events.filter((e: any) => e.choices[0]?.index === i);
      expect(mine.map((e: any) => e.choices[0].delta.content ?? '').join('')).toBe(whole.json.choices[i].message.content);
      expect((mine.at(-1) as any).choices[0].finish_reason).toBe('length');
    }
  });

  test('a prompt array gives one choice per prompt, each as that prompt alone would', async () => {
    const prompts = ['The cat', 'Once upon a time'];
    const batch = await call('POST', '/v1/completions', { prompt: prompts, max_tokens: 6, temperature: 0 });
    const alone = await Promise.all(prompts.map((prompt) => call('POST', '/v1/completions', { prompt, max_tokens: 6, temperature: 0 })));
    expect(batch.json.choices.map((c: any) => c.index)).toEqual([0, 1]);
    expect(batch.json.choices.map((c: any) => c.text)).toEqual(alone.map((r) => r.json.choices[0].text));
    expect(batch.json.usage.prompt_tokens).toBe(alone[0]!.json.usage.prompt_tokens + alone[1]!.json.usage.prompt_tokens);
    const ids = prompts.map((p) => backend.prepare({ kind: 'text', text: p }).ids);
    const byIds = await call('POST', '/v1/completions', { prompt: ids, max_tokens: 6, temperature: 0, n: 2 });
    expect(byIds.json.choices.map((c: any) => c.index)).toEqual([0, 1, 2, 3]);
    expect(byIds.json.choices[2].text).toBe(alone[1]!.json.choices[0].text);
  });

  test('16 stop sequences are accepted, 17 are a 400 naming stop', async () => {
    const stop = Array.from({ length: 16 }, (_, i) => `never${i}`);
    expect((await chat({ stop })).status).toBe(200);
    expect((await chat({ stop: [...stop, 'x'] })).json.error.param).toBe('stop');
  });

  test('nulls are accepted wherever OpenAI accepts them', async () => {
    const r = await call('POST', '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Hi', name: null }],
      max_tokens: 2,
      user: null,
      n: null,
      logprobs: null,
      top_logprobs: null,
      logit_bias: null,
      stop: null,
      seed: null,
      temperature: null,
      stream: null,
      stream_options: null,
      store: false,
      metadata: { a: 'b' },
      service_tier: 'auto',
    });
    expect(r.status).toBe(200);
  });
});

describe('refusals name the parameter', () => {
  test.each([
    ['audio', { audio: { voice: 'alloy', format: 'wav' } }],
    ['modalities', { modalities: ['text', 'audio'] }],
    ['prediction', { prediction: { type: 'content', content: 'x' } }],
    ['functions', { functions: [{ name: 'f', parameters: { type: 'object' } }] }],
  ])('%s', async (param, extra) => {
    const r = await chat(extra);
    expect(r.status).toBe(400);
    expect(r.json.error.param).toBe(param);
  });

  test("modalities ['text'] asks for nothing and is accepted", async () => {
    expect((await chat({ modalities: ['text'] })).status).toBe(200);
  });

  test('suffix on a model without fill-in-the-middle tokens, and best_of other than n', async () => {
    const s = await complete({ suffix: 'The end.' });
    expect(s.status).toBe(400);
    expect(s.json.error).toMatchObject({ param: 'suffix' });
    expect(s.json.error.message).toMatch(/fill-in-the-middle/);
    expect((await complete({ best_of: 3 })).json.error.param).toBe('best_of');
  });
});

describe('embeddings', () => {
  test('one unit vector of the hidden size per input, the same for the same text, as floats or base64', async () => {
    const r = await call('POST', '/v1/embeddings', { model: 'stories260K', input: ['Once upon a time', 'The cat sat', 'Once upon a time'] });
    expect(r.status).toBe(200);
    const vs = r.json.data.map((d: any) => d.embedding as number[]);
    expect(r.json.data.map((d: any) => d.index)).toEqual([0, 1, 2]);
    expect(vs[0]).toHaveLength(64);
    expect(Math.hypot(...vs[0])).toBeCloseTo(1, 5);
    expect(vs[2]).toEqual(vs[0]);
    expect(vs[1]).not.toEqual(vs[0]);
    expect(r.json.usage.prompt_tokens).toBeGreaterThan(0);
    const b = await call('POST', '/v1/embeddings', { input: 'Once upon a time', encoding_format: 'base64' });
    const bytes = Buffer.from(b.json.data[0].embedding as string, 'base64');
    expect(Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4))).toEqual(vs[0]);
    expect((await call('POST', '/v1/embeddings', { input: 'x', dimensions: 32 })).json.error.param).toBe('dimensions');
  });

  test('a model split into stages gives the same embedding', async () => {
    const split = await LocalBackend.open(await testModelPath('stories260K.gguf'), { threads: 1, split: [{ start: 0, end: 2 }, { start: 2, end: 5 }] });
    try {
      const ids = backend.prepare({ kind: 'text', text: 'Once upon a time' }).ids;
      const whole = await backend.embed(ids, new AbortController().signal);
      const parts = await split.embed(ids, new AbortController().signal);
      for (let i = 0; i < whole.length; i++) expect(parts[i]!).toBeCloseTo(whole[i]!, 5);
    } finally {
      await split.close();
    }
  });
});

describe('the Responses API', () => {
  test('create: instructions and input items become the chat prompt; the output is one message', async () => {
    const body = { instructions: 'Tell a story.', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }] }], max_output_tokens: 6, temperature: 0 };
    const r = await call('POST', '/v1/responses', body);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ object: 'response', status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, usage: { output_tokens: 6 } });
    const viaChat = await call('POST', '/v1/chat/completions', {
      messages: [
        { role: 'system', content: 'Tell a story.' },
        { role: 'user', content: 'Once upon a time' },
      ],
      max_tokens: 6,
      temperature: 0,
    });
    expect(r.json.output[0]).toMatchObject({ type: 'message', role: 'assistant', status: 'completed' });
    expect(r.json.output[0].content[0]).toMatchObject({ type: 'output_text', text: viaChat.json.choices[0].message.content });
  });

  test('stream: created, deltas, done events and completed, numbered in order', async () => {
    const r = await call('POST', '/v1/responses', { input: 'Once upon a time', max_output_tokens: 5, temperature: 0, stream: true });
    const events = r.text
      .split('\n\n')
      .filter((b) => b.trim() !== '')
      .map((b) => {
        const [name, data] = b.split('\n') as [string, string];
        const json = JSON.parse(data.slice('data: '.length));
        expect(name).toBe(`event: ${json.type}`);
        return json;
      });
    const types = events.map((e: any) => e.type);
    expect(types.slice(0, 4)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    expect(types.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    expect(events.map((e: any) => e.sequence_number)).toEqual(events.map((_: unknown, i: number) => i));
    const deltas = events.filter((e: any) => e.type === 'response.output_text.delta').map((e: any) => e.delta).join('');
    expect(events.at(-1).response.output[0].content[0].text).toBe(deltas);
  });

  test('stateful parameters are refused by name', async () => {
    expect((await call('POST', '/v1/responses', { input: 'x', previous_response_id: 'resp_1' })).json.error.param).toBe('previous_response_id');
    expect((await call('POST', '/v1/responses', { input: 'x', tools: [{ type: 'web_search' }] })).json.error.param).toBe('tools.0.type');
  });

  const weather = { type: 'function', name: 'get_weather', description: 'The weather of a city', parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'] } };

  test('function tools: a named tool_choice gives a function_call item whose arguments follow the schema', async () => {
    const r = await call('POST', '/v1/responses', { input: 'Weather in Paris?', tools: [weather], tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 200 });
    expect(r.status).toBe(200);
    const calls = r.json.output.filter((o: any) => o.type === 'function_call');
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ name: 'get_weather', status: 'completed', call_id: expect.stringMatching(/^call_/) });
    expect(typeof JSON.parse(calls[0].arguments).city).toBe('string');
    expect(r.json.status).toBe('completed');
  });

  test('function tools stream as output_item and function_call_arguments events', async () => {
    const r = await call('POST', '/v1/responses', { input: 'Weather?', tools: [weather], tool_choice: 'required', max_output_tokens: 200, stream: true });
    const events = r.text
      .split('\n\n')
      .filter((b) => b.trim() !== '')
      .map((b) => JSON.parse(b.split('\n')[1]!.slice('data: '.length)));
    const done = events.find((e: any) => e.type === 'response.function_call_arguments.done');
    expect(done).toMatchObject({ name: 'get_weather' });
    const completed = events.at(-1);
    expect(completed.type).toBe('response.completed');
    expect(completed.response.output.find((o: any) => o.type === 'function_call').arguments).toBe(done.arguments);
  });

  test('a function_call and its output in the input are rendered as the tool round trip', async () => {
    const input = [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
    ];
    const r = await call('POST', '/v1/responses', { input, tools: [weather], tool_choice: 'none', max_output_tokens: 4, temperature: 0 });
    expect(r.status).toBe(200);
    const viaChat = await call('POST', '/v1/chat/completions', {
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      ],
      tools: [{ type: 'function', function: { name: weather.name, description: weather.description, parameters: weather.parameters } }],
      tool_choice: 'none',
      max_tokens: 4,
      temperature: 0,
    });
    expect(r.json.output[0].content[0].text).toBe(viaChat.json.choices[0].message.content);
  });

  test('text.format json_schema constrains the output to the schema', async () => {
    const schema = { type: 'object', properties: { name: { type: 'string', enum: ['Ada', 'Bob'] } }, required: ['name'], additionalProperties: false };
    const r = await call('POST', '/v1/responses', { input: 'A name', text: { format: { type: 'json_schema', name: 'person', schema, strict: true } }, max_output_tokens: 100 });
    expect(Object.keys(JSON.parse(r.json.output[0].content[0].text))).toEqual(['name']);
  });
});

describe("llama-server's utility endpoints", () => {
  test('/tokenize and /detokenize round-trip; with_pieces gives each piece', async () => {
    const t = await call('POST', '/tokenize', { content: 'Once upon a time' });
    expect(t.json.tokens).toEqual(backend.tokenize('Once upon a time', { addSpecial: false, parseSpecial: true }));
    const d = await call('POST', '/detokenize', { tokens: t.json.tokens });
    expect(d.json.content).toBe('Once upon a time');
    const p = await call('POST', '/tokenize', { content: 'Once', with_pieces: true, add_special: true });
    expect(p.json.tokens[0]).toMatchObject({ id: 1 });
    expect(p.json.tokens.slice(1).map((x: any) => x.piece).join('')).toBe(' Once');
  });

  test('/apply-template renders the chat prompt the model would get', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const r = await call('POST', '/apply-template', { messages });
    expect(r.json.prompt).toBe(backend.prepare({ kind: 'chat', messages }).text);
  });

  test('an unknown path is a 404 naming it and listing the endpoints', async () => {
    const r = await call('POST', '/v1/audio/speech', {});
    expect(r.status).toBe(404);
    expect(r.json.error.message).toContain('/v1/audio/speech');
    for (const e of ['/v1/chat/completions', '/v1/embeddings', '/v1/responses', '/tokenize']) expect(r.json.error.message).toContain(e);
  });

  test('every request is logged once with its status and tokens, streams when they end', async () => {
    logged.length = 0;
    await chat({ max_tokens: 3, temperature: 0 });
    await chat({ max_tokens: 3, temperature: 0, stream: true });
    await call('GET', '/v1/nothing');
    expect(logged.map((e) => [e.method, e.path, e.status, e.tokens])).toEqual([
      ['POST', '/v1/chat/completions', 200, 3],
      ['POST', '/v1/chat/completions', 200, 3],
      ['GET', '/v1/nothing', 404, 0],
    ]);
  });
});
