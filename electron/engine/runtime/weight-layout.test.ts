// The fast weight layout (`--weight-layout fast`, weights/convert.ts) through real stages: a
// random-weight Q4_0 model whose matrices are requantized to blocks of 128 gives next-token
// distributions near the exact layout's (not the same bits: it is lossy), and the shard cache
// keeps the two layouts' builds apart (a fast entry never stands in for an exact one) and reuses
// a built fast layer in another range.
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { DecoderShape } from './stage-graph.js';
import { ShardCache } from './shard-cache.js';
import { buildStageChain } from './stage-chain.js';
import type { StageOptions } from './stage.js';
import { tinyModel, type TinyModel } from './test-support/tiny-model.js';

let tiny: TinyModel;
let file: GgufFile;
let shape: DecoderShape;
beforeAll(async () => {
  tiny = await tinyModel({ seed: 5, shape: { name: 'tiny llama', blockCount: 2, contextLength: 64, tiedEmbeddings: true } });
  ({ file, shape } = tiny);
});
afterAll(async () => {
  await tiny.dispose();
});

const PROMPT = [1, ...Array.from({ length: 15 }, (_, i) => 3 + ((i * 97) % 500))];

/** Next-token logits after every prefix of PROMPT from 4 tokens on (prefill, then decode steps), and where the stage came from. */
async function logitsOf(opts: StageOptions, ranges = [{ start: 0, end: 2 }]): Promise<{ logits: Float32Array[]; source: string }> {
  const chain = await buildStageChain(file, shape, ranges, { threads: 1, ...opts });
  try {
    const caches = chain.newCaches();
    const out = [(await chain.step([{ tokens: PROMPT.slice(0, 4), caches }]))[0]!];
    for (let n = 4; n < PROMPT.length; n++) out.push((await chain.step([{ tokens: [PROMPT[n]!], caches }]))[0]!);
    return { logits: out, source: chain.stages[0]!.origin.source };
  } finally {
    await chain.dispose();
  }
}

const logSoftmax = (l: Float32Array): number[] => {
  const max = Math.max(...l);
  const lse = max + Math.log(l.reduce((a, x) => a + Math.exp(x - max), 0));
  return Array.from(l, (x) => x - lse);
};

describe('the fast weight layout', () => {
  test('gives next-token distributions near the exact layout\'s, not the same bits', async () => {
    const exact = await logitsOf({});
    const fast = await logitsOf({ weightLayout: 'fast' });
    let worst = 0;
    for (const [i, l] of fast.logits.entries()) {
      const a = logSoftmax(exact.logits[i]!);
      const b = logSoftmax(l);
      for (let t = 0; t < a.length; t++) if (Math.exp(a[t]!) > 1e-4) worst = Math.max(worst, Math.abs(a[t]! - b[t]!));
    }
    expect(fast.logits).not.toEqual(exact.logits);
    // Measured 0.25-0.27 against llama.cpp on this shape (exact: 0.015); random weights give each
    // 32-block its own scale, the worst case for merging four of them.
    expect(worst).toBeGreaterThan(0);
    expect(worst).toBeLessThan(0.6);
  });

  test('is kept apart from the exact layout in the shard cache', async () => {
    const cache = new ShardCache(join(dirname(tiny.path), 'shards'));
    const fast = await logitsOf({ weightLayout: 'fast', cache });
    const exact = await logitsOf({ cache });
    expect([fast.source, exact.source]).toEqual(['built', 'built']);
    const fastAgain = await logitsOf({ weightLayout: 'fast', cache });
    const exactAgain = await logitsOf({ cache });
    expect([fastAgain.source, exactAgain.source]).toEqual(['cache', 'cache']);
    expect(fastAgain.logits).toEqual(fast.logits);
    expect(exactAgain.logits).toEqual(exact.logits);
    expect(exact.logits).toEqual((await logitsOf({})).logits);
    // Two stages of one layer each reuse the built fast layers (added hollow): the same logits.
    const split = await logitsOf({ weightLayout: 'fast', cache }, [{ start: 0, end: 1 }, { start: 1, end: 2 }]);
    expect(split.logits).toEqual(fast.logits);
  });
});
