// A `kiwi synth --quant q4_k_m` model (llama.cpp's Q4_K_M mix of Q4_K and Q6_K in one file) on
// Kiwi's runtime against llama.cpp: one prefill through a two-stage split, the next-token
// log-probabilities within synthetic-logits.test.ts's bound for quantized weights.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { resolveShape } from '../model/synth/shapes.js';
import { synthesizeModel } from '../model/synth/synth.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import { buildStageChain } from './stage-chain.js';
import { openLlamaReference } from './test-support/llama-reference.js';

const QUANT_BOUND = 0.035;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-synth-q4km-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

test('a Q4_K_M mix agrees with llama.cpp within the quantized bound', async () => {
  const path = join(dir, 'q4km.gguf');
  const shapeJson = {
    name: 'tiny llama q4_k_m',
    architecture: 'llama',
    blockCount: 2,
    embeddingLength: 256,
    headCount: 4,
    headCountKv: 2,
    feedForwardLength: 512,
    vocabSize: 512,
    contextLength: 256,
    tiedEmbeddings: true,
  };
  await synthesizeModel({ shape: resolveShape(JSON.stringify(shapeJson)), quant: 'q4_k_m', out: path, seed: 5 });
  const file = await openGguf(path);
  // Both types are on the path: block 0 is Q4_K throughout, block 1's attn_v/ffn_down and the tied embedding Q6_K.
  expect(file.tensor('blk.0.ffn_down.weight')?.type).toBe(GgmlType.Q4_K);
  expect(file.tensor('blk.1.ffn_down.weight')?.type).toBe(GgmlType.Q6_K);
  const shape = await modelShapeFromGguf(file);
  const chain = await buildStageChain(file, shape, [{ start: 0, end: 1 }, { start: 1, end: 2 }], { threads: 1, accuracyLevel: 0 });
  const ref = await openLlamaReference(path);
  try {
    const prompt = [1, ...Array.from({ length: 15 }, (_, i) => 3 + ((i * 97) % 500))];
    const logits = (await chain.step([{ tokens: prompt, caches: chain.newCaches() }]))[0]!;
    const p = await ref.nextTokenProbabilities(prompt, shape.vocab);
    const max = Math.max(...logits);
    const lse = max + Math.log(logits.reduce((a, l) => a + Math.exp(l - max), 0));
    let worst = 0;
    let counted = 0;
    for (let i = 0; i < shape.vocab; i++) {
      if (p[i]! <= 1e-4) continue;
      counted++;
      worst = Math.max(worst, Math.abs(logits[i]! - lse - Math.log(p[i]!)));
    }
    expect(counted).toBeGreaterThan(shape.vocab / 2);
    expect(worst).toBeLessThan(QUANT_BOUND);
  } finally {
    await ref.dispose();
    await chain.dispose();
  }
});
