import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { DeviceCost } from './cost-model.js';
import { partitionChain } from './partition.js';
import { compositions } from './test-support/brute-force.js';

function dev(perBlock: number, memoryBlocks = 1e9, head = 0, headMemory = 0): DeviceCost {
  return { perBlock, head, blockMemoryBytes: 1, headMemoryBytes: headMemory, memoryBytes: memoryBlocks + headMemory };
}

/** The best bottleneck over every division, by enumeration. */
function enumerate(costs: DeviceCost[], layers: number, headIndex: number): number | null {
  let best: number | null = null;
  for (const counts of compositions(layers, costs.length)) {
    let worst = 0;
    let fits = true;
    counts.forEach((k, i) => {
      const c = costs[i] as DeviceCost;
      const head = i === headIndex;
      if (k * c.blockMemoryBytes + (head ? c.headMemoryBytes : 0) > c.memoryBytes) fits = false;
      worst = Math.max(worst, k * c.perBlock + (head ? c.head : 0));
    });
    if (fits && (best === null || worst < best)) best = worst;
  }
  return best;
}

describe('chain partition', () => {
  it.each([
    { what: 'equal devices split evenly', costs: [dev(1), dev(1)], layers: 8, counts: [4, 4], bottleneck: 4 },
    { what: 'a device twice as fast takes twice the blocks', costs: [dev(1), dev(2)], layers: 9, counts: [6, 3], bottleneck: 6 },
    { what: 'the head cost shifts blocks away from the head', costs: [dev(1, 1e9, 4), dev(1)], layers: 10, counts: [3, 7], bottleneck: 7 },
    { what: 'memory caps a fast device', costs: [dev(1, 2), dev(10)], layers: 5, counts: [2, 3], bottleneck: 30 },
    { what: 'a very slow device still gets one block', costs: [dev(1), dev(1000)], layers: 4, counts: [3, 1], bottleneck: 1000 },
    { what: 'one device holds everything', costs: [dev(3)], layers: 5, counts: [5], bottleneck: 15 },
  ])('$what', ({ costs, layers, counts, bottleneck }) => {
    const part = partitionChain(costs, layers, 0);
    expect(part).not.toBeNull();
    expect(part?.counts).toEqual(counts);
    expect(part?.bottleneck).toBe(bottleneck);
  });

  it('refuses when a device cannot hold a single block', () => {
    expect(partitionChain([dev(1, 5), dev(1, 0)], 4, 0)).toBeNull();
  });

  it('refuses when the memories together hold fewer blocks than the model has', () => {
    expect(partitionChain([dev(1, 2), dev(1, 2)], 5, 0)).toBeNull();
  });

  it('refuses fewer blocks than devices', () => {
    expect(partitionChain([dev(1), dev(1), dev(1)], 2, 0)).toBeNull();
  });

  it('finds the smallest feasible bottleneck of every random chain, like an enumeration of all divisions', () => {
    const device = fc.record({
      perBlock: fc.double({ min: 0.001, max: 100, noNaN: true }),
      head: fc.double({ min: 0, max: 100, noNaN: true }),
      blockMemoryBytes: fc.integer({ min: 1, max: 100 }),
      headMemoryBytes: fc.integer({ min: 0, max: 300 }),
      memoryBytes: fc.integer({ min: 0, max: 1000 }),
    });
    fc.assert(
      fc.property(fc.array(device, { minLength: 1, maxLength: 4 }), fc.integer({ min: 1, max: 9 }), fc.nat(3), (costs, layers, h) => {
        const headIndex = h % costs.length;
        const expected = layers < costs.length ? null : enumerate(costs, layers, headIndex);
        const part = partitionChain(costs, layers, headIndex);
        if (expected === null) {
          expect(part).toBeNull();
          return;
        }
        expect(part).not.toBeNull();
        expect(part?.bottleneck).toBe(expected);
        // The division itself is valid: sums to the model, ≥ 1 each, within memory, meets the bound.
        const counts = part?.counts ?? [];
        expect(counts.reduce((a, b) => a + b, 0)).toBe(layers);
        counts.forEach((k, i) => {
          const c = costs[i] as DeviceCost;
          const head = i === headIndex;
          expect(k).toBeGreaterThanOrEqual(1);
          expect(k * c.blockMemoryBytes + (head ? c.headMemoryBytes : 0)).toBeLessThanOrEqual(c.memoryBytes);
          expect(k * c.perBlock + (head ? c.head : 0)).toBeLessThanOrEqual(expected);
        });
      }),
      { numRuns: 500 },
    );
  });
});
