// Speculative decoding on the real stories260K model, through the local stage chain: greedy output
// is the same token for token with and without it (prompt lookup, a fixed or adaptive k, an oracle
// whose drafts are often wrong so that rollbacks happen), also with penalties, stop sequences,
// logprobs and a JSON grammar; at temperature > 0 the sampled tokens keep the target distribution
// (chi-square over seeded runs) and a seed gives the same output again.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { createTokenizer, type Tokenizer } from '../model/tokenizer/tokenizer.js';
import { ANY_OBJECT } from './constrained/json-schema-shape.js';
import { JsonGrammar } from './constrained/json-automaton.js';
import { createConstraint } from './constrained/token-constraint.js';
import { modelShapeFromGguf } from './decoder-shape.js';
import { BatchGenerator } from './generation.js';
import type { GenerateParams } from './generation-loop.js';
import { KvBlockPool } from './kv-pool.js';
import type { Drafter } from './prompt-lookup.js';
import { DEFAULT_SAMPLING, Sampler, type SamplingOptions, type TokenLogprobs } from './sampling.js';
import { bestDraftLength, parseSpeculative, withVerify, type SpeculativeMode, type SpeculativeVerify } from './speculative.js';
import { buildStageChain, type StageChain } from './stage-chain.js';
import { OracleDrafter } from './test-support/oracle-drafter.js';

let chain: StageChain;
let tok: Tokenizer;
const CONTEXT = 256;
const REPEATING = 'Once upon a time, there was a little girl named Lily. She liked to play outside. Once upon a time, there was a little girl named';

beforeAll(async () => {
  const file = await openGguf(await testModelPath('stories260K.gguf'));
  const shape = await modelShapeFromGguf(file, { maxPositions: CONTEXT });
  tok = createTokenizer(file.metadata);
  chain = await buildStageChain(file, shape, [{ start: 0, end: 2 }, { start: 2, end: shape.blockCount }], { threads: 1 });
});
afterAll(async () => {
  await chain?.dispose();
});

interface Run {
  ids: number[];
  text: string;
  finishReason: string;
  logprobs: Array<TokenLogprobs | undefined>;
  stats: ReturnType<NonNullable<BatchGenerator['speculation']>['stats']> | undefined;
}

async function run(prompt: string | number[], opts: { speculative?: SpeculativeMode; drafter?: Drafter; sampling?: Partial<SamplingOptions>; maxTokens?: number; extra?: Partial<GenerateParams> } = {}): Promise<Run> {
  const pool = new KvBlockPool(4, CONTEXT, chain.kvBytesPerToken);
  const gen = new BatchGenerator(chain, pool, { ...(opts.speculative !== undefined ? { speculative: opts.speculative } : {}), ...(opts.drafter !== undefined ? { drafter: opts.drafter } : {}) });
  const sampler = new Sampler({ ...DEFAULT_SAMPLING, ...opts.sampling });
  const decoder = tok.createStreamDecoder();
  let text = '';
  const logprobs: Array<TokenLogprobs | undefined> = [];
  const promptIds = typeof prompt === 'string' ? tok.encode(prompt, { addBos: true }) : prompt;
  const res = await gen.generate({
    promptIds, maxTokens: opts.maxTokens ?? 60, sampler, decoder, isEndOfGeneration: (id) => tok.isEndOfGeneration(id),
    onToken: (_id, piece) => {
      text += piece;
      logprobs.push(sampler.lastLogprobs);
    },
    ...opts.extra,
  });
  return { ids: res.ids, text, finishReason: res.finishReason, logprobs, stats: gen.speculation?.stats() };
}

