import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { ModelShape } from './decoder-shape.js';
import { freeCache } from './kv-store.js';
import { Stage, type StageInput } from './stage.js';
import { cutsOf, MAX_SEGMENTS, reshape, SegmentedStage, splitAt, stageChange } from './stage-segments.js';
import { tinyModel, type TinyModel } from './test-support/tiny-model.js';

let tiny: TinyModel;
let file: GgufFile;
let shape: ModelShape;

beforeAll(async () => {
  tiny = await tinyModel({ seed: 11 });
  ({ file, shape } = tiny);
});
afterAll(async () => {
  await tiny.dispose();
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
    const grow = reshape(running.ranges, { start: 1, end: 5 })!;
    expect(grow).toEqual({ keep: { from: 0, to: 1 }, before: { start: 1, end: 2 }, after: { start: 4, end: 5 } });
    const grown = running.reshaped(grow.keep, await open(grow.before!.start, grow.before!.end), await open(grow.after!.start, grow.after!.end));
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

  it('reshapes a stage at its segments\' boundaries only, within MAX_SEGMENTS', () => {
    const one = [{ start: 9, end: 21 }];
    expect(reshape(one, { start: 9, end: 21 })).toEqual({ keep: { from: 0, to: 1 } });
    expect(reshape(one, { start: 9, end: 32 })).toEqual({ keep: { from: 0, to: 1 }, after: { start: 21, end: 32 } });
    expect(reshape(one, { start: 5, end: 21 })).toEqual({ keep: { from: 0, to: 1 }, before: { start: 5, end: 9 } });
    expect(reshape(one, { start: 10, end: 32 })).toBeUndefined(); // cuts through the segment
    expect(reshape(one, { start: 0, end: 9 })).toBeUndefined(); // keeps nothing
    const two = splitAt({ start: 9, end: 21 }, [15]);
    expect(two).toEqual([{ start: 9, end: 15 }, { start: 15, end: 21 }]);
    expect(reshape(two, { start: 15, end: 32 })).toEqual({ keep: { from: 1, to: 2 }, after: { start: 21, end: 32 } }); // gives up 9-15
    expect(reshape(two, { start: 0, end: 15 })).toEqual({ keep: { from: 0, to: 1 }, before: { start: 0, end: 9 } }); // gives up 15-21
    expect(reshape(two, { start: 12, end: 32 })).toBeUndefined();
    expect(reshape(two, { start: 5, end: 32 })).toBeUndefined(); // one segment too many
    expect(reshape(splitAt({ start: 9, end: 21 }, [12, 15]).slice(0, MAX_SEGMENTS), { start: 9, end: 32 })).toBeUndefined();
    expect(cutsOf(splitAt({ start: 0, end: 8 }, [2, 5]))).toEqual([2, 5]);
  });

  it('keeps, reshapes or opens anew a stage as the plan cut it', () => {
    const two = [{ start: 9, end: 15 }, { start: 15, end: 21 }];
    expect(stageChange(two, { start: 9, end: 21 }, [15])).toEqual({ kind: 'keep' });
    expect(stageChange(two, { start: 15, end: 32 }, [21])).toEqual({ kind: 'reshape', reshape: { keep: { from: 1, to: 2 }, after: { start: 21, end: 32 } } });
    // The plan did not reshape it (a drift re-plan, a memory budget): it opens anew, as planned.
    expect(stageChange(two, { start: 15, end: 32 }, [])).toEqual({ kind: 'open', ranges: [{ start: 15, end: 32 }] });
    expect(stageChange(two, { start: 12, end: 32 }, [20])).toEqual({ kind: 'open', ranges: [{ start: 12, end: 20 }, { start: 20, end: 32 }] });
    expect(stageChange(undefined, { start: 0, end: 8 }, [3])).toEqual({ kind: 'open', ranges: [{ start: 0, end: 3 }, { start: 3, end: 8 }] });
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
