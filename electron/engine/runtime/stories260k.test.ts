// Golden test against llama.cpp: greedy generation from stories260K.gguf (all F32) must give the
// same token ids as node-llama-cpp, unsplit and for every split of the layers.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import type { ModelShape } from './decoder-shape.js';
import { Sampler, DEFAULT_SAMPLING } from './sampling.js';
import { StageChain, buildStageChain } from './stage-chain.js';
import { generate } from './generation.js';
import type { LayerRange } from './layer-range.js';
import { openLlamaReference } from './test-support/llama-reference.js';
import type { LlamaReference } from './test-support/llama-reference.js';

const PROMPTS = ['Once upon a time', 'The little dog', 'Lily and Tom went to the park. They saw', ''];
const TOKENS = 80;

let file: GgufFile;
let shape: ModelShape;
let reference: LlamaReference;
let expected: number[][];
let prompts: number[][];

async function run(chain: StageChain, promptIds: number[]): Promise<number[]> {
  const res = await generate(chain, {
    promptIds,
    maxTokens: TOKENS,
    sampler: new Sampler(DEFAULT_SAMPLING),
    isEndOfGeneration: (id) => id === reference.eos(),
  });
  return res.finishReason === 'stop' ? [...res.ids, reference.eos()!] : res.ids;
}

beforeAll(async () => {
  const path = await testModelPath('stories260K.gguf');
  file = await openGguf(path);
  shape = await modelShapeFromGguf(file, { maxPositions: 256 });
  reference = await openLlamaReference(path);
  prompts = PROMPTS.map((p) => [reference.bos()!, ...reference.tokenize(p)]);
  expected = [];
  for (const p of prompts) expected.push(await reference.greedy(p, TOKENS));
});

afterAll(async () => {
  await reference?.dispose();
});

describe('stories260K greedy generation', () => {
  test('matches llama.cpp token for token for at least 64 tokens on several prompts', async () => {
    const chain = await buildStageChain(file, shape, [{ start: 0, end: shape.blockCount }], { threads: 1 });
    try {
      for (const [i, p] of prompts.entries()) {
        const ours = await run(chain, p);
        expect(ours, `prompt ${JSON.stringify(PROMPTS[i])}`).toEqual(expected[i]);
        expect(Math.min(ours.length, TOKENS)).toBeGreaterThanOrEqual(64);
      }
    } finally {
      await chain.dispose();
    }
  });

  const splits: LayerRange[][] = [
    [{ start: 0, end: 1 }, { start: 1, end: 5 }],
    [{ start: 0, end: 2 }, { start: 2, end: 3 }, { start: 3, end: 5 }],
    [{ start: 0, end: 4 }, { start: 4, end: 5 }],
    [0, 1, 2, 3, 4].map((s) => ({ start: s, end: s + 1 })),
  ];
  test.each(splits.map((s) => [s.map((r) => `${r.start}-${r.end}`).join(','), s] as const))(
    'split %s gives exactly the ids of the unsplit run',
    async (_name, split) => {
      const chain = await buildStageChain(file, shape, split, { threads: 1 });
      try {
        for (const [i, p] of prompts.slice(0, 2).entries()) expect(await run(chain, p)).toEqual(expected[i]);
      } finally {
        await chain.dispose();
      }
    },
  );
});
