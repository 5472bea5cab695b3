// The prompt cache through a ring (runtime/prefix-cache.ts): a 10-turn conversation whose every
// turn resends the history streams exactly the text that one process generates without any cache,
// while each turn after the first reuses the previous turn's prompt on every stage (the host's
// /health counts the hits and tokens reused). Real processes on loopback, a random-weight model
// (where any float rounding would flip near-tied tokens), two members.
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { createTokenizer } from '../model/tokenizer/tokenizer.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import { BatchGenerator } from '../runtime/generation.js';
import { KvBlockPool } from '../runtime/kv-pool.js';
import { DEFAULT_SAMPLING, Sampler } from '../runtime/sampling.js';
import { buildStageChain } from '../runtime/stage-chain.js';
import { FaultRing, streamCompletion, synthModel } from '../test-support/fault-ring.js';
import { isolatedCacheDir, ProcessSet } from '../test-support/processes.js';

const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-prefix-ring-');
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

const TURNS = 10;
const MAX_TOKENS = 8;

/** The conversation in this process without a prompt cache: each turn's prompt ids and the text it generates. */
async function reference(model: string): Promise<Array<{ prompt: number[]; text: string }>> {
  const file = await openGguf(model);
  const tok = createTokenizer(file.metadata);
  const shape = await modelShapeFromGguf(file, { maxPositions: 512 });
  const chain = await buildStageChain(file, shape, [{ start: 0, end: shape.blockCount }], { threads: 1 });
  try {
    const gen = new BatchGenerator(chain, new KvBlockPool(64, 16, chain.kvBytesPerToken));
    const turns: Array<{ prompt: number[]; text: string }> = [];
    let prompt = tok.encode('hello world');
    for (let t = 0; t < TURNS; t++) {
      let text = '';
      const decoder = tok.createStreamDecoder();
      const r = await gen.generate({
        promptIds: prompt, maxTokens: MAX_TOKENS, sampler: new Sampler(DEFAULT_SAMPLING), isEndOfGeneration: (id) => tok.isEndOfGeneration(id),
        decoder, onToken: (_id, piece) => (text += piece),
      });
      turns.push({ prompt, text: text + decoder.flush() }); // as the API ends a stream
      prompt = [...prompt, ...r.ids, ...tok.encode(` turn ${t} says more`)];
    }
    return turns;
  } finally {
    await chain.dispose();
  }
}

describe('the prompt cache in a ring (real processes on loopback)', () => {
  it('a 10-turn conversation streams the text of no cache, reusing each previous prompt on every stage', async () => {
    const model = await synthModel(join(tempDir(), 'prefix8.gguf'), 8, 'q8_0');
    const want = await reference(model);
    const ring = await FaultRing.start(procs, {
      model, dir: tempDir(), members: [{ name: 'm1', memoryBytes: 64 * 1024 * 1024 }, { name: 'm2', memoryBytes: 64 * 1024 * 1024 }],
      hostArgs: ['--prompt-cache-mb', '16'],
    });
    const status = await ring.status();
    expect(status.stages.filter((s) => s.peer !== 0).length, 'both members hold layers').toBe(2);
    for (const [t, turn] of want.entries()) {
      const got = await streamCompletion(ring.url, { model: 'prefix8', prompt: turn.prompt, maxTokens: MAX_TOKENS });
      expect(got.error, ring.logs()).toBeUndefined();
      expect({ turn: t, text: got.text }, ring.logs()).toEqual({ turn: t, text: turn.text });
    }
    const health = (await (await fetch(`${new URL(ring.url).origin}/health`)).json()) as { prompt_cache?: Record<string, number> };
    const reused = want.slice(0, -1).reduce((a, turn) => a + turn.prompt.length, 0);
    expect(health.prompt_cache, JSON.stringify(health)).toMatchObject({ hits: TURNS - 1, misses: 1, tokens_reused: reused, entries: 1 });
    // Every stage held the entries it was asked to seed from: no step failed, nothing was recomputed.
    expect((await ring.status()).recoveries ?? [], ring.logs()).toEqual([]);
    for (const m of ['m1', 'm2']) expect(ring.member(m).events.filter((e) => e.event === 'error'), m).toEqual([]);
    expect(ring.hostEvents('error')).toEqual([]);
  }, 180_000);
});
