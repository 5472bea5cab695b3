import { describe, expect, test } from 'vitest';
import { llama3RopeFactors } from '../model/synth/synth.js';
import { resolveShape } from '../model/synth/shapes.js';
import { llama3FreqFactors, ropeCaches } from './rope.js';

describe('rope tables', () => {
  test('row p holds cos/sin of p * base^(-2i/d), divided by the frequency factors', () => {
    const { cos, sin } = ropeCaches({ dims: 8, freqBase: 10000, freqScale: 1, freqFactors: Float32Array.of(1, 2, 4, 8) }, 16);
    for (const p of [0, 1, 7, 15]) {
      for (let i = 0; i < 4; i++) {
        const theta = (p * 10000 ** (-(2 * i) / 8)) / 2 ** i;
        expect(cos[p * 4 + i]).toBeCloseTo(Math.cos(theta), 5);
        expect(sin[p * 4 + i]).toBeCloseTo(Math.sin(theta), 5);
      }
    }
  });

  test('linear scaling multiplies the positions by the frequency scale', () => {
    const plain = ropeCaches({ dims: 4, freqBase: 10000, freqScale: 1 }, 8);
    const scaled = ropeCaches({ dims: 4, freqBase: 10000, freqScale: 0.5 }, 8);
    expect(scaled.cos[6 * 2]).toBeCloseTo(plain.cos[3 * 2]!, 6);
  });

  test('padding pairs do not rotate (cos 1, sin 0)', () => {
    const { cos, sin } = ropeCaches({ dims: 8, freqBase: 10000, freqScale: 1 }, 4, 8);
    expect(Array.from(cos.subarray(3 * 8 + 4, 3 * 8 + 8))).toEqual([1, 1, 1, 1]);
    expect(Array.from(sin.subarray(3 * 8 + 4, 3 * 8 + 8))).toEqual([0, 0, 0, 0]);
  });

  test('Llama 3 frequency factors equal the ones the synth writer stores as rope_freqs.weight', () => {
    const shape = resolveShape('llama-3.2-1b');
    const s = shape.ropeScaling;
    if (s?.type !== 'llama3') throw new Error('expected llama3 scaling');
    const ours = llama3FreqFactors(64, shape.ropeFreqBase, s.factor, s.lowFreqFactor, s.highFreqFactor, s.originalContextLength);
    const theirs = llama3RopeFactors(shape);
    for (let i = 0; i < 32; i++) expect(ours[i]).toBeCloseTo(theirs[i]!, 4);
    expect(ours[0]).toBe(1);
    expect(ours[31]).toBe(32);
  });
});
