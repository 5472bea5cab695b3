// KV buffers that grow on use (stage.ts) give bit-identical logits to buffers allocated at the
// full reservation: the filled positions move intact when a buffer grows, for one request and
// for a batch, across several growth steps.
import { afterAll, beforeAll, expect, test } from 'vitest';
import { GgmlType } from '../model/gguf/gguf-types.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { ModelShape } from './decoder-shape.js';
import { Stage } from './stage.js';
import type { KvCache } from './kv-store.js';
import { tinyModel, type TinyModel } from './test-support/tiny-model.js';

const CAPACITY = 700;
let tiny: TinyModel;
let file: GgufFile;
let shape: ModelShape;
let stage: Stage;

beforeAll(async () => {
  tiny = await tinyModel({ seed: 5, quant: GgmlType.Q8_0, shape: { blockCount: 2, embeddingLength: 128, feedForwardLength: 256, vocabSize: 320, contextLength: 1024 } });
  ({ file, shape } = tiny);
  stage = await Stage.open(file, shape, { start: 0, end: shape.blockCount, head: true }, { threads: 1 });
});
afterAll(async () => {
  await stage?.dispose();
  await tiny.dispose();
});

/** A cache whose buffers already hold the whole reservation (the layout before growth existed). */
function fullCache(): KvCache {
  return stage.emptyCache(CAPACITY, CAPACITY);
}

async function logits(ids: number[], caches: KvCache[]): Promise<Float32Array> {
  const seq = ids.length / caches.length;
  const out = await stage.forward({ kind: 'ids', ids: BigInt64Array.from(ids.map(BigInt)), batch: caches.length, seq }, caches);
  if (out.kind !== 'logits') throw new Error('the head stage returned hidden states');
  return Float32Array.from(out.logits);
}

test('a growing cache gives the same logits bit for bit as a fully allocated one, past several growth steps', async () => {
  const grown = stage.emptyCache(CAPACITY);
  const full = fullCache();
  expect(grown.allocated).toBeLessThan(CAPACITY);
  const prompt = Array.from({ length: 200 }, (_, i) => (i * 37 + 1) % 256);
  expect(await logits(prompt, [grown])).toEqual(await logits(prompt, [full]));
  const sizes = new Set<number>();
  for (let i = 0; i < 450; i++) {
    const t = (i * 53 + 7) % 256;
    expect(await logits([t], [grown])).toEqual(await logits([t], [full]));
    sizes.add(grown.allocated);
  }
  expect(grown.length).toBe(650);
  expect([...sizes].sort((a, b) => a - b)).toEqual([256, 512, CAPACITY]);
});

test('batched decode over growing caches of different lengths matches fully allocated caches bit for bit', async () => {
  const grown = [stage.emptyCache(CAPACITY), stage.emptyCache(CAPACITY)];
  const full = [fullCache(), fullCache()];
  for (const [n, b] of [[250, 0], [10, 1]] as const) {
    const prompt = Array.from({ length: n }, (_, i) => (i * 29 + b) % 256);
    expect(await logits(prompt, [grown[b]!])).toEqual(await logits(prompt, [full[b]!]));
  }
  for (let i = 0; i < 20; i++) {
    const ids = [(i * 11) % 256, (i * 13 + 3) % 256];
    expect(await logits(ids, grown)).toEqual(await logits(ids, full));
  }
  expect(grown[0]!.allocated).toBe(512);
  expect(grown[1]!.allocated).toBe(256);
});

test('a cache never grows past its reservation', async () => {
  const small = stage.emptyCache(40);
  expect(small.allocated).toBe(40);
  await logits(Array.from({ length: 40 }, (_, i) => i), [small]);
  await expect(logits([1], [small])).rejects.toMatchObject({ code: 'CONTEXT_EXCEEDED' });
});
