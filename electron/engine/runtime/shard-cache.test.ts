import { mkdtemp, readFile, readdir, rm, stat, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import type { ModelShape } from './decoder-shape.js';
import { ShardCache, diskBytesOf, modelFingerprint } from './shard-cache.js';
import { Stage } from './stage.js';
import { buildStageGraph, stageGraphBuilder } from './stage-graph.js';
import { loadStageWeights } from './stage-weights.js';
import { SYNTH_QUANTS, synthesizeModel } from '../model/synth/synth.js';
import { resolveShape } from '../model/synth/shapes.js';
import { stageOutput } from '../test-support/stage-output.js';

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
    const [modelDir, ...others] = await readdir(cache.dir);
    expect(others).toEqual([]);
    expect((await readdir(join(cache.dir, modelDir!))).filter((n) => /^range-.*\.json$/.test(n)).length).toBe(3);
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
    const graph = buildStageGraph(shape, await loadStageWeights(file, shape, plan), { accuracyLevel: 4 }); // as Stage.open builds it
    const wholeModel = await whole.store(key, file.path, graph);
    const streamedModel = await streamed.lookup(key, file.path);
    expect(streamedModel).toBeDefined();
    const files = await readdir(join(wholeModel, '..'));
    expect((await readdir(join(streamedModel!, '..'))).sort()).toEqual([...files].sort());
    for (const f of files) expect(await readFile(join(streamedModel!, '..', f)), f).toEqual(await readFile(join(wholeModel, '..', f)));
    // A spilling builder drops each large initializer's bytes once written.
    let spilled = 0;
    const b = stageGraphBuilder(shape, plan, { accuracyLevel: 4 }, { spill: (bytes) => ({ offset: (spilled += bytes.byteLength), length: bytes.byteLength }) });
    const w = await loadStageWeights(file, shape, plan);
    for (const lw of w.layers) b.addLayer(lw);
    const g = b.finish(w.head);
    expect(spilled).toBeGreaterThan(0);
    expect(g.initializers.filter((i) => i.bytes.byteLength >= 1024)).toEqual([]);
  });

  test('a range overlapping one built before reuses the shared layers\' files as they are, and stores each layer once', async () => {
    const cache = new ShardCache(join(dir, 'overlap'));
    const first = await Stage.open(file, shape, { start: 0, end: 4, head: false }, { cache, threads: 1 });
    await first.dispose();
    const modelDir = join(cache.dir, (await readdir(cache.dir))[0]!);
    const layerFile = (L: number) => join(modelDir, `layer-${L}-fp32.bin`);
    const before = await Promise.all([1, 2, 3].map(async (L) => await stat(layerFile(L))));
    const second = await Stage.open(file, shape, { start: 1, end: 5, head: false }, { cache, threads: 1 });
    const fresh = await Stage.open(file, shape, { start: 1, end: 5, head: false }, { cache: new ShardCache(join(dir, 'overlap-fresh')), threads: 1 });
    try {
      expect(second.origin.source).toBe('built');
      const after = await Promise.all([1, 2, 3].map(async (L) => await stat(layerFile(L))));
      // The same files, untouched: not rebuilt, not rewritten.
      expect(after.map((s) => [s.ino, s.mtimeMs])).toEqual(before.map((s) => [s.ino, s.mtimeMs]));
      // The graph over reused layer files computes exactly what a graph built from scratch does.
      const hidden = Float32Array.from({ length: 3 * shape.hidden }, (_, i) => Math.sin(i));
      const run = async (s: Stage) => {
        const out = await s.forward({ kind: 'hidden', hidden, batch: 1, seq: 3 }, [s.emptyCache()]);
        if (out.kind !== 'hidden') throw new Error('expected hidden states');
        return Float32Array.from(out.hidden);
      };
      expect(await run(second)).toEqual(await run(fresh));
      // On disk: layers 0-4 once each (their built bytes) plus the two ranges' graphs.
      const layerBytes = (await Promise.all([0, 1, 2, 3, 4].map(async (L) => (await stat(layerFile(L))).size))).reduce((a, b) => a + b, 0);
      const onDisk = await diskBytesOf(cache.dir);
      expect(onDisk).toBeLessThanOrEqual(1.1 * layerBytes);
      expect(onDisk).toBeGreaterThanOrEqual(layerBytes);
    } finally {
      await second.dispose();
      await fresh.dispose();
    }
  });

  // Hollow layers must take the form the conversion gives each weight type (bits, block size, block offsets).
  test.each(['q8_0', 'q4_0', 'q4_k_m', 'f16'])('a reused %s layer computes exactly what a layer built from scratch does', async (quant) => {
    const path = join(dir, `tiny-${quant}.gguf`);
    const tiny = { name: 'tiny', architecture: 'llama', blockCount: 3, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 320, contextLength: 64 };
    await synthesizeModel({ shape: resolveShape(JSON.stringify(tiny)), quant: SYNTH_QUANTS[quant]!, out: path, seed: 3 });
    const f = await openGguf(path);
    const sh = await modelShapeFromGguf(f, { maxPositions: 64 });
    const cache = new ShardCache(join(dir, `formats-${quant}`));
    await (await Stage.open(f, sh, { start: 1, end: 3, head: false }, { cache, threads: 1 })).dispose();
    const reused = await Stage.open(f, sh, { start: 1, end: 3, head: true }, { cache, threads: 1, cacheSource: { rawLayer: () => false } });
    const fresh = await Stage.open(f, sh, { start: 1, end: 3, head: true }, { threads: 1 });
    try {
      const hidden = Float32Array.from({ length: 2 * sh.hidden }, (_, i) => Math.cos(i));
      expect(await stageOutput(reused, hidden, 2)).toEqual(await stageOutput(fresh, hidden, 2));
    } finally {
      await reused.dispose();
      await fresh.dispose();
    }
  });

  test('a layer whose source bytes changed (its tag) is rebuilt; one that is neither built nor readable is refused', async () => {
    const cache = new ShardCache(join(dir, 'tags'));
    const source = (tag: string, raw = true) => ({ tag: 'model', layerTag: (L: number) => `${tag}:${L}`, rawLayer: () => raw });
    await (await Stage.open(file, shape, { start: 0, end: 2, head: false }, { cache, threads: 1, cacheSource: source('a') })).dispose();
    const again = await Stage.open(file, shape, { start: 0, end: 2, head: false }, { cache, threads: 1, cacheSource: source('a', false) });
    expect(again.origin.source).toBe('cache');
    await again.dispose();
    expect(await cache.builtLayerTags(await modelFingerprint(file))).toEqual(new Set(['a:0', 'a:1']));
    await expect(Stage.open(file, shape, { start: 0, end: 2, head: false }, { cache, threads: 1, cacheSource: source('b', false) })).rejects.toThrow(/neither built/);
    const rebuilt = await Stage.open(file, shape, { start: 0, end: 2, head: false }, { cache, threads: 1, cacheSource: source('b') });
    expect(rebuilt.origin.source).toBe('built');
    await rebuilt.dispose();
    expect(await cache.builtLayerTags(await modelFingerprint(file))).toEqual(new Set(['b:0', 'b:1']));
    expect(await cache.builtLayers(await modelFingerprint(file))).toEqual(new Map([[0, 'b:0'], [1, 'b:1']]));
  });

  test('the model fingerprint is a sha256 of the header and stable across opens', async () => {
    const fp = await modelFingerprint(file);
    expect(fp).toMatch(/^[0-9a-f]{64}$/);
    expect(await modelFingerprint(await openGguf(file.path))).toBe(fp);
  });
});
