// What lending a stage's KV caches to its worker thread costs per run (ort-worker-session.ts,
// StageSession.run's `lend`): a graph that only reads its 32 inputs (16 layers' K and V of a
// Llama-3.2-1B-shape stage: 8 KV heads of 64) at several cached positions, run in-thread and on a
// worker, with the main thread's garbage collections counted (PerformanceObserver 'gc'). The
// buffers move without a copy, but every ArrayBuffer that arrives counts as new external memory to
// V8, which schedules a full collection in both threads once about 64 MB have arrived: a cost per
// run that grows with the cache, not with the work.
// Run: npx tsx bench/worker-lend.ts   Env: KIWI_BENCH_POSITIONS (default 256,1024,4096), KIWI_BENCH_RUNS (40).
// Prints a table and writes bench/results/worker-lend.json.
import { mkdir, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { GraphBuilder, encodeModel } from '../electron/engine/ort/onnx-graph.js';
import { createStageSession, f32Tensor, type OrtTensor, type StageSession } from '../electron/engine/ort/session.js';
import { median } from '../electron/engine/median.js';
import { createWorkerStageSession } from '../electron/engine/runtime/ort-worker-session.js';

const POSITIONS = (process.env.KIWI_BENCH_POSITIONS ?? '256,1024,4096').split(',').map(Number);
const RUNS = Number(process.env.KIWI_BENCH_RUNS ?? 40);
const BUFFERS = 32;
const PER_POSITION = 8 * 64; // floats of one layer's K (or V) per cached position

/** y = the first 4 elements of x0; every other input is read by nothing but fed all the same. */
function graph(): Uint8Array {
  const g = new GraphBuilder('lend');
  const inputs = Array.from({ length: BUFFERS }, (_, i) => g.input(`x${i}`, 'float32', ['n']));
  g.op('Slice', [inputs[0]!, g.int64s('from', [0]), g.int64s('to', [4])], { output: 'y' });
  g.output('y', 'float32', [4]);
  return encodeModel(g).model;
}

let gcCount = 0;
let gcMs = 0;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    gcCount++;
    gcMs += e.duration;
  }
}).observe({ entryTypes: ['gc'] });

interface Row {
  session: 'in-thread' | 'worker';
  positions: number;
  lentMiB: number;
  runMs: number;
  mainGcPerRun: number;
  mainGcMsPerRun: number;
}

async function measure(session: StageSession, kind: Row['session'], positions: number): Promise<Row> {
  const feeds: Record<string, OrtTensor> = {};
  for (let i = 0; i < BUFFERS; i++) feeds[`x${i}`] = f32Tensor(new Float32Array(positions * PER_POSITION), [positions * PER_POSITION]);
  const names = Object.keys(feeds);
  for (let i = 0; i < 3; i++) await session.run(feeds, { y: null }, names);
  const [count0, ms0] = [gcCount, gcMs];
  const times: number[] = [];
  for (let r = 0; r < RUNS; r++) {
    const t0 = performance.now();
    await session.run(feeds, { y: null }, names);
    times.push(performance.now() - t0);
  }
  return {
    session: kind,
    positions,
    lentMiB: (BUFFERS * positions * PER_POSITION * 4) / 2 ** 20,
    runMs: median(times),
    mainGcPerRun: (gcCount - count0) / RUNS,
    mainGcMsPerRun: (gcMs - ms0) / RUNS,
  };
}

const model = graph();
const rows: Row[] = [];
const load = [loadavg()[0]!];
for (const [kind, open] of [['in-thread', createStageSession], ['worker', createWorkerStageSession]] as const) {
  const session = await open(model, { provider: 'cpu', threads: 1 });
  try {
    for (const p of POSITIONS) rows.push(await measure(session, kind, p));
  } finally {
    await session.dispose();
  }
}
load.push(loadavg()[0]!);
console.log(`${BUFFERS} lent buffers (16 layers' K and V, 8 KV heads of 64), median of ${RUNS} runs, load ${load.map((l) => l.toFixed(1)).join(' -> ')}`);
console.log('| session | positions | lent MiB | ms per run | main-thread GCs per run | main-thread GC ms per run |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.session} | ${r.positions} | ${r.lentMiB.toFixed(0)} | ${r.runMs.toFixed(3)} | ${r.mainGcPerRun.toFixed(2)} | ${r.mainGcMsPerRun.toFixed(2)} |`);
const out = join(fileURLToPath(new URL('.', import.meta.url)), 'results');
await mkdir(out, { recursive: true });
await writeFile(join(out, 'worker-lend.json'), `${JSON.stringify({ date: new Date().toISOString(), runs: RUNS, load, rows }, null, 1)}\n`);
