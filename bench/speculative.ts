// Speculative decoding through a 3-stage ring (issue 16): the host (embedding, block 0 and the head)
// and two member stages (blocks 1-2, 3-4) of stories260K, every link delayed `delay` ms one way.
// The ring runs in this one process (the oracle drafter has to live in the host's loop): the host's
// real RingEngine + RingGenerator, and members that check each step with the members' own
// checkStepInput (which rolls rejected drafts back) and run a real Stage, each stage on its own
// onnxruntime worker thread, over real secure links whose transport delays every message by
// `delay` ms (what test-support/delay-proxy.ts does to TCP between processes).
//   (a) the mechanism: drafts from an oracle (the greedy continuation of an earlier run), each
//       token right with probability p = 1, 0.8, 0.5, k = 4 (and the adaptive k at 0.5 and 0.1);
//   (b) the real drafter: prompt lookup on a prompt that repeats text, and on free generation,
//       adaptive k and k = 4;
//   (c) a draft model on the host (--draft-model): stories260K as its own draft model, and its first
//       block with the head (a weaker, cheaper draft of the same vocabulary), on free generation.
// Every row: decode tokens/s, its ratio to no speculation (measured in the same round), acceptance,
// and whether the text is the same as without speculation at temperature 0. Drafts are verified
// exactly (the default: each position as its decode step); rows marked `chunk` verify as one chunk.
// Knobs: KIWI_BENCH_TOKENS (96), KIWI_BENCH_DELAYS (20,0), KIWI_BENCH_ROUNDS (3; the median is reported).
// Run: npx tsx bench/speculative.ts   Prints tables and writes bench/results/speculative.json.
import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { median } from '../electron/engine/median.js';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { testModelPath } from '../electron/engine/model/test-models.js';
import { createTokenizer } from '../electron/engine/model/tokenizer/tokenizer.js';
import { RingEngine } from '../electron/engine/pipeline/ring-engine.js';
import { RingGenerator } from '../electron/engine/pipeline/ring-generator.js';
import { encodeRingEvent, encodeRingStep, type Assign } from '../electron/engine/pipeline/ring-protocol.js';
import { checkStepInput } from '../electron/engine/pipeline/ring-step-input.js';
import { modelShapeFromGguf } from '../electron/engine/runtime/decoder-shape.js';
import { KvBlockPool } from '../electron/engine/runtime/kv-pool.js';
import type { Drafter } from '../electron/engine/runtime/prompt-lookup.js';
import { DraftModelDrafter, openDraftModel } from '../electron/engine/runtime/draft-model.js';
import { buildStageChain } from '../electron/engine/runtime/stage-chain.js';
import { DEFAULT_SAMPLING, Sampler } from '../electron/engine/runtime/sampling.js';
import type { SpeculativeMode } from '../electron/engine/runtime/speculative.js';
import { Stage } from '../electron/engine/runtime/stage.js';
import { SegmentedStage } from '../electron/engine/runtime/stage-segments.js';
import type { KvCache } from '../electron/engine/runtime/kv-store.js';
import { OracleDrafter } from '../electron/engine/runtime/test-support/oracle-drafter.js';
import { createMemoryLinkPair, type Link } from '../electron/engine/transport/link.js';
import { openSecureLink, type SecureLink } from '../electron/engine/transport/secure-link.js';
import { encodeStepFrame } from '../electron/engine/transport/tensor-frame.js';

const TOKENS = Number(process.env.KIWI_BENCH_TOKENS ?? 96);
const DELAYS = (process.env.KIWI_BENCH_DELAYS ?? '20,0').split(',').filter((d) => d !== '').map(Number);
const ROUNDS = Number(process.env.KIWI_BENCH_ROUNDS ?? 3);
const WIRE = { encoding: 'f32', zstd: false } as const;
const CONTEXT = 512;
const REPEATING = 'Once upon a time, there was a little girl named Lily. She liked to play outside in the sun. One day, she saw a big red ball. Once upon a time, there was a little girl named Lily. She liked to play outside';
const FREE = 'Once upon a time';

/** A link whose every message arrives `ms` later (order kept). */
function delayed(link: Link, ms: number): Link {
  if (ms <= 0) return link;
  return {
    get kind() { return link.kind; },
    get closed() { return link.closed; },
    send: (bytes) => void setTimeout(() => { if (!link.closed) link.send(bytes); }, ms),
    onData: (l) => link.onData(l),
    onClose: (l) => link.onClose(l),
    close: (r) => link.close(r),
  };
}

async function securePair(delayMs: number, context: string): Promise<[SecureLink, SecureLink]> {
  const [a, b] = createMemoryLinkPair();
  const secret = { secret: randomBytes(32), context };
  return Promise.all([openSecureLink(delayed(a, delayMs), { role: 'initiator', secret }), openSecureLink(delayed(b, delayMs), { role: 'responder', secret })]);
}

