// The generation loop on stories260K: batched decoding of concurrent requests gives exactly the
// tokens of running each alone; admission against the KV pool; stop conditions.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { createTokenizer } from '../model/tokenizer/tokenizer.js';
import type { Tokenizer } from '../model/tokenizer/tokenizer.js';
import { testModelPath } from '../model/test-models.js';
import { isKiwiError } from '../errors.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import { BatchGenerator, generate } from './generation.js';
import type { GenerateParams } from './generation-loop.js';
import { KvBlockPool } from './kv-pool.js';
import { DEFAULT_SAMPLING, Sampler } from './sampling.js';
import { buildStageChain } from './stage-chain.js';
import type { StageChain } from './stage-chain.js';

let chain: StageChain;
let tok: Tokenizer;
const PROMPTS = ['Once upon a time', 'The cat sat', 'Tom had a red ball and', 'One day, Lily'];

const params = (prompt: string, o: Partial<GenerateParams> = {}): GenerateParams => ({
  promptIds: tok.encode(prompt),
  maxTokens: 24,
  sampler: new Sampler(DEFAULT_SAMPLING),
  isEndOfGeneration: (id) => tok.isEndOfGeneration(id),
  decoder: tok.createStreamDecoder(),
  ...o,
});

beforeAll(async () => {
  const file = await openGguf(await testModelPath('stories260K.gguf'));
  tok = createTokenizer(file.metadata);
  const shape = await modelShapeFromGguf(file, { maxPositions: 128 });
  chain = await buildStageChain(file, shape, [{ start: 0, end: 2 }, { start: 2, end: 5 }], { threads: 1 });
});
afterAll(async () => {
  await chain?.dispose();
});

describe('batched generation', () => {
  test('concurrent requests decoded in one batch give exactly the ids of each run alone', async () => {
    const alone = [];
    for (const p of PROMPTS) alone.push((await generate(chain, params(p))).ids);
    const gen = new BatchGenerator(chain, new KvBlockPool(64, 16, 1), { maxBatch: 4 });
    const together = await Promise.all(PROMPTS.map((p) => gen.generate(params(p))));
    expect(together.map((r) => r.ids)).toEqual(alone);
    expect(alone.every((ids) => ids.length === 24)).toBe(true);
  });

  test('sampled requests with the same seed give the same ids alone and batched', async () => {
    const sampled = (seed: number) => params('Once upon a time', { sampler: new Sampler({ ...DEFAULT_SAMPLING, temperature: 0.9, topK: 40, seed }) });
    const alone = (await generate(chain, sampled(7))).ids;
    const gen = new BatchGenerator(chain, new KvBlockPool(64, 16, 1), { maxBatch: 2 });
    const [a, b] = await Promise.all([gen.generate(sampled(7)), gen.generate(sampled(8))]);
    expect(a!.ids).toEqual(alone);
    expect(b!.ids).not.toEqual(alone);
  });

  test('when the KV pool is full a request waits for one to finish, and all complete correctly', async () => {
    const alone = (await generate(chain, params(PROMPTS[0]!))).ids;
    // Room for two requests of (<= 8 prompt + 24 new) positions at a time.
    const pool = new KvBlockPool(4, 16, 1);
    const gen = new BatchGenerator(chain, pool, { maxBatch: 4 });
    const results = await Promise.all([0, 1, 2].map(() => gen.generate(params(PROMPTS[0]!))));
    for (const r of results) expect(r.ids).toEqual(alone);
    expect(pool.freeBlocks).toBe(4);
  });

  test('a pool sized from a memory budget admits as many requests as the budget holds', async () => {
    const perRequest = 32 * chain.kvBytesPerToken; // 5 prompt + 24 new tokens fit in 2 blocks of 16
    expect(chain.kvBytesPerToken).toBe(5 * 2 * 4 * 16 * 4); // 5 layers, K and V, 4 kv heads, head 8 padded to 16, f32
    const pool = KvBlockPool.forBudget(2 * perRequest, chain.kvBytesPerToken, 16);
    expect(pool.totalBlocks).toBe(4);
    const gen = new BatchGenerator(chain, pool, { refuseWhenFull: true });
    const [a, b] = [gen.generate(params(PROMPTS[0]!)), gen.generate(params(PROMPTS[0]!))];
    const third = await gen.generate(params(PROMPTS[0]!)).catch((e: unknown) => e);
    expect(isKiwiError(third, 'KV_POOL_EXHAUSTED')).toBe(true);
    expect((await a).ids).toEqual((await b).ids);
  });

  test('refuses a request larger than the whole pool with KV_POOL_EXHAUSTED', async () => {
    const gen = new BatchGenerator(chain, new KvBlockPool(1, 16, 1));
    const err = await gen.generate(params(PROMPTS[0]!)).catch((e: unknown) => e);
    expect(isKiwiError(err, 'KV_POOL_EXHAUSTED')).toBe(true);
  });

  test('refuses instead of waiting when asked to', async () => {
    const gen = new BatchGenerator(chain, new KvBlockPool(2, 16, 1), { refuseWhenFull: true });
    const first = gen.generate(params(PROMPTS[0]!));
    const err = await gen.generate(params(PROMPTS[1]!)).catch((e: unknown) => e);
    expect(isKiwiError(err, 'KV_POOL_EXHAUSTED')).toBe(true);
    expect((await first).ids.length).toBe(24);
  });
});

