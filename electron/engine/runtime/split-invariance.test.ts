// Split invariance, bit for bit: any division of the layers into stages gives exactly the logits
// of the undivided model (prefill and decode, exact and int8-activation matmuls), so greedy
// generation is the same token for token whatever the plan.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { resolveShape } from '../model/synth/shapes.js';
import { synthesizeModel } from '../model/synth/synth.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import type { ModelShape } from './decoder-shape.js';
import { buildStageChain } from './stage-chain.js';
import type { LayerRange } from './layer-range.js';

let dir: string;
let file: GgufFile;
let shape: ModelShape;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-split-'));
  const path = join(dir, 'tiny.gguf');
  const tiny = { name: 'tiny', architecture: 'llama', blockCount: 4, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 512, contextLength: 128 };
  await synthesizeModel({ shape: resolveShape(JSON.stringify(tiny)), quant: GgmlType.Q4_0, out: path, seed: 9 });
  file = await openGguf(path);
  shape = await modelShapeFromGguf(file);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function logitsOf(split: LayerRange[], accuracyLevel: 0 | 4): Promise<Float32Array[]> {
  const chain = await buildStageChain(file, shape, split, { threads: 1, accuracyLevel });
  try {
    const caches = chain.newCaches(32);
    const out = [Float32Array.from((await chain.step([{ tokens: [1, 40, 41, 42, 43, 44], caches }]))[0]!)];
    for (const t of [50, 51, 52, 53]) out.push(Float32Array.from((await chain.step([{ tokens: [t], caches }]))[0]!));
    return out;
  } finally {
    await chain.dispose();
  }
}

describe('split invariance', () => {
  const splits: LayerRange[][] = [
    [{ start: 0, end: 1 }, { start: 1, end: 4 }],
    [{ start: 0, end: 2 }, { start: 2, end: 3 }, { start: 3, end: 4 }],
    [0, 1, 2, 3].map((s) => ({ start: s, end: s + 1 })),
  ];
  test.each([0, 4] as const)('every split gives bit-identical logits to the whole model (accuracy level %i)', async (level) => {
    const whole = await logitsOf([{ start: 0, end: 4 }], level);
    for (const split of splits) expect(await logitsOf(split, level)).toEqual(whole);
  });
});
