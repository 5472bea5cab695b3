// The RingGenerator in one process: the host's RingEngine (its own blocks 0-2 and the head) and one
// member running the real Stage of blocks 2-5 of stories260K, over real secure links on an
// in-memory link pair. The member's end is a few lines of the ring protocol (decode the step, run
// the stage on the request's caches, send the hidden states on); the real RingMember, with its
// assignments and weights, is covered by the ring process tests. What is tested here is the
// generator: steps in flight, and holding and resuming requests across a ring that broke.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { isKiwiError, KiwiError } from '../errors.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { createTokenizer, type Tokenizer } from '../model/tokenizer/tokenizer.js';
import { modelShapeFromGguf, type ModelShape } from '../runtime/decoder-shape.js';
import { generate } from '../runtime/generation.js';
import type { GenerateParams } from '../runtime/generation-loop.js';
import { KvBlockPool } from '../runtime/kv-pool.js';
import { DEFAULT_SAMPLING, Sampler } from '../runtime/sampling.js';
import { buildStageChain, type StageChain } from '../runtime/stage-chain.js';
import { Stage } from '../runtime/stage.js';
import type { KvCache } from '../runtime/kv-store.js';
import { createMemoryLinkPair } from '../transport/link.js';
import { openSecureLink, type SecureLink } from '../transport/secure-link.js';
import { decodeStepFrame, encodeStepFrame } from '../transport/tensor-frame.js';
import { RingEngine } from './ring-engine.js';
import { decodeRingEvent, encodeRingStep, parseStepMetadata, RingKind } from './ring-protocol.js';
import { RingGenerator } from './ring-generator.js';
import { SegmentedStage } from '../runtime/stage-segments.js';
import type { KeptStage } from '../runtime/stage-keep.js';

const PROMPTS = ['Once upon a time', 'The cat sat', 'Tom had a red ball and'];
const WIRE = { encoding: 'f32', zstd: false } as const;

let file: GgufFile;
let shape: ModelShape;
let tok: Tokenizer;
let whole: StageChain;
/** The host's first blocks in two segments, as a stage grown in place runs them (runtime/stage-segments.ts). */
let first: SegmentedStage;
let middle: Stage;
let head: Stage;
/** Each prompt's ids from the undivided model, alone. */
const alone: number[][] = [];

beforeAll(async () => {
  file = await openGguf(await testModelPath('stories260K.gguf'));
  shape = await modelShapeFromGguf(file, { maxPositions: 128 });
  tok = createTokenizer(file.metadata);
  whole = await buildStageChain(file, shape, [{ start: 0, end: shape.blockCount }], { threads: 1 });
  for (const p of PROMPTS) alone.push((await generate(whole, params(p))).ids);
  first = new SegmentedStage([
    await Stage.open(file, shape, { start: 0, end: 1, head: false }, { threads: 1 }),
    await Stage.open(file, shape, { start: 1, end: 2, head: false }, { threads: 1 }),
  ]);
  middle = await Stage.open(file, shape, { start: 2, end: shape.blockCount, head: false }, { threads: 1 });
  head = await Stage.open(file, shape, { start: shape.blockCount, end: shape.blockCount, head: true }, { threads: 1 });
}, 60_000);
afterAll(async () => {
  await Promise.all([whole?.dispose(), first?.dispose(), middle?.dispose(), head?.dispose()]);
});

function params(prompt: string, o: Partial<GenerateParams> = {}): GenerateParams {
  return {
    promptIds: tok.encode(prompt),
    maxTokens: 20,
    sampler: new Sampler(DEFAULT_SAMPLING),
    isEndOfGeneration: (id) => tok.isEndOfGeneration(id),
    decoder: tok.createStreamDecoder(),
    ...o,
  };
}

interface Ring {
  engine: RingEngine;
  /** The member's end of its link to the host. */
  member: SecureLink;
  /** Errors of the member's steps other than those of a closed link. */
  failures: unknown[];
  /** Rows of generated tokens replayed after a re-plan (runtime/replay.ts), and their tokens. */
  replayed: { rows: number; tokens: number };
}

