import { describe, expect, test } from 'vitest';
import { DEFAULT_SAMPLING, Rng, Sampler, applyPenalties, argmax, candidates } from './sampling.js';
import type { SamplingOptions } from './sampling.js';

const opts = (o: Partial<SamplingOptions>): SamplingOptions => ({ ...DEFAULT_SAMPLING, ...o });
// probabilities at temperature 1: softmax(log p) = p
const logitsOf = (probs: number[]) => Float32Array.from(probs, Math.log);

describe('candidates after truncation', () => {
  const probs = [0.05, 0.4, 0.3, 0.15, 0.1]; // sorted ids: 1, 2, 3, 4, 0
  test.each<[string, Partial<SamplingOptions>, number[]]>([
    ['no truncation keeps every token, most likely first', {}, [1, 2, 3, 4, 0]],
    ['top-k 2 keeps the two most likely', { topK: 2 }, [1, 2]],
    ['top-p 0.7 keeps the smallest set reaching 0.7', { topP: 0.7 }, [1, 2]],
    ['top-p 0.71 needs a third token', { topP: 0.71 }, [1, 2, 3]],
    ['min-p 0.3 drops tokens below 0.3 x the top probability', { minP: 0.3 }, [1, 2, 3]],
    ['top-k then min-p combine', { topK: 4, minP: 0.5 }, [1, 2]],
  ])('%s', (_name, o, ids) => {
    expect(candidates(logitsOf(probs), opts({ temperature: 1, ...o })).ids).toEqual(ids);
  });

  test('equals a brute-force full sort on wide random logits, for every option mix', () => {
    // The reference: sort everything, then apply top-k, top-p (on the top-k renormalized mass), min-p.
    const reference = (l: Float32Array, o: SamplingOptions): number[] => {
      let ids = Array.from(l.keys()).sort((a, b) => l[b]! - l[a]! || a - b);
      if (o.topK > 0) ids = ids.slice(0, o.topK);
      const e = ids.map((id) => Math.exp(l[id]! - l[ids[0]!]!));
      const sum = e.reduce((a, b) => a + b, 0);
      if (o.topP < 1) {
        let cum = 0;
        const cut = e.findIndex((x) => (cum += x / sum) >= o.topP);
        if (cut >= 0) ids = ids.slice(0, cut + 1);
      }
      if (o.minP > 0) ids = ids.filter((id) => l[id]! >= l[ids[0]!]! + Math.log(o.minP));
      return ids;
    };
    const rng = new Rng(3);
    for (let trial = 0; trial < 40; trial++) {
      const spread = [1, 10, 60][trial % 3]!;
      const l = Float32Array.from({ length: 300 }, () => Math.round((rng.next() - 0.5) * spread * 4) / 4); // with ties
      for (const o of [{ topP: 0.9 }, { topP: 0.999 }, { topK: 7 }, { topK: 50, topP: 0.8 }, { minP: 0.1 }, { topP: 0.95, minP: 0.02 }]) {
        const options = opts({ temperature: 1, ...o });
        expect(candidates(l, options).ids).toEqual(reference(l, options));
      }
    }
  });

  test('temperature sharpens and flattens the kept distribution', () => {
    const cold = candidates(logitsOf([0.6, 0.4]), opts({ temperature: 0.5 })).probs;
    const hot = candidates(logitsOf([0.6, 0.4]), opts({ temperature: 2 })).probs;
    expect(cold[0]).toBeCloseTo(0.36 / (0.36 + 0.16), 5);
    expect(hot[0]).toBeCloseTo(Math.sqrt(0.6) / (Math.sqrt(0.6) + Math.sqrt(0.4)), 5);
  });
});

describe('penalties', () => {
  test.each<[string, Partial<SamplingOptions>, number[], number[]]>([
    ['repetition divides positive and multiplies negative logits of seen tokens', { repetitionPenalty: 2 }, [0, 1], [1, -4, 3]],
    ['presence subtracts once per seen token', { presencePenalty: 0.5 }, [0, 0, 1], [1.5, -2.5, 3]],
    ['frequency subtracts per occurrence', { frequencyPenalty: 0.5 }, [0, 0, 1], [1, -2.5, 3]],
    ['the window limits which tokens count', { presencePenalty: 1, penaltyWindow: 1 }, [0, 1], [2, -3, 3]],
  ])('%s', (_name, o, history, expected) => {
    const l = Float32Array.of(2, -2, 3);
    applyPenalties(l, history, opts(o));
    expect(Array.from(l)).toEqual(expected);
  });
});

describe('Sampler', () => {
  test('temperature 0 is greedy argmax, also with other options set', () => {
    const s = new Sampler(opts({ temperature: 0, topK: 3, seed: 9 }));
    expect(s.sample(Float32Array.of(0.1, 5, 2), [])).toBe(1);
    expect(argmax(Float32Array.of(-1, -3, -0.5))).toBe(2);
  });

  test('greedy sampling respects the repetition penalty', () => {
    const s = new Sampler(opts({ repetitionPenalty: 4 }));
    expect(s.sample(Float32Array.of(4, 2), [0])).toBe(1);
  });

  test('the same seed gives the same draws and another seed different ones', () => {
    const logits = Float32Array.from({ length: 50 }, (_, i) => Math.sin(i));
    const draw = (seed: number) => {
      const s = new Sampler(opts({ temperature: 1, seed }));
      return Array.from({ length: 40 }, () => s.sample(logits, []));
    };
    expect(draw(42)).toEqual(draw(42));
    expect(draw(42)).not.toEqual(draw(43));
  });

  test('draws follow the distribution', () => {
    const s = new Sampler(opts({ temperature: 1, seed: 1 }));
    const counts = [0, 0];
    for (let i = 0; i < 4000; i++) counts[s.sample(logitsOf([0.8, 0.2]), [])]!++;
    expect(counts[0]! / 4000).toBeGreaterThan(0.77);
    expect(counts[0]! / 4000).toBeLessThan(0.83);
  });

  test('top-k 1 is greedy whatever the seed', () => {
    const s = new Sampler(opts({ temperature: 5, topK: 1, seed: 3 }));
    for (let i = 0; i < 20; i++) expect(s.sample(Float32Array.of(1, 1.1, 0.9), [])).toBe(1);
  });

  test.each<[string, Partial<SamplingOptions>]>([
    ['negative temperature', { temperature: -1 }],
    ['top-p of 0', { topP: 0 }],
    ['fractional top-k', { topK: 1.5 }],
    ['repetition penalty of 0', { repetitionPenalty: 0 }],
  ])('rejects %s with a usage error', (_name, o) => {
    expect(() => new Sampler(opts(o))).toThrow(/invalid sampling option/);
  });

  test('Rng values lie in [0, 1) and repeat per seed', () => {
    const a = new Rng(5);
    const b = new Rng(5);
    for (let i = 0; i < 100; i++) {
      const x = a.next();
      expect(x).toBe(b.next());
      expect(x >= 0 && x < 1).toBe(true);
    }
  });
});
