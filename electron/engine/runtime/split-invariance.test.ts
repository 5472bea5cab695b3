// Split invariance, bit for bit: any division of the layers into stages gives exactly the logits
// of the undivided model (prefill and decode, exact and int8-activation matmuls), so greedy
// generation is the same token for token whatever the plan.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { ModelShape } from './decoder-shape.js';
import { buildStageChain } from './stage-chain.js';
import type { LayerRange } from './layer-range.js';
import { tinyModel, type TinyModel } from './test-support/tiny-model.js';

let tiny: TinyModel;
let file: GgufFile;
let shape: ModelShape;

beforeAll(async () => {
  tiny = await tinyModel({ seed: 9, shape: { blockCount: 4 } });
  ({ file, shape } = tiny);
});
afterAll(async () => {
  await tiny.dispose();
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