/** A member: every message from `prev` is checked (checkStepInput, which rolls rejected drafts back), run on `stage` and sent to `next`. */
function member(a: Assign, one: Stage, prev: SecureLink, next: SecureLink): void {
  const stage = new SegmentedStage([one]);
  const caches = new Map<number, KvCache[]>();
  let queue = Promise.resolve();
  prev.onMessage((bytes) => {
    const msg = bytes.slice();
    queue = queue.then(async () => {
      const input = await checkStepInput(a, stage, caches, msg);
      if (input === undefined) return;
      if (input.kind === 'event') return next.send(encodeRingEvent(input.event));
      const t = input.frame.tensor;
      if (t.kind !== 'hidden') throw new Error('ids reached a member');
      const out = await stage.forward({ kind: 'hidden', hidden: t.hidden, batch: input.batch, seq: input.seq }, input.caches);
      if (out.kind !== 'hidden') throw new Error('a member returned logits');
      next.send(encodeRingStep(await encodeStepFrame({ metadata: input.frame.metadata, tensor: { kind: 'hidden', hidden: out.hidden, dims: [input.batch, input.seq, stage.shape.hidden] } }, WIRE)));
    }).catch((err: unknown) => console.error('member step failed:', err));
  });
}

interface Row {
  part: 'a' | 'b' | 'c';
  delay_ms: number;
  name: string;
  speculative: string;
  tokens_per_s: number;
  vs_none: number;
  acceptance: number | null;
  tokens_per_verify_step: number | null;
  same_text: boolean;
  rounds: number[];
}

