// The replay after a re-plan (issue 15, runtime/replay.ts): rebuilding the KV caches of n generated
// tokens, on a random-weight Llama-3.2-1B Q4_0 (`kiwi synth`, kept in $TMPDIR/kiwi-bench-replay, or
// KIWI_BENCH_MODEL), one stage of the whole model in one process, accuracy level 4. For n = 60 and
// 500 after a 32-token prompt, side by side in each round:
//   - steps:    n decode steps, one token each (what recovery ran before; a ring adds a trip per token);
//   - replay:   one replay row of n tokens (the one-pass replay, exact);
//   - prefill:  one prefill of the same n tokens (the cost to match; not exact);
// and checks that the replay's next-token logits equal the steps' bit for bit. It also times plain
// decode steps of a graph with and without the replay inputs (their cost in every step).
//   KIWI_BENCH_THREADS (1), KIWI_BENCH_ROUNDS (1), KIWI_BENCH_TOKENS (60,500).
// Run: npx tsx bench/replay.ts   Prints a table and writes bench/results/replay.json.
import { mkdir, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { modelShapeFromGguf } from '../electron/engine/runtime/decoder-shape.js';
import { buildStageChain, type StageChain } from '../electron/engine/runtime/stage-chain.js';
import { repoRoot } from '../electron/engine/test-support/processes.js';
import { benchModel } from './bench-model.js';

const THREADS = Number(process.env.KIWI_BENCH_THREADS ?? 1);
const ROUNDS = Number(process.env.KIWI_BENCH_ROUNDS ?? 1);
const TOKENS = (process.env.KIWI_BENCH_TOKENS ?? '60,500').split(',').map(Number);
const PROMPT = Array.from({ length: 32 }, (_, i) => 1 + ((i * 7919) % 5000));
const CONTEXT = 1024;

const timed = async (f: () => Promise<unknown>): Promise<number> => {
  const t0 = performance.now();
  await f();
  return performance.now() - t0;
};

interface Row {
  tokens: number;
  round: number;
  stepsMs: number;
  replayMs: number;
  prefillMs: number;
  identical: boolean;
}

async function measure(chain: StageChain, n: number, round: number): Promise<Row> {
  const tokens = Array.from({ length: n }, (_, i) => 1 + ((i * 104729 + round) % 100_000));
  const next = async (caches: ReturnType<StageChain['newCaches']>): Promise<Float32Array> => Float32Array.from((await chain.step([{ tokens: [11], caches }]))[0]!);
  const a = chain.newCaches(CONTEXT);
  await chain.step([{ tokens: PROMPT, caches: a }]);
  const stepsMs = await timed(async () => {
    for (const t of tokens) await chain.step([{ tokens: [t], caches: a }]);
  });
  const b = chain.newCaches(CONTEXT);
  await chain.step([{ tokens: PROMPT, caches: b }]);
  const replayMs = await timed(() => chain.step([{ tokens, caches: b }], { replay: true }));
  const c = chain.newCaches(CONTEXT);
  await chain.step([{ tokens: PROMPT, caches: c }]);
  const prefillMs = await timed(() => chain.step([{ tokens, caches: c }]));
  const [la, lb] = [await next(a), await next(b)];
  return { tokens: n, round, stepsMs, replayMs, prefillMs, identical: la.length === lb.length && la.every((v, i) => v === lb[i]) };
}

/** Median ms of `n` plain decode steps, alternating the two chains. */
async function plainSteps(withInputs: StageChain, without: StageChain, n: number): Promise<{ withMs: number; withoutMs: number }> {
  const cw = withInputs.newCaches(CONTEXT);
  const co = without.newCaches(CONTEXT);
  await withInputs.step([{ tokens: PROMPT, caches: cw }]);
  await without.step([{ tokens: PROMPT, caches: co }]);
  const w: number[] = [];
  const o: number[] = [];
  for (let i = 0; i < n; i++) {
    w.push(await timed(() => withInputs.step([{ tokens: [5 + i], caches: cw }])));
    o.push(await timed(() => without.step([{ tokens: [5 + i], caches: co }])));
  }
  const median = (x: number[]): number => [...x].sort((p, q) => p - q)[Math.floor(x.length / 2)]!;
  return { withMs: median(w), withoutMs: median(o) };
}

async function main(): Promise<void> {
  const file = await openGguf(await benchModel());
  const shape = await modelShapeFromGguf(file, { maxPositions: CONTEXT });
  const whole = [{ start: 0, end: shape.blockCount }];
  const chain = await buildStageChain(file, shape, whole, { threads: THREADS, accuracyLevel: 4, replayInputs: true });
  const rows: Row[] = [];
  const load = [loadavg()[0]!];
  try {
    if (!chain.replays) throw new Error('the stage graph has no replay inputs');
    for (let r = 0; r < ROUNDS; r++) for (const n of TOKENS) rows.push(await measure(chain, n, r));
  } finally {
    await chain.dispose();
  }
  const bare = await buildStageChain(file, shape, whole, { threads: THREADS, accuracyLevel: 4, replayInputs: false });
  const withInputs = await buildStageChain(file, shape, whole, { threads: THREADS, accuracyLevel: 4, replayInputs: true });
  let plain: { withMs: number; withoutMs: number };
  try {
    plain = await plainSteps(withInputs, bare, 40);
  } finally {
    await bare.dispose();
    await withInputs.dispose();
  }
  load.push(loadavg()[0]!);
  console.log(`\n1B Q4_0 synth, one stage, ${THREADS} thread(s), accuracy level 4, prompt ${PROMPT.length} tokens, load ${load.map((l) => l.toFixed(1)).join(' -> ')}\n`);
  console.log('| tokens | decode steps s | one-pass replay s | one prefill s | replay / prefill | steps / replay | replay logits = steps |');
  console.log('|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(`| ${r.tokens} | ${(r.stepsMs / 1000).toFixed(2)} | ${(r.replayMs / 1000).toFixed(2)} | ${(r.prefillMs / 1000).toFixed(2)} | ${(r.replayMs / r.prefillMs).toFixed(2)}x | ${(r.stepsMs / r.replayMs).toFixed(1)}x | ${r.identical ? 'yes' : 'NO'} |`);
  }
  console.log(`\nplain decode step (median of 40, alternating): with replay inputs ${plain.withMs.toFixed(1)} ms, without ${plain.withoutMs.toFixed(1)} ms`);
  await mkdir(join(repoRoot, 'bench', 'results'), { recursive: true });
  const out = join(repoRoot, 'bench', 'results', 'replay.json');
  await writeFile(out, JSON.stringify({ model: 'llama-3.2-1b q4_0 synth', threads: THREADS, accuracyLevel: 4, promptTokens: PROMPT.length, load, rows, plainDecodeStepMs: plain }, null, 2));
  console.log(`wrote ${out}`);
}

void main();
