import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { proportionalCounts, uniformCounts } from './baselines.js';

describe('baseline divisions', () => {
  it.each([
    [8, 2, [4, 4]],
    [10, 3, [4, 3, 3]],
    [64, 5, [13, 13, 13, 13, 12]],
    [3, 3, [1, 1, 1]],
  ])('splits %i blocks uniformly over %i devices as %j', (layers, devices, expected) => {
    expect(uniformCounts(layers, devices)).toEqual(expected);
  });

  it.each([
    { layers: 10, memory: [1, 1], expected: [5, 5] },
    { layers: 10, memory: [3, 1], expected: [8, 2] }, // quotas 7.5, 2.5: the tie goes to the first device
    { layers: 64, memory: [24, 16, 8], expected: [32, 21, 11] }, // quotas 32, 21.33, 10.67
    { layers: 7, memory: [100, 1, 1], expected: [5, 1, 1] }, // every device keeps one block
    { layers: 3, memory: [0, 0, 0], expected: [1, 1, 1] },
  ])('splits $layers blocks by memory $memory as $expected (largest remainder)', ({ layers, memory, expected }) => {
    expect(proportionalCounts(layers, memory)).toEqual(expected);
  });

  it('always places every block and gives every device at least one', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 1e12 }), { minLength: 1, maxLength: 12 }), fc.integer({ min: 0, max: 200 }), (memory, extra) => {
        const layers = memory.length + extra;
        const counts = proportionalCounts(layers, memory);
        expect(counts.reduce((a, b) => a + b, 0)).toBe(layers);
        for (const k of counts) expect(k).toBeGreaterThanOrEqual(1);
      }),
    );
  });
});