describe('speculative decoding is lossless at temperature 0', () => {
  test('prompt lookup with k = 4 and with an adaptive k gives the same tokens as no speculation, and drafts were accepted', async () => {
    const plain = await run(REPEATING);
    for (const mode of [{ kind: 'fixed', k: 4 }, { kind: 'auto' }] as const) {
      const spec = await run(REPEATING, { speculative: mode });
      expect(spec.ids).toEqual(plain.ids);
      expect(spec.stats!.accepted).toBeGreaterThan(0);
    }
  });

  test('an oracle right half of the time (rejections roll every stage\'s cache back) changes no token', async () => {
    const promptIds = tok.encode('The little dog', { addBos: true });
    const plain = await run(promptIds, { maxTokens: 80 });
    const oracle = new OracleDrafter([...promptIds, ...plain.ids], 0.5, chain.vocab, 7);
    const spec = await run(promptIds, { maxTokens: 80, speculative: { kind: 'fixed', k: 4 }, drafter: oracle });
    expect(spec.ids).toEqual(plain.ids);
    const s = spec.stats!;
    expect(s.accepted).toBeGreaterThan(0);
    expect(s.accepted).toBeLessThan(s.drafted); // some were rejected
    // Fewer steps than tokens: verify steps gave more than one token each.
    expect(s.tokensPerVerifyStep!).toBeGreaterThan(1.2);
  });

  test('composes with penalties, logit bias, logprobs and stop sequences', async () => {
    const sampling = { repetitionPenalty: 1.3, presencePenalty: 0.4, frequencyPenalty: 0.2, topLogprobs: 3, logitBias: new Map([[tok.encode(' Lily', { addBos: false })[0]!, -2]]) };
    const extra = { stop: [' park'] };
    const plain = await run(REPEATING, { sampling, extra, maxTokens: 80 });
    const spec = await run(REPEATING, { sampling, extra, maxTokens: 80, speculative: { kind: 'fixed', k: 3 } });
    expect(spec.ids).toEqual(plain.ids);
    expect(spec.text).toBe(plain.text);
    expect(spec.finishReason).toBe(plain.finishReason);
    expect(spec.logprobs).toEqual(plain.logprobs);
    expect(spec.logprobs.every((l) => l !== undefined && l.top.length === 3)).toBe(true);
  });

  test('composes with constrained decoding (a JSON grammar masks every verified position in its own state)', async () => {
    const grammar = new JsonGrammar([{ value: ANY_OBJECT }]);
    const prompt = '{"a": "Lily", "b": "Lily", "c": "Lily", "d": "Lily", "e": "';
    const plain = await run(prompt, { extra: { constraint: createConstraint(grammar, tok) }, maxTokens: 40 });
    const spec = await run(prompt, { extra: { constraint: createConstraint(grammar, tok) }, maxTokens: 40, speculative: { kind: 'fixed', k: 4 } });
    expect(spec.ids).toEqual(plain.ids);
    expect(plain.text.startsWith('{')).toBe(true);
  });
});

/** Wilson-Hilferty: the chi-square quantile of `df` degrees of freedom at the normal quantile z. */
function chiSquareQuantile(df: number, z: number): number {
  const a = 2 / (9 * df);
  return df * (1 - a + z * Math.sqrt(a)) ** 3;
}

describe('an exact verify', () => {
  /** Logits of `next` fed after `prompt`: one decode step each, or one verify row ('exact' or 'chunk'). */
  async function logitsOf(prompt: number[], next: number[], how: 'steps' | SpeculativeVerify): Promise<Float32Array[]> {
    const caches = chain.newCaches(CONTEXT);
    await chain.step([{ tokens: prompt, caches }]);
    if (how === 'steps') {
      const out: Float32Array[] = [];
      for (const t of next) out.push(Float32Array.from((await chain.step([{ tokens: [t], caches }]))[0]!));
      return out;
    }
    const rows = (await chain.step([{ tokens: next, caches }], { logitsTail: next.length, ...(how === 'exact' ? { replay: true } : {}) }))[0]!;
    return next.map((_, i) => rows.slice(i * chain.vocab, (i + 1) * chain.vocab));
  }
  const bits = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('hex');

  test('gives every verified position the logits of its decode step, bit for bit, in one step', async () => {
    const prompt = tok.encode('Once upon a time, there was a little', { addBos: true });
    const next = tok.encode(' girl named Lily who', { addBos: false });
    const steps = await logitsOf(prompt, next, 'steps');
    const exact = await logitsOf(prompt, next, 'exact');
    expect(exact.map(bits)).toEqual(steps.map(bits));
    // The chunked verify sums attention in another order: the same tokens here, but not the same bits.
    const chunk = await logitsOf(prompt, next, 'chunk');
    const diff = Math.max(...chunk.map((l, i) => Math.max(...l.map((x, j) => Math.abs(x - steps[i]![j]!)))));
    console.log(`chunked verify: largest logit difference from the decode steps ${diff.toExponential(2)}`);
    expect(diff).toBeLessThan(1e-3);
  });

  test('is the default, and --speculative-verify chunk asks for the chunked one', async () => {
    const plain = await run(REPEATING, { sampling: { topLogprobs: 2 } });
    const exact = await run(REPEATING, { sampling: { topLogprobs: 2 }, speculative: { kind: 'fixed', k: 4 } });
    expect(exact.logprobs).toEqual(plain.logprobs);
    expect(exact.stats!.accepted).toBeGreaterThan(0);
    expect(withVerify({ kind: 'fixed', k: 4 }, 'chunk')).toEqual({ kind: 'fixed', k: 4, verify: 'chunk' });
    expect(withVerify({ kind: 'off' }, 'chunk')).toEqual({ kind: 'off' });
    expect(() => withVerify({ kind: 'auto' }, 'fast')).toThrow(/exact or chunk/);
  });
});

