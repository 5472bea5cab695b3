// The stop filter between the backend and a response, in-process against stories260K: text ends
// right before a stop string, and a stream never sends any part of it.
import { describe, expect, test } from 'vitest';
import type { LocalModel } from '../runtime/local-model.js';
import type { OpenAiApi } from './openai-api.js';
import { apiCall, directGreedy, parseSse, withStoriesApi } from './test-helpers.js';

let direct: LocalModel;
let api: OpenAiApi;
withStoriesApi((s) => {
  api = s.api;
  direct = s.direct!;
}, { direct: true });

describe('stop sequences', () => {
  // The greedy continuation of this prompt is ", there was a little girl named Lily. She loved ...".
  const prompt = 'Once upon a time';

  test('end the text right before the stop string, with finish reason stop', async () => {
    const full = (await directGreedy(direct, prompt, 30)).pieces.join('');
    const at = full.indexOf('Lily');
    expect(at).toBeGreaterThan(0);
    const r = await apiCall(api, 'POST', '/v1/completions', { prompt, max_tokens: 30, temperature: 0, stop: ['Lily', 'never appears'] });
    expect(r.json.choices[0]).toMatchObject({ text: full.slice(0, at), finish_reason: 'stop' });
  });

  test('a stop found while an earlier, longer one might still complete waits for it: the earliest in the text wins', async () => {
    const { pieces } = await directGreedy(direct, prompt, 30);
    const full = pieces.join('');
    const both = await apiCall(api, 'POST', '/v1/completions', { prompt, max_tokens: 30, temperature: 0, stop: [' girl named Lily', 'named'] });
    expect(both.json.choices[0]).toMatchObject({ text: full.slice(0, full.indexOf(' girl named Lily')), finish_reason: 'stop' });
    // Generation ends on the token that completes "named"; " girl named X" began earlier and never completes.
    const k = pieces.findIndex((_, i) => pieces.slice(0, i + 1).join('').includes('named')) + 1;
    expect(k).toBeGreaterThan(0);
    const text = pieces.slice(0, k).join('');
    const r = await apiCall(api, 'POST', '/v1/completions', { prompt, max_tokens: k, temperature: 0, stop: [' girl named X', 'named'] });
    expect(r.json.choices[0]).toMatchObject({ text: text.slice(0, text.indexOf('named')), finish_reason: 'stop' });
  });

  test('in a stream, never send any part of the stop string', async () => {
    const full = (await directGreedy(direct, prompt, 30)).pieces.join('');
    const stop = 'named Lily';
    const r = await apiCall(api, 'POST', '/v1/completions', { prompt, max_tokens: 30, temperature: 0, stop, stream: true });
    const { events, done } = parseSse(r.text);
    expect(done).toBe(true);
    const streamed = events.map((e: any) => e.choices[0].text).join('');
    expect(streamed).toBe(full.slice(0, full.indexOf(stop)));
    expect((events.at(-1) as any).choices[0].finish_reason).toBe('stop');
  });
});
