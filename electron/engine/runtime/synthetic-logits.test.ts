// Next-token distributions of small random-weight models (written by `kiwi synth`) against
// llama.cpp, per architecture and weight type, through a two-stage split (prefill + decode).
//
// Tolerances, in log-probability units (the models' logits have a std of ~0.32):
// - Kiwi keeps activations in f32 (MatMulNBits accuracy_level 0; Q8_0/Q4_0/Q6_K repacked exactly,
//   Q4_K to within f32 rounding). llama.cpp's CPU matmuls do not: they round the activations to
//   f16 for F16 weights (relative 2^-11), to bf16 for BF16 weights (2^-8), and quantize them to
//   Q8_0/Q8_K for quantized weights (up to 1/254 per value). Measured max |d log p|: F16
//   0.0008-0.0010, BF16 0.0044, quantized 0.015-0.023; with int8 activations on Kiwi's side too
//   (accuracy_level 4) 0.017-0.022.
// - Bounds: 0.005 (F16), 0.015 (BF16), 0.035 (quantized): 1.5-5x the measured noise, and below the
//   0.058-0.078 that a real bug moves them by (measured: llama's rope layout swapped for NEOX).
// - Plus: the most likely token agrees at every step where llama.cpp's top two log-probabilities
//   differ by more than the bound (random-weight logits are flat, so closer calls may flip).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { resolveShape } from '../model/synth/shapes.js';
import { synthesizeModel } from '../model/synth/synth.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import { buildStageChain } from './stage-chain.js';
import { openLlamaReference } from './test-support/llama-reference.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-synth-logits-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const base = {
  blockCount: 2,
  embeddingLength: 256,
  headCount: 4,
  headCountKv: 2,
  feedForwardLength: 512,
  vocabSize: 512,
  contextLength: 256,
};
const llama = { ...base, name: 'tiny llama', architecture: 'llama', ropeFreqBase: 500000, ropeScaling: { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 64 }, tiedEmbeddings: true };
const qwen2 = { ...base, name: 'tiny qwen2', architecture: 'qwen2', qkvBias: true };
const qwen3 = { ...base, name: 'tiny qwen3', architecture: 'qwen3', qkNorm: true, headDim: 64 };

const F16_BOUND = 0.005;
const BF16_BOUND = 0.015;
const QUANT_BOUND = 0.035;
const cases: Array<[string, object, GgmlType, number, (0 | 4)?]> = [
  ['llama (Llama 3 rope scaling, tied embeddings) Q8_0', llama, GgmlType.Q8_0, QUANT_BOUND],
  ['llama (Llama 3 rope scaling, tied embeddings) Q4_0', llama, GgmlType.Q4_0, QUANT_BOUND],
  ['llama (Llama 3 rope scaling, tied embeddings) F16', llama, GgmlType.F16, F16_BOUND],
  ['llama (Llama 3 rope scaling, tied embeddings) BF16', llama, GgmlType.BF16, BF16_BOUND],
  ['llama (Llama 3 rope scaling, tied embeddings) Q4_K', llama, GgmlType.Q4_K, QUANT_BOUND],
  ['llama (Llama 3 rope scaling, tied embeddings) Q6_K', llama, GgmlType.Q6_K, QUANT_BOUND],
  ['qwen2 (qkv bias, NEOX rope) F16', qwen2, GgmlType.F16, F16_BOUND],
  ['qwen3 (q/k norm) Q8_0', qwen3, GgmlType.Q8_0, QUANT_BOUND],
  ['llama Q4_0 with int8 activations (accuracy level 4)', llama, GgmlType.Q4_0, QUANT_BOUND, 4],
  ['llama Q8_0 with int8 activations (accuracy level 4)', llama, GgmlType.Q8_0, QUANT_BOUND, 4],
];

describe('synthetic model logits against llama.cpp', () => {
  test.each(cases)('%s agrees with llama.cpp within the bound, with the same top token', async (name, shapeJson, quant, bound, accuracyLevel = 0) => {
    const path = join(dir, `${name.replace(/\W+/g, '_')}.gguf`);
    await synthesizeModel({ shape: resolveShape(JSON.stringify(shapeJson)), quant, out: path, seed: 5 });
    const file = await openGguf(path);
    const shape = await modelShapeFromGguf(file);
    const chain = await buildStageChain(file, shape, [{ start: 0, end: 1 }, { start: 1, end: 2 }], { threads: 1, accuracyLevel });
    const ref = await openLlamaReference(path);
    try {
      const prompt = [1, ...Array.from({ length: 23 }, (_, i) => 3 + ((i * 97) % 500))];
      const caches = chain.newCaches();
      let worst = 0;
      let agree = 0;
      let decisive = 0;
      let steps = 0;

      // Prefill 8 tokens, then decode one at a time; compare after each.
      let logits = (await chain.step([{ tokens: prompt.slice(0, 8), caches }]))[0]!;
      for (let n = 8; n <= prompt.length; n++) {
        const p = await ref.nextTokenProbabilities(prompt.slice(0, n), shape.vocab);
        const max = Math.max(...logits);
        const lse = max + Math.log(logits.reduce((a, l) => a + Math.exp(l - max), 0));
        let refTop = 0;
        let ourTop = 0;
        for (let i = 0; i < shape.vocab; i++) {
          if (p[i]! > p[refTop]!) refTop = i;
          if (logits[i]! > logits[ourTop]!) ourTop = i;
          if (p[i]! > 1e-4) worst = Math.max(worst, Math.abs(logits[i]! - lse - Math.log(p[i]!)));
        }
        const runnerUp = Math.max(...Array.from(p).filter((_, i) => i !== refTop));
        if (Math.log(p[refTop]!) - Math.log(runnerUp) > bound) {
          decisive++;
          if (refTop === ourTop) agree++;
        }
        steps++;
        if (n < prompt.length) logits = (await chain.step([{ tokens: [prompt[n]!], caches }]))[0]!;
      }
      expect(steps).toBe(prompt.length - 7);
      expect(agree).toBe(decisive);
      expect(decisive).toBeGreaterThan(steps / 2);
      expect(worst).toBeLessThan(bound);
    } finally {
      await ref.dispose();
      await chain.dispose();
    }
  });
});
