// What a stage's worker thread costs per decode step now that the K/V caches live on it
// (kv-buffers.ts): one Llama-3.2-1B-shape stage of 16 layers without the head (synth Q4_0),
// in-thread against on a worker, decode steps at several cached positions, with the main thread's
// garbage collections counted (PerformanceObserver 'gc'). Before, every run moved the caches to the
// worker and back, and V8 counted each arrival as new external memory: a full collection in both
// threads every ~64 MB moved (15.7 ms a run at 1,024 positions on the worker against 0.04 ms
// in-thread, in this bench's earlier form). The two columns should now differ by the message hop only.
// Run: npx tsx bench/worker-kv.ts   Env: KIWI_BENCH_POSITIONS (default 256,1024,2048), KIWI_BENCH_RUNS (20),
// KIWI_PROF_DIR (model and shard cache, kept between runs). Prints a table and writes bench/results/worker-kv.json.
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { resolveShape } from '../electron/engine/model/synth/shapes.js';
import { synthesizeModel, SYNTH_QUANTS } from '../electron/engine/model/synth/synth.js';
import { median } from '../electron/engine/median.js';
import { modelShapeFromGguf } from '../electron/engine/runtime/decoder-shape.js';
import { freeCache } from '../electron/engine/runtime/kv-store.js';
import { ShardCache } from '../electron/engine/runtime/shard-cache.js';
import { Stage } from '../electron/engine/runtime/stage.js';

const POSITIONS = (process.env.KIWI_BENCH_POSITIONS ?? '256,1024,2048').split(',').map(Number).sort((a, b) => a - b);
const RUNS = Number(process.env.KIWI_BENCH_RUNS ?? 20);
const dir = process.env.KIWI_PROF_DIR ?? join(os.tmpdir(), 'kiwi-prof');
await mkdir(dir, { recursive: true });
const modelPath = join(dir, 'llama-3.2-1b-q4_0.gguf');
if (!existsSync(modelPath)) await synthesizeModel({ shape: resolveShape('llama-3.2-1b'), quant: SYNTH_QUANTS.q4_0!, out: modelPath, seed: 1 });
const file = await openGguf(modelPath);
const shape = await modelShapeFromGguf(file, { maxPositions: POSITIONS[POSITIONS.length - 1]! + RUNS + 8 });

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
  /** The cache's K and V over the stage's layers. */
  cacheMiB: number;
  stepMs: number;
  mainGcPerStep: number;
  mainGcMsPerStep: number;
}

const rows: Row[] = [];
const load = [os.loadavg()[0]!];
for (const kind of ['in-thread', 'worker'] as const) {
  const stage = await Stage.open(file, shape, { start: 0, end: 16, head: false }, { cache: new ShardCache(join(dir, 'shards-q4_0')), threads: 2, worker: kind === 'worker' });
  const cache = stage.emptyCache();
  try {
    const ids = (n: number): BigInt64Array => BigInt64Array.from({ length: n }, (_, i) => BigInt(1000 + ((cache.length + i) % 30000)));
    for (const p of POSITIONS) {
      while (cache.length < p) await stage.forward({ kind: 'ids', ids: ids(Math.min(256, p - cache.length)), batch: 1, seq: Math.min(256, p - cache.length) }, [cache]);
      for (let i = 0; i < 3; i++) await stage.forward({ kind: 'ids', ids: ids(1), batch: 1, seq: 1 }, [cache]);
      const [count0, ms0] = [gcCount, gcMs];
      const times: number[] = [];
      for (let r = 0; r < RUNS; r++) {
        const t0 = performance.now();
        await stage.forward({ kind: 'ids', ids: ids(1), batch: 1, seq: 1 }, [cache]);
        times.push(performance.now() - t0);
      }
      rows.push({
        session: kind,
        positions: p,
        cacheMiB: (stage.kvBytesPerToken * cache.allocated) / 2 ** 20,
        stepMs: median(times),
        mainGcPerStep: (gcCount - count0) / RUNS,
        mainGcMsPerStep: (gcMs - ms0) / RUNS,
      });
    }
  } finally {
    freeCache(cache);
    await stage.dispose();
  }
}
load.push(os.loadavg()[0]!);
console.log(`Llama-3.2-1B Q4_0, layers 0-16 (no head), 2 threads, decode step median of ${RUNS}, load ${load.map((l) => l.toFixed(1)).join(' -> ')}`);
console.log('| session | positions | cache MiB | ms per step | main-thread GCs per step | main-thread GC ms per step |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.session} | ${r.positions} | ${r.cacheMiB.toFixed(0)} | ${r.stepMs.toFixed(2)} | ${r.mainGcPerStep.toFixed(2)} | ${r.mainGcMsPerStep.toFixed(2)} |`);
const out = join(fileURLToPath(new URL('.', import.meta.url)), 'results');
await mkdir(out, { recursive: true });
await writeFile(join(out, 'worker-kv.json'), `${JSON.stringify({ date: new Date().toISOString(), runs: RUNS, load, rows }, null, 1)}\n`);