describe('cancellation', () => {
  test('aborting one request of a decode batch ends it alone; the others finish with their ids', async () => {
    const alone = [];
    for (const p of PROMPTS.slice(1)) alone.push((await generate(chain, params(p))).ids);
    const pool = new KvBlockPool(64, 16, 1);
    const gen = new BatchGenerator(chain, pool, { maxBatch: 4 });
    const ac = new AbortController();
    let doomedTokens = 0;
    // Aborted from inside the batch, after its third token: the other three are decoding with it.
    const doomed = gen.generate(
      params(PROMPTS[0]!, { signal: ac.signal, onToken: () => ++doomedTokens === 3 && ac.abort(new Error('client went away')) }),
    );
    const others = PROMPTS.slice(1).map((p) => gen.generate(params(p)));
    await expect(doomed).rejects.toThrow('client went away');
    expect((await Promise.all(others)).map((r) => r.ids)).toEqual(alone);
    expect(doomedTokens).toBe(3);
    expect(pool.freeBlocks).toBe(64);
  });

  test('a request aborted while it waits for KV blocks leaves the queue at once, and the running one is untouched', async () => {
    const alone = (await generate(chain, params(PROMPTS[0]!))).ids;
    const pool = new KvBlockPool(2, 16, 1); // one request of <= 8 prompt + 24 new positions at a time
    const gen = new BatchGenerator(chain, pool, { maxBatch: 4 });
    const running = gen.generate(params(PROMPTS[0]!));
    const ac = new AbortController();
    const waiting = gen.generate(params(PROMPTS[1]!, { signal: ac.signal }));
    expect(gen.waitingForKv).toBe(1);
    ac.abort(new Error('gave up waiting'));
    await expect(waiting).rejects.toThrow('gave up waiting');
    expect(gen.waitingForKv).toBe(0);
    expect((await running).ids).toEqual(alone);
    expect(pool.freeBlocks).toBe(2);
  });

  test('a request aborted while queued for prefill ends without running a step', async () => {
    const pool = new KvBlockPool(64, 16, 1);
    const gen = new BatchGenerator(chain, pool, { maxBatch: 4 });
    const first = gen.generate(params(PROMPTS[0]!));
    const ac = new AbortController();
    let tokens = 0;
    const queued = gen.generate(params(PROMPTS[1]!, { signal: ac.signal, onToken: () => tokens++ }));
    // Both are admitted; the second waits behind the first's prefill.
    await Promise.resolve();
    await Promise.resolve();
    ac.abort(new Error('never mind'));
    await expect(queued).rejects.toThrow('never mind');
    expect(tokens).toBe(0);
    expect((await first).ids.length).toBe(24);
    expect(pool.freeBlocks).toBe(64);
  });
});

describe('stop conditions', () => {
  test('stops at max tokens with finish reason length', async () => {
    const r = await generate(chain, params(PROMPTS[0]!, { maxTokens: 5 }));
    expect(r.ids.length).toBe(5);
    expect(r.finishReason).toBe('length');
  });

  test('stops at a stop sequence with finish reason stop', async () => {
    const full = tok.decode((await generate(chain, params(PROMPTS[0]!))).ids);
    const stopAt = full.indexOf('Lily');
    expect(stopAt).toBeGreaterThan(0);
    const r = await generate(chain, params(PROMPTS[0]!, { stop: ['Lily'] }));
    expect(r.finishReason).toBe('stop');
    expect(tok.decode(r.ids)).toContain('Lily');
    expect(tok.decode(r.ids).length).toBeLessThan(full.length);
  });

  test('stops at an end-of-generation token, which is not part of the ids', async () => {
    const first = (await generate(chain, params(PROMPTS[0]!, { maxTokens: 3 }))).ids;
    const r = await generate(chain, params(PROMPTS[0]!, { isEndOfGeneration: (id) => id === first[2] }));
    expect(r.ids).toEqual(first.slice(0, 2));
    expect(r.finishReason).toBe('stop');
  });

  test('refuses a prompt longer than the context with CONTEXT_EXCEEDED', async () => {
    const err = await generate(chain, params('Once upon a time '.repeat(40))).catch((e: unknown) => e);
    expect(isKiwiError(err, 'CONTEXT_EXCEEDED')).toBe(true);
  });

  test('refuses an empty prompt with USAGE', async () => {
    const err = await generate(chain, params('', { promptIds: [] })).catch((e: unknown) => e);
    expect(isKiwiError(err, 'USAGE')).toBe(true);
  });

  test('the loop behind generate() asserts what the entry checked: a prompt past the context is a programming error', async () => {
    const gen = new BatchGenerator(chain, new KvBlockPool(64, 16, 1));
    const err = await gen.generate(params('Once upon a time '.repeat(40))).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(isKiwiError(err)).toBe(false);
    expect(String(err)).toMatch(/prompt of 1 to 127 tokens/);
  });

  test('a stage refuses to grow a request past its KV cache capacity', async () => {
    const stage = chain.stages[0]!;
    const cache = stage.emptyCache(4);
    await stage.forward({ kind: 'ids', ids: BigInt64Array.of(1n, 2n, 3n), batch: 1, seq: 3 }, [cache]);
    const err = await stage.forward({ kind: 'ids', ids: BigInt64Array.of(4n, 5n), batch: 1, seq: 2 }, [cache]).catch((e: unknown) => e);
    expect(isKiwiError(err, 'CONTEXT_EXCEEDED')).toBe(true);
    expect(cache.length).toBe(3);
  });

  test('an aborted request ends with the abort reason', async () => {
    const ac = new AbortController();
    ac.abort(new Error('cancelled by the client'));
    await expect(generate(chain, params(PROMPTS[0]!, { signal: ac.signal }))).rejects.toThrow(/cancelled/);
  });
});
