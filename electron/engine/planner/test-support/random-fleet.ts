// fast-check generators of small fleets for the planner's property tests: few enough devices and
// blocks that a brute force over every order and division stays quick, with memories spread so
// that some fleets fit and some do not.
import fc from 'fast-check';
import type { DeviceSpec, Fleet } from '../fleet.js';

export interface RandomFleetOptions {
  maxDevices?: number;
  maxLayers?: number;
  /** Give some devices a measured block_ms instead of only a bandwidth. */
  measured?: boolean;
}

export function arbitraryFleet(options: RandomFleetOptions = {}): fc.Arbitrary<Fleet> {
  const maxDevices = options.maxDevices ?? 4;
  const maxLayers = options.maxLayers ?? 8;
  return fc
    .record({
      devices: fc.integer({ min: 1, max: maxDevices }),
      extraLayers: fc.integer({ min: 0, max: maxLayers - 1 }),
      blockBytes: fc.integer({ min: 1_000, max: 50_000 }),
      headBytes: fc.integer({ min: 0, max: 100_000 }),
      headResidentBytes: fc.integer({ min: 0, max: 150_000 }),
      kv: fc.integer({ min: 0, max: 64 }),
      context: fc.integer({ min: 1, max: 64 }),
      concurrency: fc.integer({ min: 1, max: 4 }),
      seed: fc.array(
        fc.record({
          memoryPercent: fc.integer({ min: 0, max: 120 }),
          bandwidthGBps: fc.integer({ min: 5, max: 20_000 }).map((x) => x / 10),
          blockMs: fc.option(fc.integer({ min: 1, max: 5000 }).map((x) => x / 100), { nil: undefined }),
          nat: fc.constantFrom<DeviceSpec['nat']>('permissive', 'restrictive', undefined),
          rendezvousRttMs: fc.option(fc.integer({ min: 0, max: 300 }), { nil: undefined }),
        }),
        { minLength: maxDevices, maxLength: maxDevices },
      ),
    })
    .filter((r) => r.devices <= Math.min(maxDevices, maxLayers))
    .map((r) => {
      const layers = Math.min(maxLayers, r.devices + r.extraLayers);
      const blockMemory = r.blockBytes + r.kv * r.context * r.concurrency;
      // Memories spread so that about half of the fleets fit and half do not.
      const wholeModel = layers * blockMemory + r.headResidentBytes;
      const devices: DeviceSpec[] = r.seed.slice(0, r.devices).map((s, i) => {
        const d: DeviceSpec = { name: `d${i}`, memoryBytes: Math.round((s.memoryPercent * wholeModel * 3) / 100 / r.devices), bandwidthGBps: s.bandwidthGBps };
        if (options.measured === true && s.blockMs !== undefined) d.blockMs = s.blockMs;
        if (s.nat !== undefined) d.nat = s.nat;
        if (s.rendezvousRttMs !== undefined) d.rendezvousRttMs = s.rendezvousRttMs;
        return d;
      });
      return {
        model: {
          name: 'random',
          layers,
          blockBytes: r.blockBytes,
          headBytes: r.headBytes,
          headResidentBytes: r.headResidentBytes,
          kvBytesPerTokenPerLayer: r.kv,
        },
        context: r.context,
        concurrency: r.concurrency,
        devices,
        rtts: [],
      };
    });
}
