import { describe, expect, test } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { testModelPath } from '../model/test-models.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import { ffnWidth, packedBytesPerWeight, packedBytesPerWeightByName, PREFILL_CHUNK_TOKENS, SCRATCH_RETENTION, scratchBytesPerPosition, stageResidentBytes, tensorResidentBytes } from './memory-model.js';

describe('the runtime memory model', () => {
  test("packed bits per weight follow onnxruntime's MatMulNBits layout (data + f32 scale + f32 block sum per block)", () => {
    expect(packedBytesPerWeight(GgmlType.Q4_0) * 8).toBe(6);
    expect(packedBytesPerWeight(GgmlType.Q8_0) * 8).toBe(10);
    expect(packedBytesPerWeight(GgmlType.Q6_K) * 8).toBe(12);
    expect(packedBytesPerWeight(GgmlType.Q4_K) * 8).toBe(7);
    expect(packedBytesPerWeight(GgmlType.F16)).toBe(4);
    expect(packedBytesPerWeightByName('Q4_0')).toBe(0.75);
    expect(packedBytesPerWeightByName('nonsense')).toBe(4);
  });

  test('a stage holds its layers packed, the embedding as GGUF bytes when first, and f32 K/V and kept rows in 256-position steps', async () => {
    const file = await openGguf(await testModelPath('stories260K.gguf'));
    const shape = await modelShapeFromGguf(file, { maxPositions: 64 });
    const first = stageResidentBytes(file, shape, { start: 0, end: 2, head: false }, { kvPositions: 10 });
    const later = stageResidentBytes(file, shape, { start: 2, end: 4, head: false }, { kvPositions: 10 });
    expect(first.embedding).toBe(file.tensor('token_embd.weight')!.byteLength);
    expect(later.embedding).toBe(0);
    expect(first.weights).toBe(later.weights);
    const blk0 = file.tensors.filter((t) => t.name.startsWith('blk.0.') || t.name.startsWith('blk.1.')).reduce((a, t) => a + tensorResidentBytes(t), 0);
    expect(first.weights).toBe(blk0);
    expect(first.kv).toBe((2 * 2 * shape.kvHeads * shape.headDim * 4 + shape.hidden * 4) * 256);
    const head = stageResidentBytes(file, shape, { start: 4, end: 5, head: true }, { kvPositions: 10 });
    expect(head.weights).toBeGreaterThan(later.weights / 2);
  });

  test("a run's scratch holds a prefill chunk's block and feed-forward buffers, and its attention scores grow with the positions", async () => {
    const file = await openGguf(await testModelPath('stories260K.gguf'));
    const shape = await modelShapeFromGguf(file, { maxPositions: 512 });
    const ffn = ffnWidth(file, shape.hidden);
    expect(ffn).toBe(file.tensor('blk.0.ffn_up.weight')!.dims[1]);
    const at = (kvPositions: number) => stageResidentBytes(file, shape, { start: 1, end: 3, head: false }, { kvPositions }).scratch;
    expect(at(0)).toBe(SCRATCH_RETENTION * PREFILL_CHUNK_TOKENS * 4 * (6 * shape.hidden + 4 * ffn));
    expect(at(512) - at(256)).toBe(256 * scratchBytesPerPosition({ heads: shape.heads }));
    const head = stageResidentBytes(file, shape, { start: 3, end: 5, head: true }, { kvPositions: 0 }).scratch;
    expect(head - at(0)).toBe(shape.vocab * 4 * 2);
  });
});
