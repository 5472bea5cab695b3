import { mkdtemp, readFile, readdir, rm, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import type { ModelShape } from './decoder-shape.js';
import { ShardCache, modelFingerprint } from './shard-cache.js';
import { Stage } from './stage.js';
import { buildStageGraph, stageGraphBuilder } from './stage-graph.js';
import { loadStageWeights } from './stage-weights.js';

let dir: string;
let file: GgufFile;
let shape: ModelShape;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-shards-'));
  file = await openGguf(await testModelPath('stories260K.gguf'));
  shape = await modelShapeFromGguf(file, { maxPositions: 64 });
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function logitsOf(stage: Stage): Promise<Float32Array> {
  const cache = stage.emptyCache();
  const out = await stage.forward({ kind: 'ids', ids: BigInt64Array.of(1n, 403n, 407n), batch: 1, seq: 3 }, [cache]);
  if (out.kind !== 'logits') throw new Error('expected logits');
  return Float32Array.from(out.logits);
}

describe('ShardCache', () => {
  test('a second start of the same shard comes from the cache and computes the same logits', async () => {
    const cache = new ShardCache(join(dir, 'a'));
    const plan = { start: 0, end: 5, head: true };
    const cold = await Stage.open(file, shape, plan, { cache, threads: 1 });
    const warm = await Stage.open(file, shape, plan, { cache, threads: 1 });
    try {
      expect(cold.origin.source).toBe('built');
      expect(warm.origin.source).toBe('cache');
      expect(await logitsOf(warm)).toEqual(await logitsOf(cold));
    } finally {
      await cold.dispose();
      await warm.dispose();
    }
  });

  test('keys shards by layer range, head and options', async () => {
    const cache = new ShardCache(join(dir, 'b'));
    const a = await Stage.open(file, shape, { start: 0, end: 2, head: false }, { cache, threads: 1 });
    const b = await Stage.open(file, shape, { start: 2, end: 5, head: true }, { cache, threads: 1 });
    const c = await Stage.open(file, shape, { start: 2, end: 5, head: true }, { cache, threads: 1, accuracyLevel: 0 });
    expect([a, b, c].map((s) => s.origin.source)).toEqual(['built', 'built', 'built']);
    expect((await readdir(cache.dir)).length).toBe(3);
    for (const s of [a, b, c]) await s.dispose();
  });

  test('a changed source file (mtime) invalidates its entries', async () => {
    const copy = join(dir, 'copy.gguf');
    const { copyFile } = await import('node:fs/promises');
    await copyFile(file.path, copy);
    const copied = await openGguf(copy);
    const cache = new ShardCache(join(dir, 'c'));
    const plan = { start: 0, end: 5, head: true };
    await (await Stage.open(copied, shape, plan, { cache, threads: 1 })).dispose();
    await utimes(copy, new Date(), new Date(Date.now() + 5000));
    const again = await Stage.open(copied, shape, plan, { cache, threads: 1 });
    expect(again.origin.source).toBe('built');
    await again.dispose();
  });

  test('a streamed build (Stage.open) writes the bytes of the whole graph stored at once, and keeps no weights in the graph', async () => {
    const plan = { start: 1, end: 4, head: true };
    const streamed = new ShardCache(join(dir, 'd'));
    const stage = await Stage.open(file, shape, plan, { cache: streamed, threads: 1 });
    await stage.dispose();
    const whole = new ShardCache(join(dir, 'e'));
    const key = { model: await modelFingerprint(file), ...plan, accuracyLevel: 4, maxPositions: shape.maxPositions, provider: stage.provider };
    const graph = buildStageGraph(shape, await loadStageWeights(file, shape, plan), { accuracyLevel: 4 });
    const wholeModel = await whole.store(key, file.path, graph);
    const streamedModel = await streamed.lookup(key, file.path);
    expect(streamedModel).toBeDefined();
    expect(await readFile(join(streamedModel!, '..', 'weights.bin'))).toEqual(await readFile(join(wholeModel, '..', 'weights.bin')));
    expect(await readFile(streamedModel!)).toEqual(await readFile(wholeModel));
    // A spilling builder drops each large initializer's bytes once written.
    let spilled = 0;
    const b = stageGraphBuilder(shape, plan, { accuracyLevel: 4 }, { spill: (bytes) => ({ offset: (spilled += bytes.byteLength), length: bytes.byteLength }) });
    const w = await loadStageWeights(file, shape, plan);
    for (const lw of w.layers) b.addLayer(lw);
    const g = b.finish(w.head);
    expect(spilled).toBeGreaterThan(0);
    expect(g.initializers.filter((i) => i.bytes.byteLength >= 1024)).toEqual([]);
  });

  test('the model fingerprint is a sha256 of the header and stable across opens', async () => {
    const fp = await modelFingerprint(file);
    expect(fp).toMatch(/^[0-9a-f]{64}$/);
    expect(await modelFingerprint(await openGguf(file.path))).toBe(fp);
  });
});
