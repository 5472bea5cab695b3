// Drafting with a draft model (draft-model.ts) on the real stories260K: as its own draft model
// (the same weights in another process-local chain) it guesses the target's greedy tokens, so
// drafts are accepted, and greedy output is the target's own token for token; a draft model that
// is often wrong (stories260K cut to its first layer) changes no token either; a draft state reused
// across steps (rolled back to what the target accepted) drafts what a fresh one would; a seeded
// sampled run gives the same text again; another vocabulary is refused.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { createTokenizer, type Tokenizer } from '../model/tokenizer/tokenizer.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import { DraftModelDrafter, openDraftModel, vocabularyMismatch } from './draft-model.js';
import { BatchGenerator } from './generation.js';
import { KvBlockPool } from './kv-pool.js';
import { DEFAULT_SAMPLING, Sampler, type SamplingOptions } from './sampling.js';
import type { SpeculativeMode } from './speculative.js';
import { buildStageChain, StageChain } from './stage-chain.js';

const CONTEXT = 256;
let file: GgufFile;
let tok: Tokenizer;
let target: StageChain;
let drafter: DraftModelDrafter;

beforeAll(async () => {
  const path = await testModelPath('stories260K.gguf');
  file = await openGguf(path);
  const shape = await modelShapeFromGguf(file, { maxPositions: CONTEXT });
  tok = createTokenizer(file.metadata);
  target = await buildStageChain(file, shape, [{ start: 0, end: 2 }, { start: 2, end: shape.blockCount }], { threads: 1 });
  drafter = await openDraftModel(path, tok, { threads: 1, maxPositions: CONTEXT });
});
afterAll(async () => {
  await drafter?.dispose();
  await target?.dispose();
});

async function run(prompt: string, opts: { speculative?: SpeculativeMode; drafter?: DraftModelDrafter; sampling?: Partial<SamplingOptions>; maxTokens?: number } = {}) {
  const pool = new KvBlockPool(4, CONTEXT, target.kvBytesPerToken);
  const gen = new BatchGenerator(target, pool, { ...(opts.speculative !== undefined ? { speculative: opts.speculative } : {}), ...(opts.drafter !== undefined ? { drafter: opts.drafter } : {}) });
  const res = await gen.generate({
    promptIds: tok.encode(prompt, { addBos: true }), maxTokens: opts.maxTokens ?? 60, sampler: new Sampler({ ...DEFAULT_SAMPLING, ...opts.sampling }),
    decoder: tok.createStreamDecoder(), isEndOfGeneration: (id) => tok.isEndOfGeneration(id),
  });
  return { ids: res.ids, stats: gen.speculation?.stats() };
}

/** stories260K's first `layers` blocks and its head: a weaker draft model of the same vocabulary. */
async function truncatedDrafter(layers: number): Promise<DraftModelDrafter> {
  const shape = await modelShapeFromGguf(file, { maxPositions: CONTEXT });
  const chain = await buildStageChain(file, { ...shape, blockCount: layers }, [{ start: 0, end: layers }], { threads: 1 });
  return new DraftModelDrafter(chain, 0);
}

describe('a draft model drafts and greedy output stays the target\'s', () => {
  test('the model as its own draft model: the same tokens as no speculation, and most drafts accepted', async () => {
    const prompt = 'Once upon a time, there was a little dog';
    const plain = await run(prompt);
    const spec = await run(prompt, { speculative: { kind: 'fixed', k: 4 }, drafter });
    expect(spec.ids).toEqual(plain.ids);
    expect(spec.stats!.acceptance!).toBeGreaterThan(0.8);
    expect(spec.stats!.tokensPerVerifyStep!).toBeGreaterThan(3);
    // Adaptive k: a draft model as dear as the model itself pays little here; whatever k it picks, the tokens are the same.
    expect((await run(prompt, { speculative: { kind: 'auto' }, drafter })).ids).toEqual(plain.ids);
  });

  test('a draft model that is often wrong (the first block only) changes no token', async () => {
    const weak = await truncatedDrafter(1);
    try {
      const prompt = 'Lily and Tom went to the park';
      const plain = await run(prompt, { maxTokens: 80 });
      const spec = await run(prompt, { maxTokens: 80, speculative: { kind: 'fixed', k: 3 }, drafter: weak });
      expect(spec.ids).toEqual(plain.ids);
      expect(spec.stats!.accepted).toBeLessThan(spec.stats!.drafted);
    } finally {
      await weak.dispose();
    }
  });

  test('a seeded sampled run gives the same tokens again with the same draft model', async () => {
    const sampling = { temperature: 0.9, seed: 42 };
    const a = await run('The cat', { sampling, speculative: { kind: 'fixed', k: 3 }, drafter });
    const b = await run('The cat', { sampling, speculative: { kind: 'fixed', k: 3 }, drafter });
    expect(b.ids).toEqual(a.ids);
  });
});

describe('draft state per request', () => {
  test('a state rolled back to what the target accepted drafts what a fresh one drafts', async () => {
    const history = tok.encode('Once upon a time, there was a girl', { addBos: true });
    const key = {};
    const first = await drafter.draft(history, 4, key);
    // The target accepted the first draft and then said another token: the state keeps the shared prefix only.
    const next = [...history, first[0]!, (first[1]! + 1) % tok.vocabSize];
    const reused = await drafter.draft(next, 4, key);
    drafter.release(key);
    const fresh = await drafter.draft(next, 4, {});
    expect(reused).toEqual(fresh);
    expect(reused).toHaveLength(4);
  });

  test('a release right after a draft is asked for frees what that draft made', async () => {
    const [key, before] = [{}, drafter.held];
    const drafted = drafter.draft(tok.encode('The dog', { addBos: true }), 2, key);
    drafter.release(key);
    await drafted;
    await drafter.draft([1], 0, {}); // the queue has run the release
    expect(drafter.held).toBe(before);
  });

  test('nothing is drafted past the draft model\'s context', async () => {
    const history = Array.from({ length: CONTEXT - 2 }, (_, i) => 1 + (i % 100));
    expect(await drafter.draft(history, 4, {})).toEqual([]);
  });
});

describe('openDraftModel', () => {
  test('refuses a draft model of another vocabulary, saying where they differ', async () => {
    const other = createTokenizer((await openGguf(await testModelPath('vocab/ggml-vocab-llama-spm.gguf'))).metadata);
    expect(vocabularyMismatch(other, tok)).toBe(`${other.vocabSize} tokens against ${tok.vocabSize}`);
    expect(vocabularyMismatch(tok, tok)).toBeUndefined();
    // stories260K drafting for a model whose tokenizer is llama's: refused at open, with the reason.
    await expect(openDraftModel(await testModelPath('stories260K.gguf'), other, { threads: 1, maxPositions: CONTEXT })).rejects.toMatchObject({ code: 'USAGE', message: expect.stringMatching(/another vocabulary than the model \(512 tokens against 32000\)/) });
  });
});
