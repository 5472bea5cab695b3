// logit_bias, log-probabilities and forced ids of the Sampler (the OpenAI API's logit_bias,
// logprobs / top_logprobs and echo scoring), table-driven on small logit vectors.
import { describe, expect, test } from 'vitest';
import { DEFAULT_SAMPLING, Sampler, applyLogitBias, tokenLogprobs } from './sampling.js';

const logits = () => Float32Array.of(1, 3, 2, 0.5, 3);

describe('tokenLogprobs', () => {
  test('is log softmax, with the top ids most likely first and ties by lower id', () => {
    const l = logits();
    const z = Math.log([...l].reduce((a, x) => a + Math.exp(x), 0));
    const r = tokenLogprobs(l, 2, 3);
    expect(r.logprob).toBeCloseTo(2 - z, 6);
    expect(r.top.map((t) => t.id)).toEqual([1, 4, 2]);
    expect(r.top[0]!.logprob).toBeCloseTo(3 - z, 6);
    expect(tokenLogprobs(l, 0, 0).top).toEqual([]);
  });

  test('a banned token reports a finite floor, not -Infinity (JSON has no infinities)', () => {
    const l = logits();
    applyLogitBias(l, new Map([[0, -100]]));
    expect(tokenLogprobs(l, 0, 0).logprob).toBe(-9999);
  });
});

describe('Sampler', () => {
  test('a -100 bias bans the argmax and +100 forces a token even when sampling', () => {
    expect(new Sampler({ ...DEFAULT_SAMPLING, logitBias: new Map([[1, -100], [4, -100]]) }).sample(logits(), [])).toBe(2);
    const forced = new Sampler({ ...DEFAULT_SAMPLING, temperature: 1, seed: 9, logitBias: new Map([[3, 100]]) });
    for (let i = 0; i < 20; i++) expect(forced.sample(logits(), [])).toBe(3);
  });

  test('reports the log-probabilities of each token it returns', () => {
    const s = new Sampler({ ...DEFAULT_SAMPLING, topLogprobs: 2 });
    expect(s.sample(logits(), [])).toBe(1);
    expect(s.lastLogprobs).toMatchObject({ id: 1, top: [{ id: 1 }, { id: 4 }] });
    expect(new Sampler(DEFAULT_SAMPLING).lastLogprobs).toBeUndefined();
  });

  test('forced ids come first (scored, not drawn), then it samples', () => {
    const s = new Sampler({ ...DEFAULT_SAMPLING, forcedIds: [3, 0], topLogprobs: 0 });
    expect([s.sample(logits(), []), s.sample(logits(), []), s.sample(logits(), [])]).toEqual([3, 0, 1]);
  });

  test('refuses more than 20 top logprobs and non-integer bias ids', () => {
    expect(() => new Sampler({ ...DEFAULT_SAMPLING, topLogprobs: 21 })).toThrow(/top logprobs/);
    expect(() => new Sampler({ ...DEFAULT_SAMPLING, logitBias: new Map([[1.5, 1]]) })).toThrow(/logit bias/);
  });
});
