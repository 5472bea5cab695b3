import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { isKiwiError, KiwiError } from '../errors.js';
import type { DeviceSpec, Fleet } from './fleet.js';
import { parseFleetFile } from './fleet.js';
import { planFleet, type PlanResult } from './plan.js';
import { toPlanJson } from './plan-json.js';
import { bruteForce, bruteStageMemory } from './test-support/brute-force.js';
import { arbitraryFleet } from './test-support/random-fleet.js';

const GB = 1e9;

function fleet(devices: DeviceSpec[], overrides: Partial<Fleet> = {}): Fleet {
  return {
    model: { name: 'm', layers: 32, blockBytes: 200e6, headBytes: 500e6, headResidentBytes: 1e9, kvBytesPerTokenPerLayer: 4096 },
    context: 4096,
    concurrency: 1,
    devices,
    rtts: [],
    ...overrides,
  };
}

function planOrError(f: Fleet, anchorMargin?: number): PlanResult | KiwiError {
  try {
    return planFleet(f, anchorMargin === undefined ? {} : { anchorMargin });
  } catch (err) {
    if (isKiwiError(err)) return err;
    throw err;
  }
}

function closeTo(actual: number, expected: number): void {
  expect(Math.abs(actual - expected)).toBeLessThanOrEqual(1e-9 * Math.max(1, Math.abs(expected)));
}

describe('the per-hop term of the circuit', () => {
  const timed = (name: string, hopMs?: number): DeviceSpec => ({ name, memoryBytes: 64 * GB, blockMs: 2, stepMs: 0.5, ...(hopMs !== undefined ? { hopMs } : {}) });
  const rtts = [
    { a: 'a', b: 'b', rttMs: 1 },
    { a: 'b', b: 'c', rttMs: 1 },
    { a: 'a', b: 'c', rttMs: 1 },
  ];

  it('gives each stage what its step adds per cached position (blocks × the device\'s position_ms) without changing stage_ms', () => {
    const positioned = (name: string, positionMs?: number): DeviceSpec => ({ ...timed(name), ...(positionMs !== undefined ? { positionMs } : {}) });
    const f = fleet([positioned('a', 0.001), positioned('b', 0.002), positioned('c')], { rtts });
    const plan = planFleet(f);
    const json = toPlanJson(f, plan);
    const perDevice: Record<string, number> = { a: 0.001, b: 0.002, c: 0 };
    for (const s of json.stages) closeTo(s.position_ms!, (s.end - s.start) * perDevice[s.device]!);
    const bare = toPlanJson(fleet([timed('a'), timed('b'), timed('c')], { rtts }), planFleet(fleet([timed('a'), timed('b'), timed('c')], { rtts })));
    expect(json.stages.map((s) => [s.start, s.end, s.stage_ms])).toEqual(bare.stages.map((s) => [s.start, s.end, s.stage_ms]));
  });

  it('adds each edge sending device\'s measured hop cost to the circuit: Σ stages + Σ RTT / 2 + Σ hops', () => {
    const f = fleet([timed('a', 0.4), timed('b', 0.7), timed('c', 1.1)], { rtts });
    const plan = planFleet(f);
    const stages = plan.division.stages.reduce((n, s) => n + s.cost, 0);
    expect(plan.edges).toHaveLength(3);
    expect(plan.hops).toEqual(plan.edges.map((e) => [0.4, 0.7, 1.1][e.from]));
    closeTo(plan.circuit, stages + 3 * 0.5 + 0.4 + 0.7 + 1.1);
    const json = toPlanJson(f, plan);
    expect(json.edges.map((e) => e.hop_ms).sort()).toEqual([0.4, 0.7, 1.1]);
    expect(json.stages.map((s) => s.step_ms)).toEqual([0.5, 0.5, 0.5]);
    // Without hop figures the circuit is stages + one-way times alone; the division does not change (every ring pays the same hops).
    const bare = planFleet(fleet([timed('a'), timed('b'), timed('c')], { rtts }));
    closeTo(bare.circuit, stages + 1.5);
    expect(bare.division.stages.map((s) => [s.start, s.end])).toEqual(plan.division.stages.map((s) => [s.start, s.end]));
  });

  it('prices no hop for a single device (no edges) and none in the memory tier', () => {
    const one = planFleet(fleet([timed('a', 5)]));
    expect(one.hops).toEqual([]);
    closeTo(one.circuit, 0.5 + 32 * 2 + 2 * (500e6 / 200e6));
    const memory = planFleet(fleet([{ name: 'a', memoryBytes: 64 * GB, hopMs: 3 }, { name: 'b', memoryBytes: 64 * GB, hopMs: 3 }], { rtts: [{ a: 'a', b: 'b', rttMs: 1 }] }));
    expect(memory.tier).toBe('memory');
    expect(memory.hops).toEqual([0, 0]);
  });

  it('reads hop_ms from a fleet file', () => {
    const file = parseFleetFile({
      model: { name: 'm', layers: 4, block_bytes: 1000, head_bytes: 100, head_resident_bytes: 100, kv_bytes_per_token_per_layer: 1 },
      context: 16,
      devices: [{ name: 'a', memory_bytes: 1e9, block_ms: 1, hop_ms: 0.25 }, { name: 'b', memory_bytes: 1e9, block_ms: 1, hop_ms: null }],
    });
    expect(file.devices.map((d) => d.hopMs)).toEqual([0.25, undefined]);
    expect(() => parseFleetFile({ ...JSON.parse(JSON.stringify({ model: { name: 'm', layers: 4, block_bytes: 1000, head_bytes: 100, head_resident_bytes: 100, kv_bytes_per_token_per_layer: 1 }, context: 16 })), devices: [{ name: 'a', memory_bytes: 1e9, hop_ms: -1 }] })).toThrow(/hop_ms/);
  });
});

