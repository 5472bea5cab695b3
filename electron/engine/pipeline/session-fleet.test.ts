import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import type { ModelSizes } from '../planner/fleet.js';
import { deviceFromCapabilities, planRing, sessionFleet, type SessionFleetInput } from './session-fleet.js';

const model: ModelSizes = { name: 'm', layers: 8, blockBytes: 100_000_000, headBytes: 50_000_000, headResidentBytes: 100_000_000, kvBytesPerTokenPerLayer: 1024 };
const GB = 1e9;

const input = (devices: SessionFleetInput['devices'], links: SessionFleetInput['links'] = []): SessionFleetInput => ({
  model, context: 1024, concurrency: 1, devices, fallback: { memoryBytes: 4 * GB }, links,
});

describe('the session as a fleet', () => {
  it('reads the device a member reported with kiwi bench --json', () => {
    expect(deviceFromCapabilities({ fleet_device: { name: 'x', memory_bytes: 123, bandwidth_gbps: 20, block_ms: null } })).toEqual({ memoryBytes: 123, bandwidthGBps: 20 });
    expect(deviceFromCapabilities({ fleet_device: { memory_bytes: 'lots' } })).toBeUndefined();
    // A measured block time (kiwi bench --model) reaches the planner: the `measured` tier.
    expect(deviceFromCapabilities({ fleet_device: { memory_bytes: 123, bandwidth_gbps: 20, block_ms: 2.5 } })).toEqual({ memoryBytes: 123, bandwidthGBps: 20, blockMs: 2.5 });
    // With its fixed step time (the probe's one-block stage less its block): counted once per stage.
    expect(deviceFromCapabilities({ fleet_device: { memory_bytes: 123, block_ms: 2.5, step_ms: 1.2 } })).toEqual({ memoryBytes: 123, blockMs: 2.5, stepMs: 1.2 });
    // And what a cached position adds (the drift detector judges a step at its position by it).
    expect(deviceFromCapabilities({ fleet_device: { memory_bytes: 123, block_ms: 2.5, step_ms: 1.2, position_ms: 0.001 } })).toMatchObject({ positionMs: 0.001 });
    // And the head the probe timed (with a block time only: it prices the head in the measured tier).
    expect(deviceFromCapabilities({ fleet_device: { memory_bytes: 123, block_ms: 2.5, head_ms: 7.5 } })).toMatchObject({ headMs: 7.5 });
    expect(deviceFromCapabilities({ fleet_device: { memory_bytes: 123, head_ms: 7.5 } })?.headMs).toBeUndefined();
    expect(deviceFromCapabilities({ fleet_device: { memory_bytes: 123, block_ms: 2.5, head_ms: -1 } })).toBeUndefined();
    // A --memory-mb budget and a device bench's free memory cover the whole process, runtime included.
    expect(deviceFromCapabilities({ memory_budget_bytes: 123, fleet_device: { memory_bytes: 123 } })).toEqual({ memoryBytes: 123, memoryCoversRuntime: true });
    expect(deviceFromCapabilities({ memory: { total_bytes: 1 }, bandwidth: { host_gbps: 1 }, fleet_device: { memory_bytes: 9 } })?.memoryCoversRuntime).toBe(true);
    expect(deviceFromCapabilities(undefined)).toBeUndefined();
  });

  it('a block time the ring measured (a whole step over its blocks) replaces the reported block and step time', () => {
    const { fleet } = sessionFleet(input([{ peer: 0, name: 'host', capabilities: { fleet_device: { memory_bytes: 4 * GB, block_ms: 2, step_ms: 1 } }, blockMs: 3 }]));
    expect(fleet.devices[0]).toMatchObject({ blockMs: 3, stepMs: 0 });
  });

  it('scales the probe\'s head time by the measured block time against the probe\'s', () => {
    const caps = { fleet_device: { memory_bytes: 4 * GB, block_ms: 2, step_ms: 1, head_ms: 6 } };
    const { fleet } = sessionFleet(input([{ peer: 0, name: 'host', capabilities: caps, blockMs: 3, stepMs: 1 }, { peer: 1, name: 'ada', capabilities: caps }]));
    expect(fleet.devices.map((d) => [d.blockMs, d.headMs])).toEqual([[3, 9], [2, 6]]);
  });

  it('keeps the fixed step part the ring measurement kept, and prices the ring\'s measured hop cost on every device', () => {
    const caps = { fleet_device: { memory_bytes: 4 * GB, block_ms: 2, step_ms: 1 } };
    const { fleet } = sessionFleet({ ...input([{ peer: 0, name: 'host', capabilities: caps, blockMs: 3, stepMs: 1 }, { peer: 1, name: 'ada', capabilities: caps }]), hopMs: 0.4 });
    expect(fleet.devices.map((d) => [d.blockMs, d.stepMs, d.hopMs])).toEqual([[3, 1, 0.4], [2, 1, 0.4]]);
    expect(sessionFleet(input([{ peer: 0, name: 'host', capabilities: caps }])).fleet.devices[0]!.hopMs).toBeUndefined();
  });

  it('stands the host\'s measurement in for members that reported nothing, and makes names unique', () => {
    const { fleet, peers } = sessionFleet(
      input([
        { peer: 0, name: 'host', capabilities: undefined },
        { peer: 3, name: 'ada', capabilities: { fleet_device: { memory_bytes: 2 * GB } } },
        { peer: 5, name: 'ada', capabilities: undefined },
      ], [{ a: 0, b: 3, rttMs: 1.5 }, { a: 3, b: 5, rttMs: undefined }]),
    );
    expect(fleet.devices.map((d) => [d.name, d.memoryBytes])).toEqual([['host', 4 * GB], ['ada', 2 * GB], ['ada#2', 4 * GB]]);
    expect(peers).toEqual([0, 3, 5]);
    expect(fleet.rtts).toEqual([{ a: 'host', b: 'ada', rttMs: 1.5 }]);
  });

  it('plans a ring that starts at the host with the head and tiles every layer', () => {
    const { stages, plan } = planRing(input([
      { peer: 0, name: 'host', capabilities: undefined },
      { peer: 1, name: 'ada', capabilities: undefined },
      { peer: 2, name: 'bob', capabilities: undefined },
    ]));
    expect(stages[0]).toMatchObject({ peer: 0, start: 0, head: true });
    expect(stages.map((s) => s.peer).sort()).toEqual([0, 1, 2]);
    let next = 0;
    for (const s of stages) {
      expect(s.start).toBe(next);
      expect(s.end).toBeGreaterThan(s.start);
      next = s.end;
    }
    expect(next).toBe(8);
    expect(plan.head).toBe('host');
  });

  it('refuses a session that cannot hold the model, naming the device short of memory', () => {
    try {
      planRing({
        ...input([
          { peer: 0, name: 'host', capabilities: { fleet_device: { memory_bytes: 0.3 * GB } } },
          { peer: 1, name: 'tiny-laptop', capabilities: { fleet_device: { memory_bytes: 0.05 * GB } } },
        ]),
        fallback: { memoryBytes: 0.3 * GB },
      });
    } catch (err) {
      expect(isKiwiError(err, 'PLAN_INSUFFICIENT_MEMORY')).toBe(true);
      expect((err as { details: Record<string, unknown> }).details.device).toBe('tiny-laptop');
      expect((err as Error).message).toMatch(/'tiny-laptop' is short by/);
      return;
    }
    throw new Error('the plan should have been refused');
  });
  it('passes what each device holds to the planner, which keeps a range that stays within 5%', () => {
    // The ring after m2 left: host 0-9, ada 9-21 (the 8B shape, ada 1/0.56 as fast per block).
    const holdsInput = (holds: boolean): SessionFleetInput => ({
      ...input([
        { peer: 0, name: 'host', capabilities: undefined, ...(holds ? { holds: [{ start: 0, end: 9 }] } : {}) },
        { peer: 4, name: 'ada', capabilities: { fleet_device: { memory_bytes: 100 * GB, block_ms: 0.56 } }, ...(holds ? { holds: [{ start: 9, end: 21 }] } : {}) },
      ]),
      model: { ...model, layers: 32, headBytes: 2 * model.blockBytes },
      fallback: { memoryBytes: 100 * GB, blockMs: 1 },
    });
    expect(sessionFleet(holdsInput(true)).fleet.devices.map((d) => d.holds)).toEqual([[{ start: 0, end: 9 }], [{ start: 9, end: 21 }]]);
    const kept = planRing(holdsInput(true));
    expect(kept.stages.map((s) => [s.peer, s.start, s.end])).toEqual([[0, 0, 9], [4, 9, 32]]);
    expect(kept.plan.stages.map((s) => s.fetch_bytes)).toEqual([0, 11 * model.blockBytes]);
    const fresh = planRing(holdsInput(false));
    expect(fresh.stages.map((s) => [s.peer, s.start, s.end])).toEqual([[0, 0, 10], [4, 10, 32]]);
    expect(fresh.plan.fetch_bytes).toBe(32 * model.blockBytes);
  });

  it('keeps the held division within a re-plan\'s move margin (the drift threshold once stages were measured), and moves past it', () => {
    // The ring after a drift re-plan on measured figures: host 0-2, ada 2-5, bob 5-8; the host is
    // cheaper per block than the members, so the fastest division gives it more.
    const measuredInput = (bobBlockMs: number, moveMargin: number | undefined): SessionFleetInput => ({
      ...input([
        { peer: 0, name: 'host', capabilities: undefined, holds: [{ start: 0, end: 2 }], blockMs: 0.68, stepMs: 1.1 },
        { peer: 1, name: 'ada', capabilities: undefined, holds: [{ start: 2, end: 5 }], blockMs: 1.1, stepMs: 1.1 },
        { peer: 2, name: 'bob', capabilities: undefined, holds: [{ start: 5, end: 8 }], blockMs: bobBlockMs, stepMs: 1.1 },
      ]),
      ...(moveMargin !== undefined ? { moveMargin } : {}),
    });
    const ranges = (r: ReturnType<typeof planRing>): number[][] => r.stages.map((s) => [s.peer, s.start, s.end]);
    const held = [[0, 0, 2], [1, 2, 5], [2, 5, 8]];
    expect(ranges(planRing(measuredInput(1.1, undefined)))).not.toEqual(held);
    expect(ranges(planRing(measuredInput(1.1, 0.25)))).toEqual(held);
    // bob measured three times slower: past any margin, his layers move.
    const slow = planRing(measuredInput(3.3, 0.25));
    expect(slow.stages.find((s) => s.peer === 2)!.end - slow.stages.find((s) => s.peer === 2)!.start).toBeLessThan(3);
  });
});
