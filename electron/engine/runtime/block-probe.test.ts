// The per-block probe: it takes a model's block shape and main weight type from the GGUF, and
// times real one-block and PROBE_BLOCKS-block stages of that shape, splitting a step into its
// fixed part and its per-block part, and the one-block stage with the model's head (its vocabulary
// and projection type) for what the head adds.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { synthesizeModel } from '../model/synth/synth.js';
import { testModelPath } from '../model/test-models.js';
import { PROBE_BLOCKS, PROBE_FAR_POSITIONS, blockProbeKey, blockShapeOf, headTime, measureBlock, positionTime, splitStepTime } from './block-probe.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-block-probe-test-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('block probe', () => {
  test('reads the block shape and weight type of a model (stories260K: f32)', async () => {
    const shape = blockShapeOf(await openGguf(await testModelPath('stories260K.gguf')));
    expect(shape).toEqual({ architecture: 'llama', hidden: 64, feedForward: 172, heads: 8, kvHeads: 4, headDim: 8, qkvBias: false, qkNorm: false, quant: 'f32', head: { vocab: 512, quant: 'f32' } });
    expect(blockProbeKey(shape, 'cpu')).toBe('llama:e64:f172:h8/4x8:f32:o512f32:cpu:p4');
    // A head type synth cannot write (none here) leaves the head out of the key: it is priced from the block.
    const { head: _head, ...headless } = shape;
    expect(blockProbeKey(headless, 'cpu')).toBe('llama:e64:f172:h8/4x8:f32:cpu:p4');
  });

  test('splits a step into its fixed part and its block: median of paired differences', () => {
    // One block: step 2 + block 5 (one run slowed by load); three blocks: 2 + 15.
    expect(splitStepTime([7, 7.2, 30, 6.8, 7], [17, 17.2, 17.1, 16.8, 17], 3)).toEqual({ blockMs: 5, stepMs: 2 });
    expect(splitStepTime([7], [12], 2)).toEqual({ blockMs: 5, stepMs: 2 });
    // Load swamped the difference: the whole one-block step stands for the block, as before the split.
    expect(splitStepTime([7, 7, 7], [6, 6.5, 7])).toEqual({ blockMs: 7, stepMs: 0 });
    expect(() => splitStepTime([1, 2], [3])).toThrow(/paired/);
    expect(() => splitStepTime([1], [3], 1)).toThrow(/paired/);
  });

  test('prices a cached position per block: median paired difference over blocks × gap, at least 0', () => {
    // 4 blocks, 1000 positions apart: 12 -> 20 ms (one pair disturbed) is 2 µs a position a block.
    expect(positionTime([12, 12.1, 11.9, 30], [20, 20.1, 19.9, 20], 4, 1000)).toBeCloseTo(0.002, 9);
    expect(positionTime([12, 12], [11, 11.5], 4, 1000)).toBe(0);
    expect(() => positionTime([1], [], 4, 1000)).toThrow(/paired/);
    expect(() => positionTime([1], [2], 4, 0)).toThrow(/paired/);
  });

  test('prices the head as the median paired difference with and without it, at least 0', () => {
    expect(headTime([3, 3.1, 2.9, 9], [12, 12.1, 11.9, 12])).toBeCloseTo(9, 9);
    expect(headTime([3, 3], [2.5, 2.9])).toBe(0);
    expect(() => headTime([1], [])).toThrow(/paired/);
  });

  test('times a q4_0 qwen2 block (with qkv bias) and its q8_0 head of a synthetic model and reports the medians of its runs', async () => {
    const path = join(dir, 'qwen2-q4_0.gguf');
    await synthesizeModel({
      shape: {
        name: 'tiny-qwen2',
        architecture: 'qwen2',
        blockCount: 2,
        embeddingLength: 256,
        headCount: 4,
        headCountKv: 2,
        feedForwardLength: 512,
        // A head many times a block's size, so that what it adds stands out of a loaded machine's noise.
        vocabSize: 32000,
        contextLength: 256,
        rmsEps: 1e-6,
        ropeFreqBase: 1e6,
        tiedEmbeddings: true,
        qkvBias: true,
        qkNorm: false,
      },
      quant: GgmlType.Q4_0,
      headType: GgmlType.Q8_0,
      out: path,
    });
    const shape = blockShapeOf(await openGguf(path));
    expect(shape).toMatchObject({ architecture: 'qwen2', hidden: 256, quant: 'q4_0', qkvBias: true, head: { vocab: 32000, quant: 'q8_0' } });
    const progress: string[] = [];
    const r = await measureBlock(shape, { threads: 1, runs: 5, warmupRuns: 1, onProgress: (m) => progress.push(m) });
    expect(r.runs).toBe(5);
    expect(r.samplesMs).toHaveLength(5);
    expect(r.longSamplesMs).toHaveLength(5);
    expect(r.provider).toBe('cpu');
    expect({ blockMs: r.blockMs, stepMs: r.stepMs }).toEqual(splitStepTime(r.samplesMs, r.longSamplesMs));
    expect(r.blockMs).toBeGreaterThan(0);
    expect(r.stepMs).toBeGreaterThanOrEqual(0);
    expect(r.positionSamplesMs.near).toHaveLength(5);
    expect(r.positionMs).toBe(positionTime(r.positionSamplesMs.near, r.positionSamplesMs.far, PROBE_BLOCKS, PROBE_FAR_POSITIONS));
    expect(r.headSamplesMs?.with).toHaveLength(5);
    expect(r.headMs).toBe(headTime(r.headSamplesMs!.without, r.headSamplesMs!.with));
    expect(r.headMs).toBeGreaterThan(0);
    expect(progress).toContain(`block run 5/5: ${r.samplesMs[4]!.toFixed(2)} ms one block, ${r.longSamplesMs[4]!.toFixed(2)} ms ${PROBE_BLOCKS}`);
  });
});