async function main(): Promise<void> {
  const path = await testModelPath('stories260K.gguf');
  const file = await openGguf(path);
  const shape = await modelShapeFromGguf(file, { maxPositions: CONTEXT });
  const tok = createTokenizer(file.metadata);
  const n = shape.blockCount;
  const opts = { threads: 1 };
  const first = new SegmentedStage([await Stage.open(file, shape, { start: 0, end: 1, head: false }, opts)]);
  const head = await Stage.open(file, shape, { start: n, end: n, head: true }, opts);
  const m1 = await Stage.open(file, shape, { start: 1, end: 3, head: false }, opts);
  const m2 = await Stage.open(file, shape, { start: 3, end: n, head: false }, opts);
  const assign = (start: number, end: number, prev: number, next: number): Assign => ({
    kind: 'assign', epoch: 1, start, end, prev, next, encoding: 'f32', zstd: false, receive: { tensor: 'f32', zstd: false },
    model: { fingerprint: '0'.repeat(64), name: 'stories260K', fileBytes: 1 }, maxPositions: CONTEXT,
  });
  const rows: Row[] = [];

  for (const delay of DELAYS) {
    // host -> m1 -> m2 -> host, every link delayed one way.
    const [hostToM1, m1FromHost] = await securePair(delay, 'bench|h-m1');
    const [m1ToM2, m2FromM1] = await securePair(delay, 'bench|m1-m2');
    const [m2ToHost, hostFromM2] = await securePair(delay, 'bench|m2-h');
    member(assign(1, 3, 0, 2), m1, m1FromHost, m1ToM2);
    member(assign(3, n, 1, 0), m2, m2FromM1, m2ToHost);
    const links = { link: (peer: number) => (peer === 1 ? hostToM1 : peer === 2 ? hostFromM2 : undefined) };
    const engine = new RingEngine(links, { epoch: 1, first, head, firstPeer: 1, lastPeer: 2, wire: WIRE, receive: { tensor: 'f32', zstd: false } });

    const generateOnce = async (prompt: string, mode: SpeculativeMode, drafter?: Drafter) => {
      const gen = new RingGenerator(engine, new KvBlockPool(8, CONTEXT, 1), CONTEXT, { maxInFlight: 3, speculative: mode, ...(drafter !== undefined ? { drafter } : {}) });
      const promptIds = tok.encode(prompt, { addBos: true });
      const res = await gen.generate({ promptIds, maxTokens: TOKENS, sampler: new Sampler(DEFAULT_SAMPLING), isEndOfGeneration: () => false });
      const tps = ((res.ids.length - 1) / res.decodeMs) * 1000;
      return { ids: res.ids, promptIds, tps, stats: gen.speculation?.stats() };
    };
    // Each round runs the row's baseline (no speculation) and then the row: the ratio is taken per
    // round, so the load of a shared machine falls on both alike; medians over the rounds.
    const measure = async (part: 'a' | 'b' | 'c', name: string, prompt: string, mode: SpeculativeMode, drafterOf?: (reference: number[]) => Drafter) => {
      const rounds: number[] = [];
      const ratios: number[] = [];
      let last: Awaited<ReturnType<typeof generateOnce>> | undefined;
      let plain: Awaited<ReturnType<typeof generateOnce>> | undefined;
      for (let r = 0; r < ROUNDS; r++) {
        plain = await generateOnce(prompt, { kind: 'off' });
        last = mode.kind === 'off' ? plain : await generateOnce(prompt, mode, drafterOf?.([...plain.promptIds, ...plain.ids]));
        rounds.push(last.tps);
        ratios.push(last.tps / plain.tps);
      }
      const tps = median(rounds);
      const s = last!.stats;
      const row: Row = {
        part, delay_ms: delay, name, speculative: `${mode.kind === 'fixed' ? `k=${mode.k}` : mode.kind}${mode.kind !== 'off' && mode.verify === 'chunk' ? ' chunk' : ''}`, tokens_per_s: tps, vs_none: median(ratios),
        acceptance: s?.acceptance ?? null, tokens_per_verify_step: s?.tokensPerVerifyStep ?? null,
        same_text: JSON.stringify(last!.ids) === JSON.stringify(plain!.ids), rounds,
      };
      rows.push(row);
      console.error(`${delay} ms  ${name.padEnd(34)} ${row.speculative.padEnd(5)} ${tps.toFixed(1).padStart(7)} tok/s  x${row.vs_none.toFixed(2)}  acceptance ${row.acceptance?.toFixed(2) ?? '-'}  same ${row.same_text}`);
    };

    const vocab = shape.vocab;
    await measure('a', 'no speculation (free generation)', FREE, { kind: 'off' });
    for (const p of [1, 0.8, 0.5]) await measure('a', `oracle p=${p}`, FREE, { kind: 'fixed', k: 4 }, (ref) => new OracleDrafter(ref, p, vocab, 3));
    await measure('a', 'oracle p=1', FREE, { kind: 'fixed', k: 4, verify: 'chunk' }, (ref) => new OracleDrafter(ref, 1, vocab, 3));
    for (const p of [0.5, 0.1]) await measure('a', `oracle p=${p}`, FREE, { kind: 'auto' }, (ref) => new OracleDrafter(ref, p, vocab, 3));
    await measure('b', 'no speculation (repeating prompt)', REPEATING, { kind: 'off' });
    for (const mode of [{ kind: 'auto' }, { kind: 'fixed', k: 4 }] as const) await measure('b', 'prompt lookup, repeating prompt', REPEATING, mode);
    for (const mode of [{ kind: 'auto' }, { kind: 'fixed', k: 4 }] as const) await measure('b', 'prompt lookup, free generation', FREE, mode);
    const selfDraft = await openDraftModel(path, tok, { ...opts, maxPositions: CONTEXT });
    const firstBlock = new DraftModelDrafter(await buildStageChain(file, { ...shape, blockCount: 1 }, [{ start: 0, end: 1 }], opts), 0);
    for (const [name, drafter] of [['draft model: itself', selfDraft], ['draft model: its first block', firstBlock]] as const) {
      for (const mode of [{ kind: 'auto' }, { kind: 'fixed', k: 4 }, { kind: 'auto', verify: 'chunk' }] as const) await measure('c', `${name}, free generation`, FREE, mode, () => drafter);
    }
    await Promise.all([selfDraft.dispose(), firstBlock.dispose()]);
    engine.retire(new (await import('../electron/engine/errors.js')).KiwiError('RING_REPLAN', 'benchmark over'));
    for (const l of [hostToM1, m1FromHost, m1ToM2, m2FromM1, m2ToHost, hostFromM2]) l.close('benchmark over');
  }
  await Promise.all([first.dispose(), head.dispose(), m1.dispose(), m2.dispose()]);

  const table = ['| delay (one way) | part | drafts | speculative | tokens/s | vs none | acceptance | tokens/verify step | same text (T=0) |', '|---|---|---|---|---|---|---|---|---|'];
  for (const r of rows) {
    table.push(`| ${r.delay_ms} ms | ${r.part} | ${r.name} | ${r.speculative} | ${r.tokens_per_s.toFixed(1)} | ${r.vs_none.toFixed(2)}x | ${r.acceptance?.toFixed(2) ?? '-'} | ${r.tokens_per_verify_step?.toFixed(2) ?? '-'} | ${r.same_text ? 'yes' : 'NO'} |`);
  }
  console.log(table.join('\n'));
  const out = join(import.meta.dirname, 'results');
  await mkdir(out, { recursive: true });
  await writeFile(join(out, 'speculative.json'), JSON.stringify({
    model: 'stories260K', ring: '3 stages in one process: host [0,1)+head, members [1,3) and [3,5); f32 links', tokens: TOKENS, rounds: ROUNDS,
    measured: new Date().toISOString(), rows,
  }, null, 2) + '\n');
}

await main();
