// What a cut costs a ring stage per step (issue 15): a stage opened in segments (runtime/stage-
// segments.ts; pipeline/fault-cuts.ts cuts fresh stages where a likely re-plan would, so that it
// reshapes instead of reopening) runs each segment's session in turn, one more hop to a session's
// thread per segment. The same layers are opened as one session and as three (two cuts, the most
// fault-cuts makes), as a member opens them (worker thread, replay inputs), and timed side by side
// in alternating rounds: decode steps (one token, after a 32-token prefill) and a 32-token prefill.
// The difference per cut is what CUT_MIN_BYTES is set against; the outputs must be identical.
//   KIWI_BENCH_MODEL (default: a `kiwi synth` Llama-3.2-1B Q4_0, bench-model.ts),
//   KIWI_BENCH_LAYERS (default 9: layers 1-10), KIWI_BENCH_THREADS (2), KIWI_BENCH_ROUNDS (5),
//   KIWI_BENCH_STEPS (48 decode steps a round).
// Run: npx tsx bench/segments.ts   Prints a table and writes bench/results/segments.json.
import { mkdir, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { basename, join } from 'node:path';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { modelShapeFromGguf } from '../electron/engine/runtime/decoder-shape.js';
import { median } from '../electron/engine/median.js';
import { freeCache } from '../electron/engine/runtime/kv-store.js';
import { Stage } from '../electron/engine/runtime/stage.js';
import { SegmentedStage, splitAt, type SegmentCaches } from '../electron/engine/runtime/stage-segments.js';
import { benchModel } from './bench-model.js';

const THREADS = Number(process.env.KIWI_BENCH_THREADS ?? 2);
const ROUNDS = Number(process.env.KIWI_BENCH_ROUNDS ?? 5);
const STEPS = Number(process.env.KIWI_BENCH_STEPS ?? 48);
const LAYERS = Number(process.env.KIWI_BENCH_LAYERS ?? 9);
const PREFILL = 32;

const path = await benchModel();
const file = await openGguf(path);
const shape = await modelShapeFromGguf(file);
const range = { start: 1, end: Math.min(shape.blockCount, 1 + LAYERS) };
const third = Math.max(1, Math.floor((range.end - range.start) / 3));
const cuts = [range.start + third, range.start + 2 * third].filter((c) => c > range.start && c < range.end);
const open = async (parts: number[]): Promise<SegmentedStage> => {
  const stages: Stage[] = [];
  for (const r of splitAt(range, parts)) stages.push(await Stage.open(file, shape, { ...r, head: false }, { threads: THREADS, replayInputs: true }));
  return new SegmentedStage(stages);
};
const variants = [
  { name: '1 segment', stage: await open([]) },
  { name: `${cuts.length + 1} segments (cut at ${cuts.join(', ')})`, stage: await open(cuts) },
];

const rowsOf = (n: number, seed: number): Float32Array => Float32Array.from({ length: n * shape.hidden }, (_, i) => Math.sin(seed + i * 0.37));
const hiddenOf = (out: Awaited<ReturnType<SegmentedStage['forward']>>): Float32Array => {
  if (out.kind !== 'hidden') throw new Error('a member stage returned logits');
  return out.hidden;
};

/** One round of a variant: a prefill of PREFILL positions, then STEPS decode steps; ms each, and the last output. */
async function round(stage: SegmentedStage): Promise<{ prefillMs: number; stepMs: number[]; last: Float32Array }> {
  const caches: SegmentCaches = stage.emptyCache(PREFILL + STEPS + 1);
  try {
    let t0 = performance.now();
    await stage.forward({ kind: 'hidden', hidden: rowsOf(PREFILL, 1), batch: 1, seq: PREFILL }, [caches]);
    const prefillMs = performance.now() - t0;
    const stepMs: number[] = [];
    let last = new Float32Array();
    for (let s = 0; s < STEPS; s++) {
      t0 = performance.now();
      last = Float32Array.from(hiddenOf(await stage.forward({ kind: 'hidden', hidden: rowsOf(1, 100 + s), batch: 1, seq: 1 }, [caches])));
      stepMs.push(performance.now() - t0);
    }
    return { prefillMs, stepMs, last };
  } finally {
    for (const c of caches) freeCache(c);
  }
}

console.log(`${basename(path)}: layers ${range.start}-${range.end}, ${THREADS} threads, ${ROUNDS} alternating rounds of a ${PREFILL}-token prefill and ${STEPS} decode steps (load ${loadavg()[0]!.toFixed(1)})`);
const results = variants.map((v) => ({ name: v.name, segments: v.stage.segments.length, stepMs: [] as number[], prefillMs: [] as number[], roundStepMs: [] as number[] }));
let identical = true;
for (let r = 0; r < ROUNDS; r++) {
  // Alternate which goes first, so neither always runs on a warmer machine.
  const order = r % 2 === 0 ? [0, 1] : [1, 0];
  const lasts: Float32Array[] = [];
  for (const i of order) {
    const got = await round(variants[i]!.stage);
    results[i]!.stepMs.push(...got.stepMs);
    results[i]!.prefillMs.push(got.prefillMs);
    results[i]!.roundStepMs.push(median(got.stepMs));
    lasts[i] = got.last;
  }
  identical &&= lasts[0]!.length === lasts[1]!.length && lasts[0]!.every((x, k) => x === lasts[1]![k]);
}
for (const v of variants) await v.stage.dispose();

const table = results.map((r) => ({ ...r, medianStepMs: median(r.stepMs), medianPrefillMs: median(r.prefillMs) }));
const base = table[0]!;
const split = table[1]!;
const perCutStepMs = (split.medianStepMs - base.medianStepMs) / Math.max(1, cuts.length);
const perCutPrefillMs = (split.medianPrefillMs - base.medianPrefillMs) / Math.max(1, cuts.length);
console.log('\n| stage | decode step ms (median) | per round | prefill ms (median) |\n|---|---|---|---|');
for (const r of table) console.log(`| ${r.name} | ${r.medianStepMs.toFixed(2)} | ${r.roundStepMs.map((x) => x.toFixed(2)).join(' ')} | ${r.medianPrefillMs.toFixed(1)} |`);
console.log(`\nper cut: decode step ${perCutStepMs >= 0 ? '+' : ''}${perCutStepMs.toFixed(2)} ms (${((perCutStepMs / base.medianStepMs) * 100).toFixed(1)}%), prefill ${perCutPrefillMs >= 0 ? '+' : ''}${perCutPrefillMs.toFixed(1)} ms; outputs ${identical ? 'identical' : 'DIFFERENT'}`);
const out = join(import.meta.dirname, 'results');
await mkdir(out, { recursive: true });
await writeFile(join(out, 'segments.json'), `${JSON.stringify({ model: basename(path), range, cuts, threads: THREADS, rounds: ROUNDS, steps: STEPS, prefill: PREFILL, identical, perCutStepMs, perCutPrefillMs, variants: table.map(({ stepMs: _s, prefillMs: _p, ...r }) => r) }, null, 2)}\n`);
if (!identical) process.exit(1);
process.exit(0);
