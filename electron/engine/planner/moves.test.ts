import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { isKiwiError } from '../errors.js';
import { stageCost, type DeviceCost } from './cost-model.js';
import type { DeviceSpec, Fleet, LayerRange } from './fleet.js';
import { parseFleetFile } from './fleet.js';
import { fetchBlocks, fewestMoves, heldPrefix, reopenBlocks, stageCuts } from './moves.js';
import { planFleet } from './plan.js';
import { toPlanJson } from './plan-json.js';
import { compositions } from './test-support/brute-force.js';

const GB = 1e9;
const BLOCK = 218_000_000;

/** An 8B-shaped model: 32 blocks, the head twice a block's bytes (so its cost is 2 blocks' on a device priced by block_ms). */
function fleet(devices: DeviceSpec[]): Fleet {
  return {
    model: { name: 'llama-3.1-8b-q4_0', layers: 32, blockBytes: BLOCK, headBytes: 2 * BLOCK, headResidentBytes: 3 * BLOCK, kvBytesPerTokenPerLayer: 4096 },
    context: 4096,
    concurrency: 1,
    devices,
    rtts: [],
  };
}

const ranges = (...rs: Array<[number, number]>): LayerRange[] => rs.map(([start, end]) => ({ start, end }));

describe('re-plans that keep what members hold', () => {
  // The ring: host 0-9, m1 9-21, m2 21-32; m2 is gone, so host and m1 re-plan.
  const holds = { host: ranges([0, 9]), m1: ranges([9, 21]) };
  it.each([
    {
      what: 'keeps m1 and extends it when that stays within 5% of the best bottleneck',
      // Best: host 0-10 (12 ms), m1 10-32 (22 × 0.56 = 12.32 ms); keeping host 0-9: m1 23 × 0.56 = 12.88 ms, 4.5% slower.
      m1BlockMs: 0.56, moveMargin: undefined,
      ranges: [[0, 9], [9, 32]], fetch: [0, 11],
    },
    {
      what: 'takes the fastest division when margin 0 allows no slower one',
      m1BlockMs: 0.56, moveMargin: 0,
      ranges: [[0, 10], [10, 32]], fetch: [1, 11],
    },
    {
      what: 'takes the faster division when keeping would cost more than 5% (the issue\'s equal devices: 23 against 17 ms)',
      m1BlockMs: 1, moveMargin: undefined,
      ranges: [[0, 15], [15, 32]], fetch: [6, 11],
    },
  ])('$what', ({ m1BlockMs, moveMargin, ranges: expected, fetch }) => {
    const f = fleet([
      { name: 'host', memoryBytes: 100 * GB, blockMs: 1, holds: holds.host },
      { name: 'm1', memoryBytes: 100 * GB, blockMs: m1BlockMs, holds: holds.m1 },
    ]);
    const plan = planFleet(f, { anchorMargin: Number.POSITIVE_INFINITY, ...(moveMargin !== undefined ? { moveMargin } : {}) });
    expect(plan.division.stages.map((s) => [s.start, s.end])).toEqual(expected);
    const json = toPlanJson(f, plan);
    expect(json.stages.map((s) => s.fetch_bytes)).toEqual(fetch.map((n) => n * BLOCK));
    expect(json.fetch_bytes).toBe((fetch[0]! + fetch[1]!) * BLOCK);
  });

  it('keeps the stages as they run when every device holds every layer and keeping stays within 5% of the best', () => {
    // The host and m1 hold the whole model (the host's own copy, m1's standby layers): nothing
    // moves whatever the division, so the one that reopens the fewest blocks wins: m1 keeps 9-32
    // as it runs (4.5% slower than the best, host 0-10) and the host its 0-9.
    const all = ranges([0, 32]);
    const f = fleet([
      { name: 'host', memoryBytes: 100 * GB, blockMs: 1, holds: all, runs: { start: 0, end: 9 } },
      { name: 'm1', memoryBytes: 100 * GB, blockMs: 0.56, holds: all, runs: { start: 9, end: 32 } },
    ]);
    const plan = planFleet(f, { anchorMargin: Number.POSITIVE_INFINITY });
    expect(plan.division.stages.map((s) => [s.start, s.end])).toEqual([[0, 9], [9, 32]]);
    expect(toPlanJson(f, plan).fetch_bytes).toBe(0);
    // Without what they run the fastest division is taken (both stages reopen).
    const moved = planFleet(fleet(f.devices.map(({ runs: _runs, ...d }) => d)), { anchorMargin: Number.POSITIVE_INFINITY });
    expect(moved.division.stages.map((s) => [s.start, s.end])).toEqual([[0, 10], [10, 32]]);
  });

  it('counts only the added blocks as opened anew for a stage that is reshaped (a member\'s segments)', () => {
    const runs = [{ start: 9, end: 21, grows: true }, { start: 9, end: 21 }];
    expect([reopenBlocks(runs, 0, 9, 21), reopenBlocks(runs, 0, 9, 32), reopenBlocks(runs, 0, 5, 21), reopenBlocks(runs, 0, 5, 32)]).toEqual([0, 11, 4, 15]);
    // A range that cuts through a segment opens whole, as does any change on a stage that is not reshaped.
    expect([reopenBlocks(runs, 0, 10, 32), reopenBlocks(runs, 1, 9, 32), reopenBlocks(runs, 1, 9, 21), reopenBlocks(runs, 2, 0, 4)]).toEqual([22, 23, 0, 4]);
    // Each side added is a segment; past runtime/stage-segments.ts MAX_SEGMENTS the range opens whole, as one.
    const segments = (r: typeof runs, d: number, start: number, end: number): number => stageCuts(r, d, start, end).length + 1;
    expect([segments(runs, 0, 9, 21), segments(runs, 0, 9, 32), segments(runs, 0, 5, 32), segments(runs, 1, 9, 32)]).toEqual([1, 2, 3, 1]);
    const twice = [{ start: 9, end: 21, grows: true, cuts: [15] }];
    expect([stageCuts(twice, 0, 9, 21), stageCuts(twice, 0, 9, 32), stageCuts(twice, 0, 5, 32), reopenBlocks(twice, 0, 5, 32)]).toEqual([[15], [15, 21], [], 27]);
    // A stage cut at 15 gives up the segment before or after it without reopening the other.
    expect([reopenBlocks(twice, 0, 15, 32), stageCuts(twice, 0, 15, 32), reopenBlocks(twice, 0, 9, 15), stageCuts(twice, 0, 9, 15)]).toEqual([11, [21], 0, []]);
    expect([reopenBlocks(twice, 0, 12, 32), reopenBlocks(twice, 0, 16, 32)]).toEqual([20, 16]);
    // Planning cuts (pipeline/fault-cuts.ts): as if cut anywhere, any overlap stays.
    const anywhere = [{ start: 9, end: 21, grows: true, everyCut: true }];
    expect([reopenBlocks(anywhere, 0, 12, 32), reopenBlocks(anywhere, 0, 0, 9), stageCuts(anywhere, 0, 12, 32)]).toEqual([11, 9, []]);
  });

  it('prices a stage grown in place with a step\'s fixed part per segment, and the plan says how many it runs', () => {
    // m1 runs 16-32 and may grow; the host's 0-16 is as fast per block. Growing m1 down to 12 adds
    // a segment (1 ms more a step), which the plan predicts.
    const all = ranges([0, 32]);
    const devices: DeviceSpec[] = [
      { name: 'host', memoryBytes: 100 * GB, blockMs: 1, stepMs: 1, holds: all, runs: { start: 0, end: 12 } },
      { name: 'm1', memoryBytes: 100 * GB, blockMs: 1, stepMs: 1, holds: all, runs: { start: 12, end: 32, grows: true } },
    ];
    const grown = planFleet(fleet(devices), { anchorMargin: Number.POSITIVE_INFINITY, moveMargin: 0.2 });
    const stages = grown.division.stages.map((s) => ({ range: [s.start, s.end], segments: s.segments, cost: s.cost - s.step * s.segments - (s.end - s.start) }));
    expect(stages.map((s) => s.cost)).toEqual([2, 0]);
    expect(toPlanJson(fleet(devices), grown).stages.map((s) => s.segments)).toEqual(stages.map((s) => s.segments));
    for (const s of grown.division.stages) expect(s.segments).toBe(s.device === 1 && s.start < 12 ? 2 : 1);
  });

  it('plans as before when nobody holds anything, and says every block is fetched', () => {
    const devices: DeviceSpec[] = [
      { name: 'host', memoryBytes: 100 * GB, blockMs: 1 },
      { name: 'm1', memoryBytes: 100 * GB, blockMs: 0.56 },
    ];
    const plan = planFleet(fleet(devices));
    expect(plan.division.stages.map((s) => [s.start, s.end, s.fetchBlocks])).toEqual([[0, 10, 10], [10, 32, 22]]);
  });

  it('keeps a range that is already as fast as the best division, fetching nothing', () => {
    const f = fleet([
      { name: 'host', memoryBytes: 100 * GB, blockMs: 1, holds: ranges([0, 15]) },
      { name: 'm1', memoryBytes: 100 * GB, blockMs: 1, holds: ranges([15, 32]) },
    ]);
    const plan = planFleet(f);
    expect(plan.division.stages.map((s) => [s.start, s.end, s.fetchBlocks])).toEqual([[0, 15, 0], [15, 32, 0]]);
  });

  it('reads holds from the fleet file and refuses ranges outside the model', () => {
    const file = parseFleetFile({
      model: { name: 'm', layers: 32, block_bytes: BLOCK, head_bytes: 2 * BLOCK, head_resident_bytes: 3 * BLOCK, kv_bytes_per_token_per_layer: 4096 },
      context: 4096,
      devices: [
        { name: 'host', memory_bytes: 100 * GB, block_ms: 1, holds: [[0, 9]] },
        { name: 'm1', memory_bytes: 100 * GB, block_ms: 0.56, holds: [[9, 21], [30, 32]] },
      ],
    });
    expect(file.devices.map((d) => d.holds)).toEqual([ranges([0, 9]), ranges([9, 21], [30, 32])]);
    const plan = planFleet(file as Fleet, { anchorMargin: Number.POSITIVE_INFINITY });
    expect(plan.division.stages.map((s) => [s.start, s.end, s.fetchBlocks])).toEqual([[0, 9, 0], [9, 32, 9]]);
    expect(() => parseFleetFile({ ...file, model: { name: 'm', layers: 32, block_bytes: 1, head_bytes: 1, head_resident_bytes: 1, kv_bytes_per_token_per_layer: 1 }, devices: [{ name: 'x', memory_bytes: 1, holds: [[5, 5]] }] })).toThrow(/holds\[0\]/);
    try {
      planFleet(fleet([{ name: 'x', memoryBytes: 100 * GB, blockMs: 1, holds: ranges([30, 40]) }]));
      expect.unreachable();
    } catch (err) {
      expect(isKiwiError(err, 'FLEET_INVALID')).toBe(true);
    }
  });

  it('splits a lost range between the survivors that grow, so the one that opens the most opens the fewest', () => {
    // The member between the host (0-8) and m2 (16-32) is gone; both hold every layer and may grow.
    // Any boundary in 8-16 opens 8 blocks in all; the fastest (host 0-15, 17 ms each) opens 7 on
    // the host, while 0-12 opens 4 on each, within a 25% margin (20 ms).
    const all = ranges([0, 32]);
    const devices: DeviceSpec[] = [
      { name: 'host', memoryBytes: 100 * GB, blockMs: 1, holds: all, runs: { start: 0, end: 8, grows: true } },
      { name: 'm2', memoryBytes: 100 * GB, blockMs: 1, holds: all, runs: { start: 16, end: 32, grows: true } },
    ];
    const plan = planFleet(fleet(devices), { anchorMargin: Number.POSITIVE_INFINITY, moveMargin: 0.25 });
    expect(plan.division.stages.map((s) => [s.start, s.end])).toEqual([[0, 12], [12, 32]]);
    // Within 5% only the fastest is left.
    const tight = planFleet(fleet(devices), { anchorMargin: Number.POSITIVE_INFINITY });
    expect(tight.division.stages.map((s) => [s.start, s.end])).toEqual([[0, 15], [15, 32]]);
  });

  it('after a loss, gives up one block on the bottleneck stage to keep the survivors\' segments where that spares enough reopening', () => {
    // bench/faults' ring after m2 (23-32) is gone: host 0-5, m1 5-14 cut at 8, m3 14-23 cut at 20,
    // all holding every layer. The fastest division (host 0-10, 11 ms) cuts through both members'
    // segments, so each reopens its 11 blocks whole (27 in all); host 0-8, m1 8-20, m3 20-32 keeps
    // them (18 in all) at 12 ms, 9% slower: outside the 5% margin, within one block.
    const all = ranges([0, 32]);
    const devices: DeviceSpec[] = [
      { name: 'host', memoryBytes: 100 * GB, blockMs: 0.9, holds: all, runs: { start: 0, end: 5, grows: true } },
      { name: 'm1', memoryBytes: 100 * GB, blockMs: 1, holds: all, runs: { start: 5, end: 14, grows: true, cuts: [8] } },
      { name: 'm3', memoryBytes: 100 * GB, blockMs: 1, holds: all, runs: { start: 14, end: 23, grows: true, cuts: [20] } },
    ];
    const plan = (reopenSlackBlocks?: number): number[][] =>
      planFleet(fleet(devices), { anchorMargin: Number.POSITIVE_INFINITY, ...(reopenSlackBlocks !== undefined ? { reopenSlackBlocks } : {}) }).division.stages.map((s) => [s.start, s.end]);
    expect(plan()).toEqual([[0, 10], [10, 21], [21, 32]]);
    expect(plan(3)).toEqual([[0, 8], [8, 20], [20, 32]]);
    // Sparing 9 blocks is not worth a block where the threshold asks for 10.
    expect(plan(10)).toEqual([[0, 10], [10, 21], [21, 32]]);
  });

  it('finds the fewest moves within the bound, then the fewest blocks reopened on the busiest stage and in all, as trying every division does', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4 }).chain((m) =>
          fc.record({
            layers: fc.integer({ min: m, max: 10 }),
            perBlock: fc.array(fc.integer({ min: 1, max: 5 }), { minLength: m, maxLength: m }),
            caps: fc.array(fc.integer({ min: 1, max: 10 }), { minLength: m, maxLength: m }),
            holds: fc.array(fc.array(fc.tuple(fc.integer({ min: 0, max: 9 }), fc.integer({ min: 1, max: 4 })), { maxLength: 2 }), { minLength: m, maxLength: m }),
            slack: fc.integer({ min: 0, max: 20 }),
            running: fc.array(fc.option(fc.tuple(fc.integer({ min: 0, max: 9 }), fc.integer({ min: 1, max: 5 }), fc.boolean(), fc.integer({ min: 1, max: 3 }))), { minLength: m, maxLength: m }),
            step: fc.integer({ min: 0, max: 3 }),
          }),
        ),
        ({ layers, perBlock, caps, holds, slack, running, step }) => {
          const runs = running.map((r) => (r === null ? undefined : { start: r[0], end: r[0] + r[1], grows: r[2], cuts: Array.from({ length: Math.min(r[3], r[1]) - 1 }, (_, j) => r[0] + j + 1) }));
          const costs: DeviceCost[] = perBlock.map((p, i) => ({ perBlock: p, head: 1, step, blockMemoryBytes: 1, headMemoryBytes: 0, memoryBytes: caps[i]! }));
          const chain = costs.map((_, i) => i);
          const held = heldPrefix(holds.map((hs) => hs.map(([start, len]) => ({ start, end: start + len }))), layers);
          const bound = Math.max(...perBlock) + step + slack;
          const score = (counts: readonly number[]): { miss: number; most: number; open: number; end: number; costs: number[] } => {
            let end = 0;
            let miss = 0;
            let open = 0;
            let most = 0;
            const stageCosts = counts.map((k, i) => {
              miss += fetchBlocks(held, i, end, end + k);
              const reopened = reopenBlocks(runs, i, end, end + k);
              open += reopened;
              most = Math.max(most, reopened);
              const c = stageCost(costs[i]!, k, i === 0, stageCuts(runs, i, end, end + k).length + 1);
              end += k;
              return c;
            });
            return { miss, most, open, end, costs: stageCosts };
          };
          let best: number[] | null = null;
          for (const counts of compositions(layers, chain.length)) {
            const { miss, most, open, costs: stageCosts } = score(counts);
            if (counts.some((k, i) => k > caps[i]! || stageCosts[i]! > bound)) continue;
            // Fewest fetched, then the fewest opened on the busiest stage, then in all, then the lowest bottleneck.
            const key = [miss, most, open, Math.max(...stageCosts)];
            const at = best === null ? -1 : key.findIndex((x, j) => x !== best![j]);
            if (best === null || (at >= 0 && key[at]! < best[at]!)) best = key;
          }
          const got = fewestMoves(costs, chain, layers, held, bound, runs);
          if (best === null) {
            expect(got).toBeNull();
            return;
          }
          expect(got).not.toBeNull();
          const { miss, most, open, end, costs: stageCosts } = score(got!);
          expect(end).toBe(layers);
          expect([miss, most, open, Math.max(...stageCosts)]).toEqual(best);
        },
      ),
      { numRuns: 300 },
    );
  });

});
