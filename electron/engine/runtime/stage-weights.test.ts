import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { SYNTH_QUANTS, synthesizeModel } from '../model/synth/synth.js';
import { resolveShape } from '../model/synth/shapes.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import { ShardCache, modelFingerprint } from './shard-cache.js';
import { buildStageGraph, stageGraphBuilder } from './stage-graph.js';
import { loadStageWeights, openStageWeights } from './stage-weights.js';
import { RepackPool } from './weights/repack-pool.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-stage-weights-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Every file of a cache's model directory, by name (ranges' temp names differ, their bytes do not). */
async function files(cacheDir: string): Promise<Map<string, Buffer>> {
  const [model] = await readdir(cacheDir);
  const out = new Map<string, Buffer>();
  for (const n of await readdir(join(cacheDir, model!))) out.set(n, await readFile(join(cacheDir, model!, n)));
  return out;
}

describe('stage weights', () => {
  // q4_k_m mixes Q4_K and Q6_K; q8_0 and f16 take the other conversions.
  test.each(['q4_k_m', 'q8_0', 'f16'])('%s: a streamed build with prefetch and the worker pool writes the same files as an in-memory build on this thread', async (quant) => {
    const path = join(dir, `tiny-${quant}.gguf`);
    const tiny = { name: 'tiny', architecture: 'llama', blockCount: 4, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 320, contextLength: 64 };
    await synthesizeModel({ shape: resolveShape(JSON.stringify(tiny)), quant: SYNTH_QUANTS[quant]!, out: path, seed: 5 });
    const file = await openGguf(path);
    const shape = await modelShapeFromGguf(file, { maxPositions: 64 });
    const plan = { start: 1, end: 4, head: true };
    const key = { model: await modelFingerprint(file), ...plan, accuracyLevel: 4, maxPositions: 64, provider: 'cpu' };

    const serialDir = join(dir, `serial-${quant}`);
    await new ShardCache(serialDir).store(key, path, buildStageGraph(shape, await loadStageWeights(file, shape, plan), { accuracyLevel: 4 }));

    const pooledDir = join(dir, `pooled-${quant}`);
    const pool = new RepackPool(2);
    try {
      await new ShardCache(pooledDir).build(key, path, async ({ place, flush }) => {
        const source = await openStageWeights(file, shape, { pool });
        try {
          const b = stageGraphBuilder(shape, plan, { accuracyLevel: 4 }, { place });
          source.prefetch(plan.start);
          for (let L = plan.start; L < plan.end; L++) {
            source.prefetch(L + 1 < plan.end ? L + 1 : 'head');
            b.addLayer(await source.layer(L));
            await flush();
          }
          return b.finish(await source.head());
        } finally {
          await source.close();
        }
      });
    } finally {
      await pool.close();
    }
    expect(pool.failed).toBe(false);
    const serial = await files(serialDir);
    const pooled = await files(pooledDir);
    expect([...pooled.keys()].sort()).toEqual([...serial.keys()].sort());
    expect([...serial.keys()].filter((n) => n.startsWith('layer-') && n.endsWith('.bin'))).toHaveLength(3);
    for (const [name, bytes] of serial) expect(pooled.get(name)!.equals(bytes), name).toBe(true);
  });
});