/**
 * A ring of epoch `epoch`: the host's engine (its first blocks `o.first`) and a member that runs
 * `o.middle` on caches of its own; `o.kept`: what the previous ring's engine handed over.
 */
async function ring(epoch: number, o: { first?: SegmentedStage; middle?: Stage; kept?: KeptStage | undefined } = {}): Promise<Ring> {
  const stage = o.middle ?? middle;
  const [a, b] = createMemoryLinkPair();
  const secret = { secret: randomBytes(32), context: 'ring|generator' };
  const [hostEnd, member] = await Promise.all([openSecureLink(a, { role: 'initiator', secret }), openSecureLink(b, { role: 'responder', secret })]);
  const engine = new RingEngine({ link: (peer) => (peer === 1 ? hostEnd : undefined) }, { epoch, first: o.first ?? first, head, firstPeer: 1, lastPeer: 1, wire: WIRE, receive: { tensor: 'f32', zstd: false }, kept: o.kept });
  engine.attach(1);
  const failures: unknown[] = [];
  const replayed = { rows: 0, tokens: 0 };
  const caches = new Map<number, KvCache>();
  let queue = Promise.resolve();
  member.onMessage((bytes) => {
    const msg = bytes.slice();
    // One step at a time, in arrival order, as a member runs them.
    queue = queue
      .then(async () => {
        if (msg[0] === RingKind.EVENT) {
          const event = decodeRingEvent(msg.subarray(1));
          if (event.type === 'free') for (const id of event.ids) caches.delete(id);
          return;
        }
        const frame = await decodeStepFrame(msg.subarray(1), { maxBytes: 1 << 24, hidden: stage.shape.hidden, expect: { tensor: 'f32', zstd: false } });
        const t = frame.tensor;
        if (t.kind !== 'hidden') throw new Error('the host sent ids to a member after its own blocks');
        const [batch, seq] = t.dims;
        const { rows } = parseStepMetadata(frame.metadata, batch);
        const own = rows.map((r) => {
          if (r.pos === 0) caches.set(r.id, stage.emptyCache(r.cap));
          return caches.get(r.id)!;
        });
        const replay = rows[0]?.replay === true;
        if (replay) {
          replayed.rows++;
          replayed.tokens += seq;
        }
        const out = await stage.forward({ kind: 'hidden', hidden: t.hidden, batch, seq }, own, { replay });
        if (out.kind !== 'hidden') throw new Error('a member stage returned logits');
        member.send(encodeRingStep(await encodeStepFrame({ metadata: frame.metadata, tensor: { kind: 'hidden', hidden: out.hidden, dims: [batch, seq, stage.shape.hidden] } }, WIRE)));
      })
      .catch((err: unknown) => {
        if (!member.closed) failures.push(err);
      });
  });
  return { engine, member, failures, replayed };
}

