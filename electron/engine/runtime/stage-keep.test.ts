import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { ModelShape } from './decoder-shape.js';
import { Stage, type StageOutput } from './stage.js';
import { KeptStage, outputsFor, StageOutputs } from './stage-keep.js';
import { SegmentedStage, type SegmentCaches } from './stage-segments.js';
import { tinyModel, type TinyModel } from './test-support/tiny-model.js';

/** The tiny model's hidden size (its embeddingLength). */
const HIDDEN = 256;
let tiny: TinyModel;
let file: GgufFile;
let shape: ModelShape;

beforeAll(async () => {
  tiny = await tinyModel({ seed: 12, shape: { embeddingLength: HIDDEN } });
  ({ file, shape } = tiny);
});
afterAll(async () => {
  await tiny.dispose();
});

const open = (start: number, end: number): Promise<Stage> => Stage.open(file, shape, { start, end, head: false }, { threads: 1, replayInputs: true });
const rows = (n: number, seed: number): Float32Array => Float32Array.from({ length: n * HIDDEN }, (_, i) => Math.sin(seed + i * 0.37));
const hiddenOf = (out: StageOutput): Float32Array => {
  if (out.kind !== 'hidden') throw new Error('a member stage returned logits');
  return Float32Array.from(out.hidden);
};

/** A request's life on `stage` from layer `stage.plan.start`: a prompt of 6 positions, a replayed row of 3, a decode step. */
const PROMPT = rows(6, 1);
const REPLAY = rows(3, 2);
const DECODE = rows(1, 3);
const KEEP = 9;

/** Runs the prompt and the replayed row on `stage` (recording what it sends on in `outputs`), returning their outputs. */
async function firstRows(stage: SegmentedStage, caches: SegmentCaches, input: (x: Float32Array) => Promise<Float32Array> = (x) => Promise.resolve(x), outputs?: StageOutputs): Promise<Float32Array[]> {
  const out: Float32Array[] = [];
  let pos = 0;
  for (const [x, replay] of [[PROMPT, false], [REPLAY, true]] as const) {
    const seq = x.length / shape.hidden;
    const h = hiddenOf(await stage.forward({ kind: 'hidden', hidden: await input(x), batch: 1, seq }, [caches], { replay }));
    outputs?.put(7, pos, seq, h);
    out.push(h);
    pos += seq;
  }
  return out;
}

