import { describe, expect, test } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { summarizeModel } from '../model/model-summary.js';
import { testModelPath } from '../model/test-models.js';
import { replayScratchBytes, tensorResidentBytes } from '../runtime/memory-model.js';
import { deviceCosts, memoryCapacityBlocks, stageMemoryBytes } from './cost-model.js';
import type { Fleet } from './fleet.js';
import { RUNTIME_BASELINE_BYTES, modelSizesFromGguf, modelSizesFromSummary } from './model-sizes.js';
import { planFleet } from './plan.js';

describe('modelSizesFromGguf', () => {
  test('admits what the runtime keeps: packed blocks, the head, a stage process baseline', async () => {
    const file = await openGguf(await testModelPath('stories260K.gguf'));
    const sizes = modelSizesFromGguf(file);
    const plain = modelSizesFromSummary(summarizeModel(file));
    expect(sizes.blockBytes).toBe(plain.blockBytes);
    const blk0 = file.tensors.filter((t) => t.name.startsWith('blk.0.')).reduce((a, t) => a + tensorResidentBytes(t), 0);
    expect(sizes.blockResidentBytes).toBe(blk0);
    expect(sizes.stageOverheadBytes).toBeGreaterThanOrEqual(RUNTIME_BASELINE_BYTES);
    // The head reads its projection (the embedding when tied) in packed form and its final norm.
    const projection = file.tensor('output.weight') ?? file.tensor('token_embd.weight')!;
    expect(sizes.headReadBytes).toBe(tensorResidentBytes(projection) + tensorResidentBytes(file.tensor('output_norm.weight')!));
  });

  test('a stage costs its overhead once: it counts in stage memory and lowers how many blocks fit', () => {
    const model = { name: 'm', layers: 8, blockBytes: 100, blockResidentBytes: 150, headBytes: 10, headResidentBytes: 20, kvBytesPerTokenPerLayer: 1, stageOverheadBytes: 300 };
    // The overhead: 300 bytes and what a one-pass replay leaves (two 64 MiB chunks).
    const overhead = 300 + replayScratchBytes(1, 10);
    const memoryBytes = 1000 + overhead - 300;
    const fleet: Fleet = { model, context: 10, concurrency: 1, devices: [{ name: 'a', memoryBytes, bandwidthGBps: 10, memoryCoversRuntime: true }, { name: 'b', memoryBytes, bandwidthGBps: 10, memoryCoversRuntime: true }], rtts: [] };
    const [a] = deviceCosts(fleet, 'bandwidth');
    expect(a!.blockMemoryBytes).toBe(160);
    expect(stageMemoryBytes(a!, 2, true)).toBe(2 * 160 + 20 + overhead);
    // (1000 - 300 - 20) / 160 = 4.25 blocks with the head.
    expect(memoryCapacityBlocks(a!, true)).toBe(4);
    const plan = planFleet(fleet);
    for (const s of plan.division.stages) expect(s.memoryBytes).toBeLessThanOrEqual(memoryBytes);
    expect(plan.division.fits).toBe(true);
    // A fleet file's figure is memory for the model alone: no overhead comes out of it.
    const [b] = deviceCosts({ ...fleet, devices: fleet.devices.map((d) => ({ ...d, memoryBytes: 1000, memoryCoversRuntime: false })) }, 'bandwidth');
    expect(stageMemoryBytes(b!, 2, true)).toBe(2 * 160 + 20);
    expect(memoryCapacityBlocks(b!, true)).toBe(6);
  });
});
