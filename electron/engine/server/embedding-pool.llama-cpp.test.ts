// The hidden states embeddings are pooled from, against llama.cpp (node-llama-cpp's embedding
// context on stories260K, pooling none: the final-norm hidden state of the last position): Kiwi's
// head output `hidden_norm` at the last position must be llama.cpp's vector. /v1/embeddings then
// mean-pools every position and L2-normalizes (llama-server --embeddings --pooling mean).
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import type { StageInput } from '../runtime/stage.js';
import { LocalBackend } from './local-backend.js';
import { meanPoolNormalized } from '../completion/embedding-pool.js';

let backend: LocalBackend;
let path: string;
beforeAll(async () => {
  path = await testModelPath('stories260K.gguf');
  backend = await LocalBackend.open(path, { threads: 1 });
});
afterAll(async () => {
  await backend?.close();
});

describe('embedding hidden states', () => {
  test.each(['Once upon a time', 'The cat sat on the mat'])('the last position of %j is llama.cpp\'s final-norm hidden state', async (text) => {
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.disabled });
    const model = await llama.loadModel({ modelPath: path });
    const context = await model.createEmbeddingContext({ threads: 1 });
    try {
      const reference = (await context.getEmbeddingFor(text)).vector; // llama.cpp adds BOS
      const ids = await backend.tokenize(text, { addSpecial: true, parseSpecial: false });
      const { chain } = (backend as unknown as { loaded: { model: { chain: import('../runtime/stage-chain.js').StageChain } } }).loaded.model;
      const caches = chain.newCaches(ids.length);
      let input: StageInput = { kind: 'ids', ids: BigInt64Array.from(ids.map(BigInt)), batch: 1, seq: ids.length };
      let states: Float32Array | undefined;
      for (const [s, stage] of chain.stages.entries()) {
        const out = await stage.forward(input, [caches[s]!], { hiddenNorm: stage.plan.head });
        if (out.kind === 'logits') states = out.hiddenNorm;
        else input = { kind: 'hidden', hidden: out.hidden, batch: 1, seq: ids.length };
      }
      const hidden = reference.length;
      const last = states!.subarray((ids.length - 1) * hidden, ids.length * hidden);
      for (let i = 0; i < hidden; i++) expect(Math.abs(last[i]! - reference[i]!)).toBeLessThan(1e-2);
      // The API's vector is the normalized mean of these rows.
      const pooled = await backend.embed(ids, new AbortController().signal);
      expect(Array.from(pooled)).toEqual(Array.from(meanPoolNormalized(states!, ids.length, hidden)));
    } finally {
      await context.dispose();
      await model.dispose();
    }
  });
});

test('meanPoolNormalized averages the rows and scales to unit length', () => {
  const [a, b] = meanPoolNormalized(Float32Array.of(1, 0, 5, 8), 2, 2); // mean [3, 4]
  expect(a).toBeCloseTo(0.6, 6);
  expect(b).toBeCloseTo(0.8, 6);
});
