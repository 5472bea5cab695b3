// How much a stage's forward passes hold up the event loop (heartbeats, ring links, HTTP streams
// live on it), with the onnxruntime session on a worker thread (the default) vs in-thread
// (KIWI_STAGE_WORKER=0), and what the worker costs in speed. A `kiwi synth` GGUF of Llama-3.2-1B
// shape cut to a few layers (Q4_0), one stage with the embedding and the head. Per mode: prefill
// time, decode tokens/s (unwatched runs), and the event loop's delay (perf_hooks.monitorEventLoopDelay,
// max and p99) plus how many of a 10 ms heartbeat timer's ticks fired, during prefill and decode.
// Rounds alternate which mode goes first, so a noisy neighbour hits both alike.
// Run: npx tsx bench/event-loop.ts
// Env: KIWI_EL_LAYERS (default 4), KIWI_EL_PROMPT (prefill tokens, default 128), KIWI_EL_DECODE
//      (decode tokens, default 32), KIWI_EL_ROUNDS (default 3), KIWI_EL_PAIRED (alternating single
//      decode steps, default 64), KIWI_EL_THREADS (default all cores),
//      KIWI_PROF_DIR (model and shard cache, kept between runs).
// Prints a table and writes bench/results/event-loop.json.
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { NAMED_SHAPES, resolveShape } from '../electron/engine/model/synth/shapes.js';
import { SYNTH_QUANTS, synthesizeModel } from '../electron/engine/model/synth/synth.js';
import { modelShapeFromGguf } from '../electron/engine/runtime/decoder-shape.js';
import { ShardCache } from '../electron/engine/runtime/shard-cache.js';
import { Stage } from '../electron/engine/runtime/stage.js';

const LAYERS = Number(process.env.KIWI_EL_LAYERS ?? 4);
const PROMPT = Number(process.env.KIWI_EL_PROMPT ?? 128);
const DECODE = Number(process.env.KIWI_EL_DECODE ?? 32);
const ROUNDS = Number(process.env.KIWI_EL_ROUNDS ?? 3);
const THREADS = Number(process.env.KIWI_EL_THREADS ?? os.availableParallelism());
const PAIRED_STEPS = Number(process.env.KIWI_EL_PAIRED ?? 64);
const HEARTBEAT_MS = 10;
const MODES = ['worker', 'in-thread'] as const;
type Mode = (typeof MODES)[number];

interface Phase {
  ms: number;
  /** Event-loop delay while the phase ran (monitorEventLoopDelay, 1 ms resolution). */
  loopMaxMs: number;
  loopP99Ms: number;
  /** Ticks of a HEARTBEAT_MS interval timer that fired, and how many a free loop would fire. */
  heartbeats: number;
  heartbeatsExpected: number;
}

interface Round {
  prefill: Phase;
  decode: Phase & { tokPerS: number };
  /** Decode with no timers watching: the monitors' own wake-ups take CPU from the worker's run
   * (the in-thread loop is blocked, so they cost it nothing), which would bias the speed. */
  cleanDecodeTokPerS: number;
  cleanPrefillMs: number;
}

async function measured(work: () => Promise<void>): Promise<Phase> {
  const h = monitorEventLoopDelay({ resolution: 1 });
  let heartbeats = 0;
  const timer = setInterval(() => heartbeats++, HEARTBEAT_MS);
  h.enable();
  // The histogram's first timer callback only starts its clock: let it fire before the work.
  await new Promise((resolve) => setTimeout(resolve, 3));
  const t0 = performance.now();
  await work();
  const ms = performance.now() - t0;
  // A loop blocked until the work ended records that delay only when its timer next fires.
  await new Promise((resolve) => setTimeout(resolve, 5));
  h.disable();
  clearInterval(timer);
  return { ms, loopMaxMs: h.max / 1e6, loopP99Ms: h.percentile(99) / 1e6, heartbeats, heartbeatsExpected: Math.floor(ms / HEARTBEAT_MS) };
}

const ids = (xs: number[]) => ({ kind: 'ids' as const, ids: BigInt64Array.from(xs.map(BigInt)), batch: 1, seq: xs.length });

const promptIds = Array.from({ length: PROMPT }, (_, i) => 1000 + ((i * 7919) % 20000));

async function round(stage: Stage): Promise<Round> {
  const cache = stage.emptyCache(PROMPT + DECODE);
  const prefill = await measured(() => stage.forward(ids(promptIds), [cache]).then(() => undefined));
  const decode = await measured(async () => {
    for (let i = 0; i < DECODE; i++) await stage.forward(ids([2000 + i]), [cache]);
  });
  const clean = stage.emptyCache(PROMPT + DECODE);
  const t0 = performance.now();
  await stage.forward(ids(promptIds), [clean]);
  const t1 = performance.now();
  for (let i = 0; i < DECODE; i++) await stage.forward(ids([2000 + i]), [clean]);
  const t2 = performance.now();
  return { prefill, decode: { ...decode, tokPerS: (DECODE * 1000) / decode.ms }, cleanPrefillMs: t1 - t0, cleanDecodeTokPerS: (DECODE * 1000) / (t2 - t1) };
}

