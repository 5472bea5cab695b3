// KV-cache recompute (issue 7): after a re-plan, a request rebuilds its caches on the new ring by
// the computation that first built them: its prompt as one prefill, then its generated tokens as
// decode steps (RingGenerator.resume). The logits that follow must equal, bit for bit, the logits
// it would have had without the failure, or a recovered stream could change mid-way. (One prefill
// of prompt + generated tokens is quicker, but its attention sums in another order: its logits
// differ by float rounding, ~4e-7 here, enough to flip a near-tied token of a random-weight model.)
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { resolveShape } from '../model/synth/shapes.js';
import { synthesizeModel } from '../model/synth/synth.js';
import { testModelPath } from '../model/test-models.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import type { LayerRange } from './layer-range.js';
import { buildStageChain } from './stage-chain.js';

let dir: string;
const models: Record<string, GgufFile> = {};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-recompute-'));
  const path = join(dir, 'tiny.gguf');
  const tiny = { name: 'tiny', architecture: 'llama', blockCount: 4, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 512, contextLength: 128 };
  await synthesizeModel({ shape: resolveShape(JSON.stringify(tiny)), quant: GgmlType.Q8_0, out: path, seed: 11 });
  models.synthetic = await openGguf(path);
  models.stories260K = await openGguf(await testModelPath('stories260K.gguf'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const argmax = (x: Float32Array): number => x.reduce((best, v, i) => (v > x[best]! ? i : best), 0);

/**
 * Greedy decoding of `steps` tokens after `prompt`, on a chain split by `split`, beside a second
 * request that shares every decode step (a batch of two). With `failAt`, the first request's caches
 * are thrown away after that many tokens and rebuilt by the prompt's prefill and one decode step
 * per generated token (still batched with the other request), as after a re-plan. Returns the
 * first request's logits of every step.
 */
async function greedy(file: GgufFile, split: LayerRange[], accuracyLevel: 0 | 4, prompt: number[], steps: number, failAt?: number): Promise<Float32Array[]> {
  const shape = await modelShapeFromGguf(file, { maxPositions: 128 });
  const chain = await buildStageChain(file, shape, split, { threads: 1, accuracyLevel });
  try {
    let caches = chain.newCaches(128);
    const other = chain.newCaches(128);
    await chain.step([{ tokens: [1, 7, 8, 9], caches: other }]);
    const history = [...prompt];
    const out = [Float32Array.from((await chain.step([{ tokens: prompt, caches }]))[0]!)];
    for (let i = 0; i < steps; i++) {
      history.push(argmax(out.at(-1)!));
      if (i === failAt) {
        caches = chain.newCaches(128);
        await chain.step([{ tokens: prompt, caches }]);
        for (const t of history.slice(prompt.length, -1)) await chain.step([{ tokens: [t], caches }, { tokens: [t % 7], caches: chain.newCaches(128) }]);
      }
      out.push(Float32Array.from((await chain.step([{ tokens: [history.at(-1)!], caches }, { tokens: [i % 5], caches: other }]))[0]!));
    }
    return out;
  } finally {
    await chain.dispose();
  }
}

describe('recompute after a re-plan', () => {
  test.each([
    ['stories260K', 0], ['stories260K', 4], ['synthetic', 0], ['synthetic', 4],
  ] as const)('prefilling the prompt and replaying the generated tokens reproduces the logits bit for bit (%s, accuracy level %i)', async (name, level) => {
    const file = models[name]!;
    const blocks = (await modelShapeFromGguf(file)).blockCount;
    const prompt = [1, 40, 41, 42, 43];
    const whole = await greedy(file, [{ start: 0, end: blocks }], level, prompt, 12);
    // The new ring is split differently from the old one, as after a member left.
    const recovered = await greedy(file, [{ start: 0, end: 1 }, { start: 1, end: blocks }], level, prompt, 12, 5);
    expect(recovered).toEqual(whole);
  });
});
