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
    expect(deviceFromCapabilities(undefined)).toBeUndefined();
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
});
