// POST /v1/completions in-process against stories260K: greedy exactness against the runtime, token-id
// prompts, echo (with the prompt's logprobs), seeds, logit_bias, prompt batches, suffix and best_of,
// and prompts the context or the vocabulary cannot take.
import { describe, expect, test } from 'vitest';
import type { LocalModel } from '../../runtime/local-model.js';
import type { LocalBackend } from '../local-backend.js';
import type { OpenAiApi } from '../openai-api.js';
import { apiCall, directGreedy, parseSse, withStoriesApi } from '../test-helpers.js';

let backend: LocalBackend;
let direct: LocalModel;
let api: OpenAiApi;
const { call } = withStoriesApi((s) => {
  ({ backend, api } = s);
  direct = s.direct!;
}, { direct: true });

const complete = (extra: Record<string, unknown>) => call('POST', '/v1/completions', { prompt: 'Once upon a time', max_tokens: 8, ...extra });

describe('completions', () => {
  test('greedy output through the API is the runtime greedy generation token for token', async () => {
    const prompt = 'Once upon a time';
    const expected = await directGreedy(direct, prompt, 40);
    const r = await apiCall(api, 'POST', '/v1/completions', { model: 'stories260K', prompt, max_tokens: 40, temperature: 0, stream: true, stream_options: { include_usage: true } });
    const { events } = parseSse(r.text);
    const pieces = events.filter((e: any) => e.choices.length > 0 && e.choices[0].finish_reason === null).map((e: any) => e.choices[0].text);
    expect(pieces).toEqual(expected.pieces);
    expect(events.at(-1)).toMatchObject({ usage: { completion_tokens: expected.ids.length } });
    const whole = await apiCall(api, 'POST', '/v1/completions', { prompt, max_tokens: 40, temperature: 0 });
    expect(whole.json).toMatchObject({ object: 'text_completion', choices: [{ text: expected.pieces.join(''), finish_reason: 'length' }] });
  });

  test('accepts a prompt as token ids and echoes the prompt when asked', async () => {
    const ids = direct.tokenizer.encode('Once upon a time', { parseSpecial: true });
    const expected = await directGreedy(direct, 'Once upon a time', 6);
    const r = await apiCall(api, 'POST', '/v1/completions', { prompt: ids, max_tokens: 6, temperature: 0, echo: true });
    expect(r.json.choices[0].text).toBe(direct.tokenizer.decode(ids, { special: true }) + expected.pieces.join(''));
    expect(r.json.usage.prompt_tokens).toBe(ids.length);
  });

  test('the same seed gives the same sampled text, and penalties and extras are accepted', async () => {
    const body = { prompt: 'The cat', max_tokens: 16, temperature: 0.9, top_p: 0.95, top_k: 40, min_p: 0.05, seed: 42, presence_penalty: 0.5, frequency_penalty: 0.5, repeat_penalty: 1.1 };
    const a = await apiCall(api, 'POST', '/v1/completions', body);
    const b = await apiCall(api, 'POST', '/v1/completions', body);
    expect(a.status).toBe(200);
    expect(a.json.choices[0].text).toBe(b.json.choices[0].text);
  });

  test('a bias of -100 bans a token and +100 forces it', async () => {
    const greedy = await complete({ temperature: 0, logprobs: 0 });
    const first = greedy.json.choices[0].logprobs.tokens[0] as string;
    // Every id whose piece is the one the greedy run began with (a byte token can spell it too).
    const firstIds = Array.from({ length: backend.vocabSize }, (_, id) => id).filter((id) => backend.tokenPiece(id) === first);
    const banned = await complete({ temperature: 0, logprobs: 0, logit_bias: Object.fromEntries(firstIds.map((id) => [id, -100])) });
    expect(banned.json.choices[0].logprobs.tokens[0]).not.toBe(first);
    const forcedId = (await backend.tokenize('cat', { addSpecial: false, parseSpecial: false })).at(-1)!;
    const forced = await complete({ temperature: 1, seed: 3, max_tokens: 4, logit_bias: { [forcedId]: 100 } });
    expect(forced.json.choices[0].text).toBe(backend.tokenPiece(forcedId).repeat(4));
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
});

describe('refusals', () => {
  test('suffix on a model without fill-in-the-middle tokens, and best_of other than n', async () => {
    const s = await complete({ suffix: 'The end.' });
    expect(s.status).toBe(400);
    expect(s.json.error).toMatchObject({ param: 'suffix' });
    expect(s.json.error.message).toMatch(/fill-in-the-middle/);
    expect((await complete({ best_of: 3 })).json.error.param).toBe('best_of');
  });

  test('a prompt that fills the context is a 400 context_length_exceeded', async () => {
    const r = await apiCall(api, 'POST', '/v1/completions', { prompt: Array.from({ length: backend.contextTokens }, () => 100), max_tokens: 1 });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ code: 'context_length_exceeded' });
  });

  test('a prompt token outside the vocabulary is a 400', async () => {
    const r = await apiCall(api, 'POST', '/v1/completions', { prompt: [1, 99999] });
    expect(r.status).toBe(400);
  });
});