describe('speculative sampling keeps the target distribution', () => {
  test('the tokens after a drafted position are distributed as without speculation (two-sample chi-square, 400 seeds each)', async () => {
    const promptIds = tok.encode('Lily and Tom', { addBos: true });
    const greedy = await run(promptIds, { maxTokens: 4 });
    const reference = [...promptIds, ...greedy.ids];
    const sampling = { temperature: 1.5, topK: 0, topP: 1, minP: 0 };
    const counts = [new Map<string, number>(), new Map<string, number>()];
    const N = 400;
    let accepted = 0;
    for (let seed = 1; seed <= N; seed++) {
      for (const [i, speculative] of [undefined, { kind: 'fixed', k: 2 } as const].entries()) {
        // The oracle drafts the greedy continuation: often right, so both branches (accept, reject) are taken.
        const drafter = new OracleDrafter(reference, 1, chain.vocab);
        // Independent samples: the arms use different seeds (the same seed couples their draws).
        const r = await run(promptIds, { sampling: { ...sampling, seed: seed + i * N }, maxTokens: 3, ...(speculative !== undefined ? { speculative, drafter } : {}) });
        // Tokens 2 and 3 are the ones the verify step samples (token 1 comes from the prefill).
        const key = r.ids.slice(1, 3).join(',');
        counts[i]!.set(key, (counts[i]!.get(key) ?? 0) + 1);
        accepted += r.stats?.accepted ?? 0;
      }
    }
    expect(accepted).toBeGreaterThan(N / 10);
    // Categories seen at least 10 times in all; the rest pooled.
    const keys = [...new Set([...counts[0]!.keys(), ...counts[1]!.keys()])];
    const total = (k: string) => (counts[0]!.get(k) ?? 0) + (counts[1]!.get(k) ?? 0);
    const big = keys.filter((k) => total(k) >= 10);
    const cells = [...big.map((k) => [counts[0]!.get(k) ?? 0, counts[1]!.get(k) ?? 0] as const)];
    const rest = keys.filter((k) => total(k) < 10);
    cells.push([rest.reduce((a, k) => a + (counts[0]!.get(k) ?? 0), 0), rest.reduce((a, k) => a + (counts[1]!.get(k) ?? 0), 0)]);
    let chi = 0;
    for (const [a, b] of cells) if (a + b > 0) chi += (a - b) ** 2 / (a + b); // equal sample sizes
    const df = cells.filter(([a, b]) => a + b > 0).length - 1;
    expect(df).toBeGreaterThan(3);
    expect(chi).toBeLessThan(chiSquareQuantile(df, 3.09)); // p = 0.001
  }, 120_000);

  test('a seed gives the same output again with the same speculation settings', async () => {
    const sampling = { temperature: 0.8, topK: 40, topP: 0.95, seed: 42 };
    const a = await run(REPEATING, { sampling, speculative: { kind: 'fixed', k: 4 } });
    const b = await run(REPEATING, { sampling, speculative: { kind: 'fixed', k: 4 } });
    expect(b.ids).toEqual(a.ids);
    expect(a.stats!.accepted).toBeGreaterThan(0);
  });
});

describe('the draft length', () => {
  test('adapts to acceptance and cost: long when drafts are right and cheap, none when they are poor', () => {
    expect(bestDraftLength(0.95, 0.02, 8)).toBe(8);
    expect(bestDraftLength(0.6, 0.05, 8)).toBeGreaterThan(1);
    expect(bestDraftLength(0.05, 0.1, 8)).toBe(0);
    // A compute-bound step (a draft token costs as much as a plain step) never pays.
    expect(bestDraftLength(0.7, 1, 8)).toBe(0);
  });

  test('--speculative takes off, auto or a draft length', () => {
    expect(parseSpeculative('off')).toEqual({ kind: 'off' });
    expect(parseSpeculative('auto')).toEqual({ kind: 'auto' });
    expect(parseSpeculative('4')).toEqual({ kind: 'fixed', k: 4 });
    expect(() => parseSpeculative('99')).toThrow(/off, auto or a draft length/);
  });
});
