// POST /v1/chat/completions in-process against stories260K: the response and its stream, logprobs,
// n choices, stop lists, nulls, the parameters refused by name and the fields checked.
import { describe, expect, test } from 'vitest';
import type { LocalBackend } from '../local-backend.js';
import type { OpenAiApi } from '../openai-api.js';
import { apiCall, parseSse, withStoriesApi } from '../test-helpers.js';

let backend: LocalBackend;
let api: OpenAiApi;
const { call, chat } = withStoriesApi((s) => ({ backend, api } = s));

const chatHi = (extra: Record<string, unknown>) => call('POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, ...extra });

describe('chat completions', () => {
  test('answers a chat completion with the assistant message, finish reason and usage', async () => {
    const r = await apiCall(api, 'POST', '/v1/chat/completions', { model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, temperature: 0 });
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
    const r = await apiCall(api, 'POST', '/v1/chat/completions', body);
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toMatch(/^text\/event-stream/);
    const { events, done } = parseSse(r.text);
    expect(done).toBe(true);
    expect(events[0]).toMatchObject({ object: 'chat.completion.chunk', choices: [{ delta: { role: 'assistant', content: '' }, finish_reason: null }], usage: null });
    const last = events[events.length - 1]!;
    expect(last).toMatchObject({ choices: [], usage: { completion_tokens: 8 } });
    expect(events[events.length - 2]).toMatchObject({ choices: [{ delta: {}, finish_reason: 'length' }] });
    const streamed = events.slice(1, -2).map((e: any) => e.choices[0].delta.content).join('');
    const whole = await apiCall(api, 'POST', '/v1/chat/completions', { ...body, stream: false });
    expect(streamed).toBe(whole.json.choices[0].message.content);
    expect(new Set(events.map((e) => e.id)).size).toBe(1);
  });

  test('without include_usage a stream has no usage chunk', async () => {
    const r = await apiCall(api, 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, stream: true });
    const { events } = parseSse(r.text);
    expect(events.every((e) => !('usage' in e))).toBe(true);
  });

  test('max_completion_tokens limits the completion like max_tokens', async () => {
    const r = await apiCall(api, 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_completion_tokens: 5 });
    expect(r.json.usage.completion_tokens).toBe(5);
    expect(r.json.choices[0].finish_reason).toBe('length');
  });
});

describe('logprobs', () => {
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
});

describe('choices and fields', () => {
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

describe('bad requests', () => {
  test('a field of the wrong type is a 400 naming the field', async () => {
    const r = await chatHi({ temperature: 'hot' });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: 'invalid_request_error', param: 'temperature' });
  });

  test('empty messages are a 400', async () => {
    const r = await apiCall(api, 'POST', '/v1/chat/completions', { messages: [] });
    expect(r.status).toBe(400);
    expect(r.json.error.param).toBe('messages');
  });

  test('an unknown model is a 404 model_not_found', async () => {
    const r = await chatHi({ model: 'gpt-4o' });
    expect(r.status).toBe(404);
    expect(r.json.error).toMatchObject({ code: 'model_not_found', param: 'model' });
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
});
