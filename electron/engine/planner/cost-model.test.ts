// The cost model's stage time: a fixed step, a price per block and the head's, with reads priced
// in the runtime's packed bytes (issue 14: the file's bytes underpredicted, a probe block that
// carried the fixed step overpredicted by counting it once per block).
import { describe, expect, test } from 'vitest';
import { REPLAY_CHUNK_BYTES, replayScratchBytes } from '../runtime/memory-model.js';
import { costCapacityBlocks, deviceCosts, stageCost } from './cost-model.js';
import type { DeviceSpec, Fleet, ModelSizes } from './fleet.js';

// Q4_0-like: 4.5 bits a weight in the file, 6 packed (MLAS: 4 bits + f32 scale + f32 block sum per 32).
const model: ModelSizes = {
  name: 'm',
  layers: 16,
  blockBytes: 45_000_000,
  blockResidentBytes: 60_000_000,
  headBytes: 150_000_000,
  headReadBytes: 200_000_000,
  headResidentBytes: 350_000_000,
  kvBytesPerTokenPerLayer: 4096,
};

function costs(device: Omit<DeviceSpec, 'name' | 'memoryBytes'>, tier: 'measured' | 'bandwidth', sizes: ModelSizes = model) {
  const fleet: Fleet = { model: sizes, context: 256, concurrency: 1, devices: [{ name: 'd', memoryBytes: 1e12, ...device }], rtts: [] };
  return deviceCosts(fleet, tier)[0]!;
}

describe('stage cost', () => {
  test("a process's own memory is its fixed overhead, the scratch that grows with the context and a replay's, taken from what the device covers", () => {
    const sizes = { ...model, stageOverheadBytes: 200e6, scratchBytesPerPosition: 1000 };
    const c = costs({ stepMs: 1, blockMs: 2, memoryCoversRuntime: true }, 'measured', sizes);
    const replay = replayScratchBytes(model.kvBytesPerTokenPerLayer, 256);
    expect(replay).toBe(2 * REPLAY_CHUNK_BYTES);
    expect(c.overheadBytes).toBe(200e6 + 1000 * 256 + replay);
    expect(c.memoryBytes).toBe(1e12 - 200e6 - 1000 * 256 - replay);
  });

  test('bandwidth tier: blocks and head are priced by the packed bytes they read, plus the measured fixed step', () => {
    const c = costs({ bandwidthGBps: 10, stepMs: 1.5 }, 'bandwidth');
    expect(c.perBlock).toBeCloseTo(6, 9); // 60 MB at 10 GB/s
    expect(c.head).toBeCloseTo(20, 9);
    expect(c.step).toBe(1.5);
    expect(stageCost(c, 4, false)).toBeCloseTo(1.5 + 24, 9);
    expect(stageCost(c, 4, true)).toBeCloseTo(1.5 + 24 + 20, 9);
  });

  test('bandwidth tier without packed figures or a step falls back to the file bytes and no fixed part', () => {
    const { blockResidentBytes: _b, headReadBytes: _h, ...fileOnly } = model;
    const c = costs({ bandwidthGBps: 10 }, 'bandwidth', fileOnly);
    expect(c.perBlock).toBeCloseTo(4.5, 9);
    expect(c.head).toBeCloseTo(15, 9);
    expect(stageCost(c, 2, true)).toBeCloseTo(9 + 15, 9);
  });

  test('measured tier: the step counts once per stage, the probe block per block, the head at the block rate of its bytes', () => {
    const c = costs({ bandwidthGBps: 100, blockMs: 4, stepMs: 2 }, 'measured');
    // The measured block reads 60 MB in 4 ms; the head's 200 MB take 200/60 of that, not 2 ms at 100 GB/s.
    expect(c.head).toBeCloseTo(4 * (200 / 60), 9);
    // A one-block stage is the probe's one-block run: step + block.
    expect(stageCost(c, 1, false)).toBe(6);
    // Eight blocks: 2 + 8 × 4 = 34 ms (counting the step per block would say 48).
    expect(stageCost(c, 8, false)).toBe(34);
  });

  test('measured tier: a head the probe timed prices the head instead of the block rate of its bytes', () => {
    const c = costs({ blockMs: 4, stepMs: 2, headMs: 9 }, 'measured');
    expect(c.head).toBe(9);
    expect(stageCost(c, 2, true)).toBe(2 + 8 + 9);
    // Not in the bandwidth tier, where the device has no probe at all.
    expect(costs({ bandwidthGBps: 100, headMs: 9 }, 'bandwidth').head).toBeCloseTo(2, 9);
  });

  test('how many blocks fit a time bound leaves room for the fixed step', () => {
    const c = costs({ blockMs: 4, stepMs: 2 }, 'measured');
    expect(costCapacityBlocks(c, false, 34, 16)).toBe(8);
    expect(costCapacityBlocks(c, false, 33.9, 16)).toBe(7);
    expect(costCapacityBlocks(c, false, 1.9, 16)).toBe(-1);
  });
});
