import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { resolveShape } from '../model/synth/shapes.js';
import { synthesizeModel } from '../model/synth/synth.js';
import { modelShapeFromGguf, type ModelShape } from './decoder-shape.js';
import { freeCache } from './kv-store.js';
import { Stage, type StageInput } from './stage.js';
import { growth, MAX_SEGMENTS, SegmentedStage } from './stage-segments.js';

let dir: string;
let file: GgufFile;
let shape: ModelShape;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-segments-'));
  const path = join(dir, 'tiny.gguf');
  const tiny = { name: 'tiny', architecture: 'llama', blockCount: 5, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 512, contextLength: 128 };
  await synthesizeModel({ shape: resolveShape(JSON.stringify(tiny)), quant: GgmlType.Q4_0, out: path, seed: 11 });
  file = await openGguf(path);
  shape = await modelShapeFromGguf(file);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const open = (start: number, end: number): Promise<Stage> => Stage.open(file, shape, { start, end, head: false }, { threads: 1, replayInputs: true });

/** Hidden states out of `stage` for a prefill of 6 positions, a replayed row of 3, then a batched decode step of two requests. */
async function outputsOf(stage: SegmentedStage): Promise<Float32Array[]> {
  const h = shape.hidden;
  const x = (rows: number, seed: number): Float32Array => Float32Array.from({ length: rows * h }, (_, i) => Math.sin(seed + i * 0.37));
  const [a, b] = [stage.emptyCache(32), stage.emptyCache(32)];
  const hidden = (out: Awaited<ReturnType<SegmentedStage['forward']>>): Float32Array => {
    if (out.kind !== 'hidden') throw new Error('a member stage returned logits');
    return Float32Array.from(out.hidden);
  };
  const run = (input: StageInput, caches: typeof a[], opts = {}) => stage.forward(input, caches, opts).then(hidden);
  try {
    return [
      await run({ kind: 'hidden', hidden: x(6, 1), batch: 1, seq: 6 }, [a]),
      await run({ kind: 'hidden', hidden: x(6, 2), batch: 1, seq: 6 }, [b]),
      await run({ kind: 'hidden', hidden: x(3, 3), batch: 1, seq: 3 }, [a], { replay: true }),
      await run({ kind: 'hidden', hidden: x(2, 4), batch: 2, seq: 1 }, [a, b]),
    ];
  } finally {
    for (const c of [...a, ...b]) freeCache(c);
  }
}

describe('a member stage in segments', () => {
  it('computes bit for bit what one session over the whole range does, after growing on both sides', async () => {
    const whole = new SegmentedStage([await open(1, 5)]);
    const running = new SegmentedStage([await open(2, 4)]);
    const grow = growth(running.plan, running.segments.length, { start: 1, end: 5 })!;
    expect(grow).toEqual({ before: { start: 1, end: 2 }, after: { start: 4, end: 5 } });
    const grown = running.grown(await open(grow.before!.start, grow.before!.end), await open(grow.after!.start, grow.after!.end));
    try {
      expect(grown.plan).toEqual({ start: 1, end: 5, head: false });
      expect(grown.segments.map((s) => [s.plan.start, s.plan.end])).toEqual([[1, 2], [2, 4], [4, 5]]);
      expect(grown.emptyCache(8)).toHaveLength(3);
      expect(await outputsOf(grown)).toEqual(await outputsOf(whole));
    } finally {
      await whole.dispose();
      await grown.dispose();
    }
  });

  it('grows only a range that contains the running one, within MAX_SEGMENTS', () => {
    const running = { start: 9, end: 21 };
    expect(growth(running, 1, { start: 9, end: 21 })).toEqual({});
    expect(growth(running, 1, { start: 9, end: 32 })).toEqual({ after: { start: 21, end: 32 } });
    expect(growth(running, 1, { start: 5, end: 21 })).toEqual({ before: { start: 5, end: 9 } });
    expect(growth(running, 1, { start: 10, end: 32 })).toBeUndefined(); // shrinks at the front
    expect(growth(running, 1, { start: 0, end: 9 })).toBeUndefined(); // moves
    expect(growth(running, MAX_SEGMENTS - 1, { start: 5, end: 32 })).toBeUndefined(); // one segment too many
    expect(growth(running, MAX_SEGMENTS - 1, { start: 9, end: 32 })).toEqual({ after: { start: 21, end: 32 } });
  });

  it('refuses segments that do not follow each other', async () => {
    const [a, b] = [await open(1, 2), await open(3, 4)];
    try {
      expect(() => new SegmentedStage([a, b])).toThrow(/follow/);
      expect(() => new SegmentedStage([])).toThrow(/segment/);
    } finally {
      await a.dispose();
      await b.dispose();
    }
  });
});
