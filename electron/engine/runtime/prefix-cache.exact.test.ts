// The prompt cache is exact: a prompt prefilled on top of a cached prefix's KV gives bit for bit the
// logits of prefilling the whole prompt at once (prefix-cache.ts, "Exactness"), and a conversation
// generated with the cache gives the same tokens as without it, on a trained and a random-weight
// model (where float rounding would flip near-tied tokens), split over two stages.
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
import { BatchGenerator } from './generation.js';
import { KvBlockPool } from './kv-pool.js';
import { copyPrefix } from './kv-store.js';
import { DEFAULT_SAMPLING, Sampler } from './sampling.js';
import { buildStageChain, type StageChain } from './stage-chain.js';

let dir: string;
const models: Record<string, GgufFile> = {};
const CONTEXT = 256;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-prefix-exact-'));
  const path = join(dir, 'tiny.gguf');
  const tiny = { name: 'tiny', architecture: 'llama', blockCount: 4, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 512, contextLength: CONTEXT };
  await synthesizeModel({ shape: resolveShape(JSON.stringify(tiny)), quant: GgmlType.Q4_0, out: path, seed: 5 });
  models.synthetic = await openGguf(path);
  models.stories260K = await openGguf(await testModelPath('stories260K.gguf'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function chainOf(name: string, accuracyLevel: 0 | 4 = 4): Promise<StageChain> {
  const file = models[name]!;
  const shape = await modelShapeFromGguf(file, { maxPositions: CONTEXT });
  return buildStageChain(file, shape, [{ start: 0, end: 2 }, { start: 2, end: shape.blockCount }], { threads: 1, accuracyLevel });
}

const prompt = Array.from({ length: 150 }, (_, i) => 1 + ((i * 37) % 500));

describe('a prompt prefilled on a cached prefix', () => {
  test.each([
    ['stories260K', 0], ['stories260K', 4], ['synthetic', 0], ['synthetic', 4],
  ] as const)('gives the logits of one whole prefill bit for bit, wherever the prefix ends (%s, accuracy level %i)', async (name, level) => {
    const chain = await chainOf(name, level);
    try {
      const whole = (await chain.step([{ tokens: prompt, caches: chain.newCaches(CONTEXT) }]))[0]!;
      // An earlier request's prompt: the first 120 tokens (its caches also hold a generated token, a decode step).
      const earlier = chain.newCaches(CONTEXT);
      await chain.step([{ tokens: prompt.slice(0, 120), caches: earlier }]);
      await chain.step([{ tokens: [7], caches: earlier }]);
      for (const length of [2, 37, 64, 100, 120, prompt.length - 2]) {
        const from = length <= 120 ? earlier : chain.newCaches(CONTEXT);
        if (length > 120) await chain.step([{ tokens: prompt.slice(0, length + 1), caches: from }]);
        const seeded = from.map((c) => copyPrefix(c, length, CONTEXT));
        const logits = (await chain.step([{ tokens: prompt.slice(length), caches: seeded }]))[0]!;
        expect({ length, logits: Array.from(logits) }).toEqual({ length, logits: Array.from(whole) });
      }
    } finally {
      await chain.dispose();
    }
  });
});

describe('a conversation with the prompt cache', () => {
  test.each(['stories260K', 'synthetic'])('gives token for token what it gives without it, reusing each turn\'s history (%s)', async (name) => {
    const chain = await chainOf(name);
    try {
      const converse = async (promptCacheBytes: number): Promise<{ turns: number[][]; gen: BatchGenerator }> => {
        const gen = new BatchGenerator(chain, new KvBlockPool(64, 16, chain.kvBytesPerToken), { promptCacheBytes });
        const turns: number[][] = [];
        let history = [1, 40, 41, 42, 43];
        for (let turn = 0; turn < 10; turn++) {
          const r = await gen.generate({ promptIds: history, maxTokens: 8, sampler: new Sampler(DEFAULT_SAMPLING), isEndOfGeneration: () => false });
          turns.push(r.ids);
          // The client resends the history, the answer and a new message.
          history = [...history, ...r.ids, 50 + turn, 60 + turn, 70 + turn, 80 + turn];
        }
        return { turns, gen };
      };
      const without = await converse(0);
      const withCache = await converse(64 * chain.kvBytesPerToken * 16);
      expect(withCache.turns).toEqual(without.turns);
      expect(without.gen.promptCacheStats).toBeUndefined();
      const stats = withCache.gen.promptCacheStats!;
      expect(stats.hits).toBe(9);
      expect(stats.misses).toBe(1);
      // Every turn after the first reuses the previous turn's whole prompt.
      expect(stats.tokensReused).toBe(Array.from({ length: 9 }, (_, t) => 5 + 12 * t).reduce((a, b) => a + b, 0));
      // Each turn's entry replaces the previous one (it holds it as a prefix).
      expect(stats.entries).toBe(1);
    } finally {
      await chain.dispose();
    }
  });
});