describe('what a stage keeps of its requests across a re-plan', () => {
  it('rebuilds a request on a stage grown on both sides by running only the added segments, bit for bit what one session computes', async () => {
    // The reference: layers 1-4 as one session. The old ring: layers 1-2 upstream, then this stage's 2-3.
    const whole = new SegmentedStage([await open(1, 4)]);
    const upstream = new SegmentedStage([await open(1, 2)]);
    const running = new SegmentedStage([await open(2, 3)]);
    const grown = running.reshaped({ from: 0, to: 1 }, await open(1, 2), await open(3, 4));
    try {
      const reference = whole.emptyCache(32);
      const expected = [...(await firstRows(whole, reference)), hiddenOf(await whole.forward({ kind: 'hidden', hidden: DECODE, batch: 1, seq: 1 }, [reference]))];

      const upCaches = upstream.emptyCache(32);
      const toLayer2 = (x: Float32Array): Promise<Float32Array> => upstream.forward({ kind: 'hidden', hidden: x, batch: 1, seq: x.length / shape.hidden }, [upCaches], { replay: x === REPLAY }).then(hiddenOf);
      const sent = new StageOutputs(3, shape.hidden);
      const keptCaches = running.emptyCache(32);
      await firstRows(running, keptCaches, toLayer2, sent);

      const kept = new KeptStage(running, new Map([[7, keptCaches]]), sent);
      const outputs = outputsFor(grown, kept);
      expect(outputs.at).toBe(4);
      const caches = kept.adopt(7, grown, 32, KEEP, outputs)!;
      expect(caches.map((c) => c.length)).toEqual([0, KEEP, 0]);
      const keptSegment = vi.spyOn(running.segments[0]!, 'forward');
      const rowsAt3 = { at: kept.outputs.at, rows: (from: number, to: number) => kept.rows(7, from, to) };
      const rebuilt = [
        hiddenOf(await grown.resumeForward({ kind: 'hidden', hidden: PROMPT, batch: 1, seq: 6 }, caches, 0, rowsAt3)),
        hiddenOf(await grown.resumeForward({ kind: 'hidden', hidden: REPLAY, batch: 1, seq: 3 }, caches, 6, rowsAt3, { replay: true })),
      ];
      expect(keptSegment).not.toHaveBeenCalled();
      keptSegment.mockRestore();
      expect(caches.map((c) => c.length)).toEqual([KEEP, KEEP, KEEP]);
      const next = hiddenOf(await grown.forward({ kind: 'hidden', hidden: DECODE, batch: 1, seq: 1 }, [caches]));
      expect([...rebuilt, next]).toEqual(expected);
    } finally {
      await Promise.all([whole.dispose(), upstream.dispose(), grown.dispose()]);
    }
  });

  it('rebuilds a request on a stage that gave up its first segment and grew after the other by running only the added one, bit for bit', async () => {
    // The reference: layers 1-4 as one session. The old ring: this stage ran 1-3 cut at 2; the next
    // runs 2-4 (an upstream stage took layer 1), keeping the segment 2-3 and its cache.
    const whole = new SegmentedStage([await open(1, 4)]);
    const upstream = new SegmentedStage([await open(1, 2)]);
    const running = new SegmentedStage([await open(1, 2), await open(2, 3)]);
    const keptCaches = running.emptyCache(32);
    const sent = new StageOutputs(3, shape.hidden);
    await firstRows(running, keptCaches, undefined, sent);
    // As a member does: the segment outside the new range goes before the added one opens.
    await running.segments[0]!.dispose();
    const shifted = running.reshaped({ from: 1, to: 2 }, undefined, await open(3, 4));
    try {
      const reference = whole.emptyCache(32);
      const expected = [...(await firstRows(whole, reference)), hiddenOf(await whole.forward({ kind: 'hidden', hidden: DECODE, batch: 1, seq: 1 }, [reference]))];
      const kept = new KeptStage(running, new Map([[7, keptCaches]]), sent);
      const outputs = outputsFor(shifted, kept);
      const caches = kept.adopt(7, shifted, 32, KEEP, outputs)!;
      expect(caches.map((c) => c.length)).toEqual([KEEP, 0]);
      const keptSegment = vi.spyOn(running.segments[1]!, 'forward');
      // The upstream stage rebuilds layer 1 and sends its rows; this stage skips 2-3 and feeds 3-4 from the rows it kept at 3.
      const upCaches = upstream.emptyCache(32);
      const rowsAt3 = { at: kept.outputs.at, rows: (from: number, to: number) => kept.rows(7, from, to) };
      const rebuilt: Float32Array[] = [];
      for (const [x, pos, replay] of [[PROMPT, 0, false], [REPLAY, 6, true]] as const) {
        const seq = x.length / shape.hidden;
        const at2 = hiddenOf(await upstream.forward({ kind: 'hidden', hidden: x, batch: 1, seq }, [upCaches], { replay }));
        rebuilt.push(hiddenOf(await shifted.resumeForward({ kind: 'hidden', hidden: at2, batch: 1, seq }, caches, pos, rowsAt3, { replay })));
      }
      expect(keptSegment).not.toHaveBeenCalled();
      keptSegment.mockRestore();
      const next = hiddenOf(await shifted.forward({ kind: 'hidden', hidden: hiddenOf(await upstream.forward({ kind: 'hidden', hidden: DECODE, batch: 1, seq: 1 }, [upCaches])), batch: 1, seq: 1 }, [caches]));
      expect([...rebuilt, next]).toEqual(expected);
    } finally {
      await Promise.all([whole.dispose(), upstream.dispose(), shifted.dispose()]);
    }
  });

  it('rebuilds every segment from the input where the rows a segment needs were never recorded, and cuts kept caches to what survived', async () => {
    const running = new SegmentedStage([await open(1, 2)]);
    const grown = running.reshaped({ from: 0, to: 1 }, undefined, await open(2, 3));
    try {
      const cachesA = running.emptyCache(32);
      const sent = new StageOutputs(2, shape.hidden);
      await firstRows(running, cachesA, undefined, sent);
      // Request 8 kept 5 positions of its cache, but its rows start at position 2 (seeded from the
      // prompt cache): a gap, never recorded, so nothing can feed the added segment.
      sent.put(8, 2, 1, rows(1, 9));
      expect(sent.length(8)).toBe(0);
      const seeded = running.emptyCache(32).map((c) => Object.assign(c, { length: 5 }));
      const kept = new KeptStage(running, new Map([[7, cachesA], [8, seeded]]), sent);
      const outputs = outputsFor(grown, kept);
      // Request 7 survived with 5 positions only: its kept segment is cut back, the added one fed from rows 0-5.
      expect(kept.adopt(7, grown, 32, 5, outputs)!.map((c) => c.length)).toEqual([5, 0]);
      expect(kept.adopt(8, grown, 32, 5, outputs)!.map((c) => c.length)).toEqual([0, 0]);
      expect(kept.adopt(9, grown, 32, 5, outputs)).toBeUndefined();
      // A capacity other than the kept cache's is a new request's: its segment starts empty, and so does the stage.
      const other = new KeptStage(running, new Map([[7, running.emptyCache(16)]]), sent);
      expect(other.adopt(7, grown, 32, 5, outputs)!.map((c) => c.length)).toEqual([0, 0]);
      kept.free();
    } finally {
      await grown.dispose();
    }
  });

  it('records rows in order, keeps rows a rebuild holds already, grows past a block and cuts back', () => {
    const h = 4;
    const out = new StageOutputs(3, h);
    const r = (n: number, v: number): Float32Array => new Float32Array(n * h).fill(v);
    out.put(1, 0, 300, r(300, 1));
    out.put(1, 300, 2, r(2, 2));
    expect(out.length(1)).toBe(302);
    expect(out.bytes).toBe(512 * h * 4);
    expect(out.get(1, 299, 302)).toEqual(Float32Array.from([1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]));
    expect(out.get(1, 300, 303)).toBeUndefined();
    // Rows it holds already stay as they are (a kept stage sending its rows on).
    out.put(1, 0, 1, r(1, 9));
    expect(out.get(1, 0, 1)).toEqual(r(1, 1));
    out.truncate(1, 10);
    out.put(1, 10, 1, r(1, 5));
    expect(out.length(1)).toBe(11);
    expect(out.get(1, 10, 11)).toEqual(r(1, 5));
    // A batch's second row: from its offset.
    const batch = Float32Array.from([...r(1, 6), ...r(1, 7)]);
    out.put(2, 0, 1, batch, h);
    expect(out.get(2, 0, 1)).toEqual(r(1, 7));
    out.drop(1);
    expect(out.length(1)).toBe(0);
  });
});