const dir = process.env.KIWI_PROF_DIR ?? join(os.tmpdir(), 'kiwi-prof');
await mkdir(dir, { recursive: true });
const modelPath = join(dir, `llama-3.2-1b-${LAYERS}l-q4_0.gguf`);
const synthShape = { ...NAMED_SHAPES['llama-3.2-1b']!, name: `Llama-3.2-1B, ${LAYERS} layers (synthetic)`, blockCount: LAYERS };
if (!existsSync(modelPath)) await synthesizeModel({ shape: resolveShape(JSON.stringify(synthShape)), quant: SYNTH_QUANTS.q4_0!, out: modelPath, seed: 1 });
const file = await openGguf(modelPath);
const shape = await modelShapeFromGguf(file, { maxPositions: PROMPT + Math.max(DECODE, PAIRED_STEPS) });
const cache = new ShardCache(join(dir, 'shards-event-loop'));
const plan = { start: 0, end: shape.blockCount, head: true };
const stages = {} as Record<Mode, Stage>;
for (const mode of MODES) stages[mode] = await Stage.open(file, shape, plan, { cache, threads: THREADS, accuracyLevel: 4, worker: mode === 'worker' });

const results: Record<Mode, Round[]> = { worker: [], 'in-thread': [] };
for (let r = 0; r < ROUNDS; r++) {
  for (const mode of r % 2 === 0 ? MODES : [...MODES].reverse()) results[mode].push(await round(stages[mode]));
}
// Single decode steps alternating between the modes, so that load changes hit both alike: the
// cost of the worker hop shows in the paired medians even on a busy machine.
const stepMs: Record<Mode, number[]> = { worker: [], 'in-thread': [] };
{
  const caches = Object.fromEntries(MODES.map((m) => [m, stages[m].emptyCache(PROMPT + PAIRED_STEPS)])) as Record<Mode, ReturnType<Stage['emptyCache']>>;
  for (const mode of MODES) await stages[mode].forward(ids(promptIds), [caches[mode]]);
  for (let i = 0; i < PAIRED_STEPS; i++) {
    for (const mode of i % 2 === 0 ? MODES : [...MODES].reverse()) {
      const t0 = performance.now();
      await stages[mode].forward(ids([3000 + i]), [caches[mode]]);
      stepMs[mode].push(performance.now() - t0);
    }
  }
}
for (const mode of MODES) await stages[mode].dispose();

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const summary = Object.fromEntries(
  MODES.map((mode): [Mode, Record<string, number | string>] => {
    const rs = results[mode];
    return [
      mode,
      {
        pairedStepMs: median(stepMs[mode]),
        prefillMs: median(rs.map((r) => r.cleanPrefillMs)),
        decodeTokPerS: median(rs.map((r) => r.cleanDecodeTokPerS)),
        watchedDecodeTokPerS: median(rs.map((r) => r.decode.tokPerS)),
        prefillLoopMaxMs: Math.max(...rs.map((r) => r.prefill.loopMaxMs)),
        prefillLoopP99Ms: median(rs.map((r) => r.prefill.loopP99Ms)),
        decodeLoopMaxMs: Math.max(...rs.map((r) => r.decode.loopMaxMs)),
        decodeLoopP99Ms: median(rs.map((r) => r.decode.loopP99Ms)),
        prefillHeartbeats: `${median(rs.map((r) => r.prefill.heartbeats))}/${median(rs.map((r) => r.prefill.heartbeatsExpected))}`,
        decodeHeartbeats: `${median(rs.map((r) => r.decode.heartbeats))}/${median(rs.map((r) => r.decode.heartbeatsExpected))}`,
      },
    ];
  }),
) as Record<Mode, Record<string, number | string>>;

console.log(`${synthShape.name} Q4_0, stage 0-${LAYERS}+head, ${THREADS} threads, prompt ${PROMPT}, decode ${DECODE}, ${ROUNDS} alternating rounds, load ${os.loadavg()[0]!.toFixed(2)}`);
console.log('(prefill/decode: median over rounds, unwatched runs; watched decode: while the loop monitors ran; loop max: worst round;');
console.log(' loop p99: median; heartbeats: 10 ms ticks fired/expected; paired step: median of single decode steps alternating between modes)');
const cols = ['pairedStepMs', 'prefillMs', 'decodeTokPerS', 'watchedDecodeTokPerS', 'prefillLoopMaxMs', 'prefillLoopP99Ms', 'decodeLoopMaxMs', 'decodeLoopP99Ms', 'prefillHeartbeats', 'decodeHeartbeats'];
console.log(['mode', ...cols].join('\t'));
for (const mode of MODES) console.log([mode, ...cols.map((c) => { const v = summary[mode][c]!; return typeof v === 'number' ? v.toFixed(1) : v; })].join('\t'));

const out = join(fileURLToPath(new URL('.', import.meta.url)), 'results');
await mkdir(out, { recursive: true });
await writeFile(
  join(out, 'event-loop.json'),
  `${JSON.stringify({ date: new Date().toISOString(), loadavg: os.loadavg(), shape: synthShape.name, layers: LAYERS, quant: 'q4_0', threads: THREADS, prompt: PROMPT, decode: DECODE, rounds: ROUNDS, heartbeatMs: HEARTBEAT_MS, pairedSteps: PAIRED_STEPS, summary, results, stepMs }, null, 1)}\n`,
);
