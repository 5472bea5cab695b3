// Prefill in chunks (generation-loop.ts prefillEnd): a long prompt runs as steps of at most
// `prefillChunk` positions, never leaving one position alone for the last; the logits every token
// is sampled from are those of one whole prefill, bit for bit; and another request's decode steps run
// between two chunks instead of waiting for the whole prompt.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GgmlType } from '../model/gguf/gguf-types.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { resolveShape } from '../model/synth/shapes.js';
import { synthesizeModel } from '../model/synth/synth.js';
import { createTokenizer } from '../model/tokenizer/tokenizer.js';
import type { Tokenizer } from '../model/tokenizer/tokenizer.js';
import { testModelPath } from '../model/test-models.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import { BatchGenerator } from './generation.js';
import { prefillEnd, type GenerateParams, type StepRow } from './generation-loop.js';
import { KvBlockPool } from './kv-pool.js';
import { DEFAULT_SAMPLING, Sampler } from './sampling.js';
import { buildStageChain, type RequestCaches, type StageChain } from './stage-chain.js';

let chain: StageChain;
let tok: Tokenizer;
const LONG = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her dog. One day, she saw a big red ball in the park and ran to get it. ';

const params = (prompt: string, o: Partial<GenerateParams> = {}): GenerateParams => ({
  promptIds: tok.encode(prompt),
  maxTokens: 16,
  sampler: new Sampler(DEFAULT_SAMPLING),
  isEndOfGeneration: (id) => tok.isEndOfGeneration(id),
  decoder: tok.createStreamDecoder(),
  ...o,
});

/** The chain's generator, recording each step's rows (request id, positions) and the logits tokens are sampled from. */
class Recording extends BatchGenerator {
  readonly steps: Array<Array<{ id: number; n: number }>> = [];
  readonly sampledFrom: Float32Array[] = [];
  protected override async runStep(rows: readonly StepRow<RequestCaches>[]): Promise<Float32Array[]> {
    this.steps.push(rows.map((r) => ({ id: r.request.id, n: r.tokens.length })));
    const logits = await super.runStep(rows);
    // A chunk that does not end its prompt samples nothing: its logits are not kept.
    rows.forEach((r, i) => {
      if (r.request.pos + r.tokens.length >= r.request.p.promptIds.length) this.sampledFrom.push(logits[i]!.slice());
    });
    return logits;
  }
}

let stories: GgufFile;
let synthetic: GgufFile;
let dir: string;

beforeAll(async () => {
  stories = await openGguf(await testModelPath('stories260K.gguf'));
  tok = createTokenizer(stories.metadata);
  const shape = await modelShapeFromGguf(stories, { maxPositions: 512 });
  chain = await buildStageChain(stories, shape, [{ start: 0, end: 2 }, { start: 2, end: 5 }], { threads: 1 });
  // Random weights: float rounding would flip near-tied tokens.
  dir = await mkdtemp(join(tmpdir(), 'kiwi-prefill-chunks-'));
  const tiny = { name: 'tiny', architecture: 'llama', blockCount: 4, embeddingLength: 256, headCount: 4, headCountKv: 2, feedForwardLength: 512, vocabSize: 512, contextLength: 512 };
  await synthesizeModel({ shape: resolveShape(JSON.stringify(tiny)), quant: GgmlType.Q4_0, out: join(dir, 'tiny.gguf'), seed: 5 });
  synthetic = await openGguf(join(dir, 'tiny.gguf'));
});
afterAll(async () => {
  await chain?.dispose();
  await rm(dir, { recursive: true, force: true });
});

describe('prefill in chunks', () => {
  test('cuts a prompt into chunks of at most the size, never leaving one position for the last', () => {
    expect(prefillEnd(0, 100, 128)).toBe(100);
    expect(prefillEnd(0, 300, 128)).toBe(128);
    expect(prefillEnd(128, 300, 128)).toBe(256);
    expect(prefillEnd(256, 300, 128)).toBe(300);
    expect(prefillEnd(0, 129, 128)).toBe(127); // not 128 + 1
    expect(prefillEnd(127, 129, 128)).toBe(129);
    expect(prefillEnd(5, 6, 128)).toBe(6); // a prefix-cache hit leaves at least 2; one alone is one step
    expect(() => prefillEnd(0, 10, 1)).toThrow(/at least 2/);
  });

  test.each([['stories260K', 4], ['synthetic Q4_0', 0], ['synthetic Q4_0', 4]] as const)('chunked prefills give the logits and tokens of one whole prefill, bit for bit (%s, accuracy level %i)', async (name, level) => {
    const file = name === 'stories260K' ? stories : synthetic;
    const shape = await modelShapeFromGguf(file, { maxPositions: 512 });
    const split = await buildStageChain(file, shape, [{ start: 0, end: 2 }, { start: 2, end: shape.blockCount }], { threads: 1, accuracyLevel: level });
    try {
      const promptIds = Array.from({ length: 150 }, (_, i) => 1 + ((i * 37) % 500));
      const run = async (prefillChunk: number) => {
        const gen = new Recording(split, new KvBlockPool(64, 16, 1), { prefillChunk });
        const r = await gen.generate({ promptIds, maxTokens: 12, sampler: new Sampler(DEFAULT_SAMPLING), isEndOfGeneration: () => false });
        return { ids: r.ids, logits: gen.sampledFrom, steps: gen.steps };
      };
      const whole = await run(10_000);
      expect(whole.steps[0]![0]!.n).toBe(promptIds.length);
      for (const chunk of [2, 7, 64]) {
        const cut = await run(chunk);
        const prefill = cut.steps.filter((st) => st[0]!.n > 1).map((st) => st[0]!.n);
        expect(prefill.every((n) => n >= 2 && n <= chunk)).toBe(true);
        expect(prefill.reduce((a, b) => a + b, 0)).toBe(promptIds.length);
        expect(cut.ids).toEqual(whole.ids);
        expect(cut.logits.length).toBe(whole.logits.length);
        cut.logits.forEach((l, i) => expect(Buffer.from(l.buffer).equals(Buffer.from(whole.logits[i]!.buffer))).toBe(true));
      }
    } finally {
      await split.dispose();
    }
  });

  test('a decoding request takes a step between two chunks of a long prompt', async () => {
    const gen = new Recording(chain, new KvBlockPool(64, 16, 1), { prefillChunk: 8 });
    const short = gen.generate(params('The cat sat', { maxTokens: 40 }));
    // The long prompt arrives once the short one decodes.
    while (!gen.steps.some((s) => s.length === 1 && s[0]!.n === 1)) await new Promise((r) => setImmediate(r));
    const long = gen.generate(params(LONG));
    await Promise.all([short, long]);
    const longId = Math.max(...gen.steps.flat().map((r) => r.id));
    const chunks = gen.steps.map((s, i) => ({ s, i })).filter(({ s }) => s[0]!.id === longId && s[0]!.n > 1);
    expect(chunks.length).toBeGreaterThan(3);
    // Between consecutive chunks of the long prompt, the short request decoded.
    for (let c = 1; c < chunks.length; c++) {
      const between = gen.steps.slice(chunks[c - 1]!.i + 1, chunks[c]!.i);
      expect(between.some((s) => s.some((r) => r.id !== longId && r.n === 1))).toBe(true);
    }
  });
});