describe('the ring generator', () => {
  test('concurrent requests with steps in flight give exactly the ids of the undivided model run alone', async () => {
    const r = await ring(1);
    const pool = new KvBlockPool(64, 16, 1);
    const gen = new RingGenerator(r.engine, pool, shape.maxPositions, { maxInFlight: 3, maxBatch: 4 });
    const results = await Promise.all(PROMPTS.map((p) => gen.generate(params(p))));
    expect(results.map((x) => x.ids)).toEqual(alone);
    expect(results.every((x) => x.finishReason === 'length')).toBe(true);
    expect(gen.live).toBe(0);
    expect(pool.freeBlocks).toBe(64);
    expect(r.failures).toEqual([]);
  });

  test('when the ring breaks mid-generation its requests are held, and on the next ring they go on bit for bit', async () => {
    const old = await ring(1);
    const pool = new KvBlockPool(64, 16, 1);
    const faults: string[] = [];
    let next: Ring | undefined;
    let resumed: Promise<number> | undefined;
    let caughtUp: Promise<{ rows: number; grew: boolean[] }> | undefined;
    // Tokens each request has streamed, and which were still generating when the ring broke.
    const counts = PROMPTS.map(() => 0);
    const gen: RingGenerator = new RingGenerator(old.engine, pool, shape.maxPositions, {
      maxInFlight: 3,
      // Every step that was in flight fails; the host re-plans once.
      onRingFault: (err) => {
        faults.push(err.code);
        resumed ??= (async () => {
          await gen.hold();
          next = await ring(2);
          const n = gen.resume(next.engine);
          const atResume = [...counts];
          caughtUp = gen.caughtUp().then(() => ({ rows: next!.replayed.rows, grew: counts.map((c, i) => c > atResume[i]! || atResume[i] === 20) }));
          return n;
        })();
      },
    });
    // The member goes away after the first request's fifth token, while the others are decoding.
    const onToken = (i: number) => (): void => {
      if (++counts[i]! === 5 && i === 0) old.member.close('member left');
    };
    const results = await Promise.all(PROMPTS.map((p, i) => gen.generate(params(p, { onToken: onToken(i) }))));
    expect(results.map((x) => x.ids)).toEqual(alone);
    expect(await resumed).toBe(PROMPTS.length);
    expect(faults.length).toBeGreaterThan(0);
    expect(faults.every((c) => c === 'RING_BROKEN')).toBe(true);
    expect(pool.freeBlocks).toBe(64);
    expect(next!.failures).toEqual([]);
    // The tokens generated before the break were replayed as one row per request (not one step each).
    expect(next!.replayed.rows).toBeGreaterThan(0);
    expect(next!.replayed.rows).toBeLessThanOrEqual(PROMPTS.length);
    expect(next!.replayed.tokens).toBeGreaterThanOrEqual(2 * next!.replayed.rows);
    // caughtUp() waited for every replay row and for each resumed request's first new token
    // (background work starts after them), and no row came later.
    expect(await caughtUp).toEqual({ rows: next!.replayed.rows, grew: PROMPTS.map(() => true) });
  });

  test('after a re-plan that grew the host\'s stage, its kept block is skipped while the requests are rebuilt, and the ids stay exact', async () => {
    // The old ring: the host runs block 0, the member 1-5. The new one: the host grows to 0-2 in
    // place (block 0's session kept, 1-2 added), the member runs 2-5 (reopened, as a moved range is).
    const s01 = await Stage.open(file, shape, { start: 0, end: 1, head: false }, { threads: 1 });
    const s12 = await Stage.open(file, shape, { start: 1, end: 2, head: false }, { threads: 1 });
    const m15 = await Stage.open(file, shape, { start: 1, end: shape.blockCount, head: false }, { threads: 1 });
    try {
      for (const keepCaches of [true, false]) {
        const before = new SegmentedStage([s01]);
        const old = await ring(1, { first: before, middle: m15 });
        const pool = new KvBlockPool(64, 16, 1);
        const forwards = { s01: vi.spyOn(s01, 'forward'), s12: vi.spyOn(s12, 'forward') };
        let resumed: Promise<void> | undefined;
        let rebuilt!: Promise<void>;
        let at = 0;
        const gen: RingGenerator = new RingGenerator(old.engine, pool, shape.maxPositions, {
          keepCaches,
          onRingFault: () => {
            resumed ??= (async () => {
              await gen.hold();
              old.engine.retire(new KiwiError('RING_REPLAN', 'the member left'));
              const next = await ring(2, { first: before.reshaped({ from: 0, to: 1 }, undefined, s12), kept: old.engine.handOver() });
              at = forwards.s01.mock.calls.length;
              forwards.s12.mockClear();
              gen.resume(next.engine);
              rebuilt = gen.caughtUp();
            })();
          },
        });
        let tokens = 0;
        // The last prompt prefills last: at its third token every request has decoded.
        const onToken = (): void => {
          if (++tokens === 3) old.member.close('member left');
        };
        const results = await Promise.all(PROMPTS.map((p, i) => gen.generate(params(p, i === PROMPTS.length - 1 ? { onToken } : {}))));
        await resumed;
        await rebuilt;
        expect(results.map((x) => x.ids)).toEqual(alone);
        expect(pool.freeBlocks).toBe(64);
        // Rebuilt rows (prompts, replays) are the calls of more than one position.
        const rebuiltRows = (calls: ReadonlyArray<Parameters<Stage['forward']>>): number => calls.filter(([input]) => input.seq > 1).length;
        expect(rebuiltRows(forwards.s12.mock.calls)).toBeGreaterThanOrEqual(PROMPTS.length);
        expect(rebuiltRows(forwards.s01.mock.calls.slice(at))).toBe(keepCaches ? 0 : rebuiltRows(forwards.s12.mock.calls));
        forwards.s01.mockRestore();
        forwards.s12.mockRestore();
      }
    } finally {
      await Promise.all([s01.dispose(), s12.dispose(), m15.dispose()]);
    }
  });

  test('a held request that is aborted ends with its reason; failWaiting ends the others and refuses new ones until resume', async () => {
    const old = await ring(1);
    const pool = new KvBlockPool(64, 16, 1);
    let held!: () => void;
    const holding = new Promise<void>((resolve) => (held = resolve));
    const gen: RingGenerator = new RingGenerator(old.engine, pool, shape.maxPositions, { onRingFault: () => void gen.hold().then(held) });
    const ac = new AbortController();
    let tokens = 0;
    const doomed = gen.generate(params(PROMPTS[0]!, { signal: ac.signal, onToken: () => ++tokens === 3 && old.member.close('member left') }));
    const other = gen.generate(params(PROMPTS[1]!));
    await holding;
    expect(gen.live).toBe(2);
    ac.abort(new Error('client went away'));
    await expect(doomed).rejects.toThrow('client went away');
    const unavailable = new KiwiError('RING_UNAVAILABLE', 'no ring could be formed');
    gen.failWaiting(unavailable);
    expect(await other.catch((e: unknown) => e)).toBe(unavailable);
    expect(await gen.generate(params(PROMPTS[2]!)).catch((e: unknown) => e)).toBe(unavailable);
    expect(gen.live).toBe(0);
    expect(pool.freeBlocks).toBe(64);
  });

  test('a request that aborts from inside its own onToken ends at once; the one decoded beside it finishes with its ids', async () => {
    const r = await ring(1);
    const pool = new KvBlockPool(64, 16, 1);
    // One step at a time: the two decode in the same steps.
    const gen = new RingGenerator(r.engine, pool, shape.maxPositions, { maxInFlight: 1 });
    const ac = new AbortController();
    let tokens = 0;
    let freeAtAbort = 0;
    const doomed = gen.generate(
      params(PROMPTS[0]!, {
        signal: ac.signal,
        onToken: () => {
          if (++tokens !== 3) return;
          ac.abort(new Error('client went away'));
          freeAtAbort = pool.freeBlocks;
        },
      }),
    );
    const other = gen.generate(params(PROMPTS[1]!));
    await expect(doomed).rejects.toThrow('client went away');
    expect((await other).ids).toEqual(alone[1]);
    expect(tokens).toBe(3);
    expect(freeAtAbort).toBe(64 - pool.blocksFor(tok.encode(PROMPTS[1]!).length + 20));
    expect(pool.freeBlocks).toBe(64);
    expect(r.failures).toEqual([]);
  });

  test('the loop asserts what its entry points check: an empty prompt is a programming error, not a KiwiError', async () => {
    const r = await ring(1);
    const gen = new RingGenerator(r.engine, new KvBlockPool(64, 16, 1), shape.maxPositions);
    const err = await gen.generate(params('', { promptIds: [] })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(isKiwiError(err)).toBe(false);
    expect(String(err)).toMatch(/prompt of 1 to 127 tokens, got 0/);
  });
});
