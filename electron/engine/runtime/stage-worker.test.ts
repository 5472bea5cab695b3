// A Stage whose session runs on a worker thread (the default) against the in-thread one
// (KIWI_STAGE_WORKER=0): bit-identical logits and hidden states for prefill, decode and batched
// decode, whole and split; the event loop keeps running during a long forward; a cache whose
// buffers are away in another forward is refused; a disposed stage fails its runs.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { resolveShape } from '../model/synth/shapes.js';
import { synthesizeModel } from '../model/synth/synth.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import type { ModelShape } from './decoder-shape.js';
import { Stage } from './stage.js';
import type { StageOutput } from './stage.js';
import type { KvCache } from './kv-store.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-stage-worker-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function synth(name: string, shape: Record<string, unknown>): Promise<GgufFile> {
  const path = join(dir, `${name}.gguf`);
  await synthesizeModel({ shape: resolveShape(JSON.stringify({ name, architecture: 'llama', ...shape })), quant: GgmlType.Q8_0, out: path, seed: 7 });
  return openGguf(path);
}

const ids = (xs: number[]): BigInt64Array => BigInt64Array.from(xs.map(BigInt));

function data(out: StageOutput): Float32Array {
  return Float32Array.from(out.kind === 'logits' ? out.logits : out.hidden);
}

/**
 * Every output of a fixed script through the stages `splits` (in order): a 40-token prefill, 12
 * decode steps, then batched decode of that request with a second one prefilled with 9 tokens.
 */
async function script(file: GgufFile, shape: ModelShape, splits: Array<[number, number]>, worker: boolean): Promise<Float32Array[]> {
  const stages = await Promise.all(splits.map(([start, end]) => Stage.open(file, shape, { start, end, head: end === shape.blockCount }, { threads: 1, worker })));
  try {
    const outputs: Float32Array[] = [];
    const a = stages.map((s) => s.emptyCache(300));
    const b = stages.map((s) => s.emptyCache(300));
    const step = async (tokens: number[], rows: KvCache[][], seq: number): Promise<void> => {
      let out = await stages[0]!.forward({ kind: 'ids', ids: ids(tokens), batch: rows.length, seq }, rows.map((r) => r[0]!));
      outputs.push(data(out));
      for (let i = 1; i < stages.length; i++) {
        if (out.kind !== 'hidden') throw new Error('a middle stage returned logits');
        out = await stages[i]!.forward({ kind: 'hidden', hidden: out.hidden, batch: rows.length, seq }, rows.map((r) => r[i]!));
        outputs.push(data(out));
      }
    };
    await step(Array.from({ length: 40 }, (_, i) => (i * 31 + 1) % shape.vocab), [a], 40);
    for (let i = 0; i < 12; i++) await step([(i * 17 + 5) % shape.vocab], [a], 1);
    await step(Array.from({ length: 9 }, (_, i) => (i * 13 + 2) % shape.vocab), [b], 9);
    for (let i = 0; i < 6; i++) await step([(i * 7 + 3) % shape.vocab, (i * 11 + 4) % shape.vocab], [a, b], 1);
    return outputs;
  } finally {
    await Promise.all(stages.map((s) => s.dispose()));
  }
}

describe('stage on a worker thread', () => {
  test('gives bit-identical outputs to the in-thread stage on stories260K, whole and split 0-2,2-5', async () => {
    const file = await openGguf(await testModelPath('stories260K.gguf'));
    const shape = await modelShapeFromGguf(file);
    for (const splits of [[[0, shape.blockCount]], [[0, 2], [2, shape.blockCount]]] as Array<Array<[number, number]>>) {
      const inThread = await script(file, shape, splits, false);
      const worker = await script(file, shape, splits, true);
      expect(worker.length).toBe(inThread.length);
      worker.forEach((out, i) => expect(out).toEqual(inThread[i]));
    }
  });

  test('gives bit-identical outputs to the in-thread stage on a tiny synthetic model', async () => {
    const file = await synth('tiny', { blockCount: 2, embeddingLength: 128, headCount: 4, headCountKv: 2, feedForwardLength: 256, vocabSize: 320, contextLength: 512 });
    const shape = await modelShapeFromGguf(file);
    const inThread = await script(file, shape, [[0, 1], [1, 2]], false);
    const worker = await script(file, shape, [[0, 1], [1, 2]], true);
    worker.forEach((out, i) => expect(out).toEqual(inThread[i]));
  });

  test('keeps the event loop running during a long prefill (the in-thread stage blocks it)', async () => {
    const file = await synth('wide', { blockCount: 4, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 1024, vocabSize: 320, contextLength: 1024 });
    const shape = await modelShapeFromGguf(file);
    const prompt = ids(Array.from({ length: 512 }, (_, i) => (i * 37 + 1) % shape.vocab));
    const ticksDuringPrefill = async (worker: boolean): Promise<number> => {
      const stage = await Stage.open(file, shape, { start: 0, end: shape.blockCount, head: true }, { threads: 1, worker });
      try {
        let ticks = 0;
        const timer = setInterval(() => ticks++, 1);
        try {
          await stage.forward({ kind: 'ids', ids: prompt, batch: 1, seq: prompt.length }, [stage.emptyCache(prompt.length)]);
        } finally {
          clearInterval(timer);
        }
        return ticks;
      } finally {
        await stage.dispose();
      }
    };
    // In-thread the native run holds the loop: at most a tick before it starts and one after.
    expect(await ticksDuringPrefill(false)).toBeLessThanOrEqual(2);
    expect(await ticksDuringPrefill(true)).toBeGreaterThanOrEqual(10);
  });

  test('refuses a cache whose buffers are away in another forward pass, and hands them back after', async () => {
    const file = await openGguf(await testModelPath('stories260K.gguf'));
    const shape = await modelShapeFromGguf(file);
    const stage = await Stage.open(file, shape, { start: 0, end: shape.blockCount, head: true }, { threads: 1, worker: true });
    try {
      const cache = stage.emptyCache(64);
      const first = stage.forward({ kind: 'ids', ids: ids([1, 2, 3]), batch: 1, seq: 3 }, [cache]);
      await expect(stage.forward({ kind: 'ids', ids: ids([4]), batch: 1, seq: 1 }, [cache])).rejects.toThrow(/in use by another forward pass/);
      await first;
      expect(cache.length).toBe(3);
      const held = await cache.store.read(cache);
      expect(held.keys.every((k) => k.length === held.keys[0]!.length && k.length > 0)).toBe(true);
      await stage.forward({ kind: 'ids', ids: ids([4]), batch: 1, seq: 1 }, [cache]);
      expect(cache.length).toBe(4);
    } finally {
      await stage.dispose();
    }
  });

  test('a disposed stage fails its forward passes with RUNTIME_SESSION_CLOSED', async () => {
    const file = await openGguf(await testModelPath('stories260K.gguf'));
    const shape = await modelShapeFromGguf(file);
    const stage = await Stage.open(file, shape, { start: 0, end: shape.blockCount, head: true }, { threads: 1, worker: true });
    const cache = stage.emptyCache(64);
    await stage.dispose();
    await expect(stage.forward({ kind: 'ids', ids: ids([1]), batch: 1, seq: 1 }, [cache])).rejects.toMatchObject({ name: 'KiwiError', code: 'RUNTIME_SESSION_CLOSED' });
  });
});