describe('planner', () => {
  it('plans the example fleet of the issue and prints the documented JSON shape', () => {
    const file = parseFleetFile({
      model: { name: 'qwen3-32b-q4_k_m', layers: 64, block_bytes: 292000000, head_bytes: 640000000, head_resident_bytes: 1070000000, kv_bytes_per_token_per_layer: 4096 },
      context: 4096,
      concurrency: 4,
      devices: [
        { name: 'alice-4090', memory_bytes: 23000000000, bandwidth_gbps: 1008, block_ms: null, nat: 'permissive', rendezvous_rtt_ms: 12 },
        { name: 'bob-m2', memory_bytes: 20000000000, bandwidth_gbps: 100, nat: 'restrictive', rendezvous_rtt_ms: 14 },
      ],
      rtt_ms: [['alice-4090', 'bob-m2', 2.5]],
    });
    const f = file as Fleet;
    const json = toPlanJson(f, planFleet(f));
    expect(Object.keys(json)).toEqual(['tier', 'order', 'head', 'stages', 'bottleneck_ms', 'circuit_ms', 'utilization', 'fetch_bytes', 'edges', 'baselines']);
    expect(json.tier).toBe('bandwidth');
    expect(json.head).toBe('alice-4090');
    expect(json.order).toEqual(['alice-4090', 'bob-m2']);
    expect(json.stages.map((s) => [s.device, s.start, s.end, s.head])).toEqual([
      ['alice-4090', 0, json.stages[0]?.end, true],
      ['bob-m2', json.stages[0]?.end, 64, false],
    ]);
    expect(Object.keys(json.stages[0] ?? {})).toEqual(['device', 'start', 'end', 'head', 'stage_ms', 'step_ms', 'head_ms', 'segments', 'position_ms', 'memory_bytes', 'fetch_bytes']);
    // Nothing held: every device fetches its whole range.
    expect(json.fetch_bytes).toBe(64 * 292000000);
    expect(json.edges).toEqual([
      { from: 'alice-4090', to: 'bob-m2', kind: 'direct', latency_ms: 2.5, hop_ms: 0, predicted: 'direct-udp' },
      { from: 'bob-m2', to: 'alice-4090', kind: 'direct', latency_ms: 2.5, hop_ms: 0, predicted: 'direct-udp' },
    ]);
    // Each of the two edges is crossed once, one way: half its 2.5 ms RTT.
    expect(json.circuit_ms).toBeCloseTo((json.stages[0]?.stage_ms ?? 0) + (json.stages[1]?.stage_ms ?? 0) + 2.5, 2);
    expect(Object.keys(json.baselines.uniform)).toEqual(['fits', 'bottleneck_ms', 'utilization', 'stages']);
    expect(json.bottleneck_ms).toBeLessThanOrEqual(json.baselines.uniform.bottleneck_ms ?? Infinity);
  });

  it('prices a stage by the issue formula: blocks × block_bytes + head_bytes over bandwidth', () => {
    const plan = planFleet(fleet([{ name: 'solo', memoryBytes: 100 * GB, bandwidthGBps: 100 }]));
    const stage = plan.division.stages[0];
    closeTo(stage?.cost ?? 0, ((32 * 200e6 + 500e6) / (100 * GB)) * 1000);
    expect(stage?.memoryBytes).toBe(32 * (200e6 + 4096 * 4096) + 1e9);
    expect(plan.division.utilization).toBe(1);
  });

  it('uses a measured block time in place of the bandwidth estimate', () => {
    const plan = planFleet(
      fleet([
        { name: 'a', memoryBytes: 100 * GB, bandwidthGBps: 100, blockMs: 1 },
        { name: 'b', memoryBytes: 100 * GB, bandwidthGBps: 100, blockMs: 3 },
      ]),
    );
    expect(plan.tier).toBe('measured');
    // The head is priced at the device's measured block rate: 500e6 / 200e6 of a block, 2.5 ms on
    // a and 7.5 ms on b. On a: 24 + 2.5 against 3 × 8 = 26.5 ms. On b: 3 × 6 + 7.5 = 25.5 against
    // 26 = 26 ms, better by less than 5%, so the anchor a keeps it.
    expect(plan.head).toBe(0);
    expect(plan.division.stages.map((s) => [s.device, s.end - s.start])).toEqual([
      [0, 24],
      [1, 8],
    ]);
    closeTo(plan.division.bottleneck, 26.5);
    expect(plan.rotations.map((r) => (r === null ? null : Math.round(r * 1e6) / 1e6))).toEqual([26.5, 26]);
  });

  it.each([
    { what: 'measured block times', devices: [{ blockMs: 1 }, { blockMs: 2 }], tier: 'measured' },
    { what: 'a bandwidth where a block time is missing', devices: [{ blockMs: 1 }, { bandwidthGBps: 50 }], tier: 'bandwidth' },
    { what: 'FLOPS when a bandwidth is missing', devices: [{ bandwidthGBps: 50, tflops: 10 }, { tflops: 20 }], tier: 'flops' },
    { what: 'memory shares when nothing is measured', devices: [{ tflops: 10 }, {}], tier: 'memory' },
  ])('falls back to $tier given $what', ({ devices, tier }) => {
    const plan = planFleet(fleet(devices.map((d, i) => ({ name: `d${i}`, memoryBytes: 100 * GB, ...d }))));
    expect(plan.tier).toBe(tier);
  });

  it('divides by memory share in the memory tier and reports no times', () => {
    const f = fleet([
      { name: 'big', memoryBytes: 30 * GB },
      { name: 'small', memoryBytes: 10 * GB },
    ]);
    const json = toPlanJson(f, planFleet(f));
    expect(json.tier).toBe('memory');
    expect(json.bottleneck_ms).toBeNull();
    expect(json.stages.every((s) => s.stage_ms === null)).toBe(true);
    const blocks = Object.fromEntries(json.stages.map((s) => [s.device, s.end - s.start]));
    // Costs 1 and 3 per block, the head worth 2.5 blocks: 24 + 2.5 against 3 × 8 = 26.5 with the
    // head on big; on small it would be 26 (less than 5% better), so the anchor keeps it.
    expect(blocks).toEqual({ big: 24, small: 8 });
  });

  it('keeps the anchor as head unless another head is better by more than 5%', () => {
    // b is 4% faster than a: not enough to move the head.
    const close = fleet([
      { name: 'a', memoryBytes: 100 * GB, bandwidthGBps: 100 },
      { name: 'b', memoryBytes: 100 * GB, bandwidthGBps: 104 },
    ]);
    const kept = planFleet(close);
    expect(kept.head).toBe(0);
    const rotations = kept.rotations as number[];
    expect(rotations[1]).toBeLessThan(rotations[0] as number);
    // With a much faster member the head moves to it.
    const far = fleet([
      { name: 'a', memoryBytes: 100 * GB, bandwidthGBps: 100 },
      { name: 'b', memoryBytes: 100 * GB, bandwidthGBps: 1000 },
      { name: 'c', memoryBytes: 100 * GB, bandwidthGBps: 100 },
    ]);
    const moved = planFleet(far);
    expect(moved.head).toBe(1);
    expect(moved.order[0]).toBe(1);
  });

  it('moves the head off an anchor that cannot hold it', () => {
    const plan = planFleet(
      fleet([
        { name: 'tiny', memoryBytes: 1.1 * GB, bandwidthGBps: 100 }, // head 1 GB + one block 0.22 GB
        { name: 'big', memoryBytes: 100 * GB, bandwidthGBps: 100 },
      ]),
    );
    expect(plan.head).toBe(1);
  });

  it('refuses a fleet that cannot hold the model, naming the device and how short it is', () => {
    const f = fleet([
      { name: 'a', memoryBytes: 3 * GB, bandwidthGBps: 100 },
      { name: 'b', memoryBytes: 2 * GB, bandwidthGBps: 100 },
    ]);
    const err = planOrError(f);
    expect(err).toBeInstanceOf(KiwiError);
    const e = err as KiwiError;
    expect(e.code).toBe('PLAN_INSUFFICIENT_MEMORY');
    expect(e.details.device).toBeTypeOf('string');
    expect(e.details.short_by_bytes).toBeGreaterThan(0);
    expect(e.message).toContain(`'${e.details.device as string}' is short by ${e.details.short_by_bytes as number} bytes`);
    expect(e.toJSON()).toMatchObject({ code: 'PLAN_INSUFFICIENT_MEMORY', device: e.details.device, short_by_bytes: e.details.short_by_bytes });
  });

  it('names several devices when more than one cannot hold a single block', () => {
    const err = planOrError(
      fleet([
        { name: 'a', memoryBytes: 100 * GB, bandwidthGBps: 100 },
        { name: 'b', memoryBytes: 1e6, bandwidthGBps: 100 },
        { name: 'c', memoryBytes: 1e3, bandwidthGBps: 100 },
      ]),
    ) as KiwiError;
    expect(err.code).toBe('PLAN_INSUFFICIENT_MEMORY');
    expect(err.details.device).toBe('c');
    expect(err.message).toMatch(/and so do 'b'/);
  });

  it('refuses more devices than blocks', () => {
    const f = fleet(
      [
        { name: 'a', memoryBytes: 100 * GB, bandwidthGBps: 100 },
        { name: 'b', memoryBytes: 100 * GB, bandwidthGBps: 100 },
      ],
      { model: { name: 'm', layers: 1, blockBytes: 1, headBytes: 1, headResidentBytes: 1, kvBytesPerTokenPerLayer: 1 } },
    );
    expect((planOrError(f) as KiwiError).code).toBe('PLAN_TOO_MANY_DEVICES');
  });

  it('places a model that no uniform split can place', () => {
    const f = fleet([
      { name: 'big', memoryBytes: 40 * GB, bandwidthGBps: 400 },
      { name: 'small', memoryBytes: 2.5 * GB, bandwidthGBps: 100 },
    ]);
    const plan = planFleet(f);
    expect(plan.baselines.uniform.fits).toBe(false);
    expect(plan.division.fits).toBe(true);
  });

  it('finds the brute-force optimum over every order and division of random small fleets', () => {
    fc.assert(
      fc.property(arbitraryFleet({ measured: true }), (f) => {
        const brute = bruteForce(f);
        const plan = planOrError(f, 0);
        if (brute.bottleneckMs === null) {
          expect(plan).toBeInstanceOf(KiwiError);
          return;
        }
        expect(plan).not.toBeInstanceOf(KiwiError);
        closeTo((plan as PlanResult).division.bottleneck, brute.bottleneckMs);
      }),
      { numRuns: 400 },
    );
  });

  it('stays within the 5% anchor margin of the optimum, and at the optimum for the head it keeps', () => {
    fc.assert(
      fc.property(arbitraryFleet(), (f) => {
        const brute = bruteForce(f);
        const plan = planOrError(f);
        if (brute.bottleneckMs === null || plan instanceof KiwiError) return;
        const got = plan.division.bottleneck;
        closeTo(got, brute.byHead[plan.head] as number);
        expect(got).toBeLessThanOrEqual(brute.bottleneckMs / (1 - 0.05) + 1e-9);
      }),
      { numRuns: 300 },
    );
  });

  it('never admits a plan that does not fit, and never refuses one that fits', () => {
    fc.assert(
      fc.property(arbitraryFleet(), (f) => {
        const feasible = bruteForce(f).bottleneckMs !== null;
        const plan = planOrError(f);
        if (!feasible) {
          expect(plan).toBeInstanceOf(KiwiError);
          expect((plan as KiwiError).code).toBe('PLAN_INSUFFICIENT_MEMORY');
          return;
        }
        expect(plan).not.toBeInstanceOf(KiwiError);
        const p = plan as PlanResult;
        expect(p.division.stages.map((s) => s.start)[0]).toBe(0);
        expect(p.division.stages.at(-1)?.end).toBe(f.model.layers);
        for (const [i, s] of p.division.stages.entries()) {
          expect(s.end - s.start).toBeGreaterThanOrEqual(1);
          if (i > 0) expect(s.start).toBe(p.division.stages[i - 1]?.end);
          expect(bruteStageMemory(f, s.end - s.start, s.head)).toBeLessThanOrEqual(f.devices[s.device]?.memoryBytes as number);
        }
      }),
      { numRuns: 400 },
    );
  });

  it('names a shortfall that is exact: that much more memory on that device fits, one byte less does not', () => {
    fc.assert(
      fc.property(arbitraryFleet(), (f) => {
        const err = planOrError(f);
        if (!(err instanceof KiwiError) || err.code !== 'PLAN_INSUFFICIENT_MEMORY') return;
        const short = err.details.short_by_bytes as number;
        const name = err.details.device as string;
        const grow = (by: number): Fleet => ({ ...f, devices: f.devices.map((d) => (d.name === name ? { ...d, memoryBytes: d.memoryBytes + by } : d)) });
        const single = !/and so do/.test(err.message);
        if (single) {
          expect(bruteForce(grow(short)).bottleneckMs).not.toBeNull();
          expect(bruteForce(grow(short - 1)).bottleneckMs).toBeNull();
        } else {
          expect(bruteForce(grow(short)).bottleneckMs).toBeNull();
        }
      }),
      { numRuns: 400 },
    );
  });

  it('is never worse than a uniform or memory-proportional division that fits', () => {
    fc.assert(
      fc.property(arbitraryFleet({ maxDevices: 5, maxLayers: 12, measured: true }), (f) => {
        const plan = planOrError(f);
        if (plan instanceof KiwiError) return;
        for (const base of [plan.baselines.uniform, plan.baselines.proportional]) {
          if (base.fits) expect(plan.division.bottleneck).toBeLessThanOrEqual(base.bottleneck * (1 + 1e-12));
        }
      }),
      { numRuns: 400 },
    );
  });
});
