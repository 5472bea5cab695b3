// Shard build speed: how fast a whole-model stage (all layers + head) of a `kiwi synth` GGUF of
// Llama-3.2-1B shape goes from GGUF bytes to a running onnxruntime session, cold (empty shard
// cache) and from the cache. Per format:
//   cold open   Stage.open with an empty cache (build + session + first step), as a member does;
//   phases      a second cold build through the same streaming path, serial (no prefetch of the
//               next layer, no worker pool; the cold open overlaps much more), with timers:
//               read (GGUF bytes, page-cached), convert (repack to MatMulNBits / f32), write
//               (placing the layer files' bytes, and waiting for them to be on disk), other
//               (the rest of making the graph, minus the overlap: a layer's reads are issued
//               together and one converts while the next arrives, so it can be negative),
//               finish (encode + manifests + renames), then onnxruntime session creation on
//               the built model and its first step;
//   cache open  Stage.open again on the filled cache.
// MB/s are GGUF weight bytes of the stage's tensors (what a member receives) per second. The GGUF
// is read once before the cold open, so it is page-cached (as a member's just-received weights are).
// Run: npx tsx bench/shard-build.ts   Env: KIWI_BENCH_QUANTS (default q4_0,q8_0,q4_k_m),
//      KIWI_BENCH_DIR (models + caches, default /tmp/kiwi-shard-build), KIWI_BENCH_THREADS,
//      KIWI_BENCH_LABEL (a name for this run in the JSON, e.g. before/after), KIWI_BENCH_LAYOUT=fast.
// Prints a table and writes bench/results/shard-build.json (runs are kept by label).
// KIWI_BENCH_COMPARE=DIR (a checkout of another version, e.g. `git archive HEAD | tar -x -C DIR`
// with node_modules linked): instead, cold open and cache open of this tree and DIR's, each in a
// child process, alternating for KIWI_BENCH_ROUNDS (default 3) rounds; medians, wall and CPU
// seconds (all threads: on a shared machine wall time swings with the neighbours' load).
import { execFileSync } from 'node:child_process';
import { createReadStream, existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { modelShapeFromGguf } from '../electron/engine/runtime/decoder-shape.js';
import { ShardCache, modelFingerprint } from '../electron/engine/runtime/shard-cache.js';
import { Stage } from '../electron/engine/runtime/stage.js';
import { openStageWeights } from '../electron/engine/runtime/stage-weights.js';
import type { WeightTimes } from '../electron/engine/runtime/stage-weights.js';
import { stageGraphBuilder } from '../electron/engine/runtime/stage-graph.js';
import { createStageSession, f32Tensor, i32Tensor, tensorOf } from '../electron/engine/ort/session.js';
import { restartWithHugePages } from '../electron/engine/device/huge-pages.js';

// Stages open here as in `kiwi`: with huge pages where it would restart with them (KIWI_HUGE_PAGES=0: without).
restartWithHugePages();

const QUANTS = (process.env.KIWI_BENCH_QUANTS ?? 'q4_0,q8_0,q4_k_m').split(',');
const DIR = process.env.KIWI_BENCH_DIR ?? '/tmp/kiwi-shard-build';
const THREADS = Number(process.env.KIWI_BENCH_THREADS ?? os.availableParallelism());
const LABEL = process.env.KIWI_BENCH_LABEL ?? 'run';
/** KIWI_BENCH_LAYOUT=fast: the fast weight layout (Q4_0 requantized to blocks of 128). */
const LAYOUT = process.env.KIWI_BENCH_LAYOUT === 'fast' ? ('fast' as const) : ('exact' as const);

const ROOT = fileURLToPath(new URL('..', import.meta.url));

interface Row {
  quant: string;
  ggufMB: number;
  coldOpenMs: number;
  coldBuildMs: number;
  coldSessionMs: number;
  coldMBps: number;
  phases: { readMs: number; convertMs: number; writeMs: number; otherMs: number; finishMs: number; sessionCreateMs: number; firstStepMs: number };
  cacheOpenMs: number;
  cacheSessionMs: number;
}

function synth(quant: string): string {
  const out = join(DIR, `llama-3.2-1b-${quant}.gguf`);
  if (!existsSync(out)) {
    execFileSync('npx', ['tsx', 'electron/kiwi.ts', 'synth', '--shape', 'llama-3.2-1b', '--quant', quant, '--out', out], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
  }
  return out;
}

async function measure(quant: string): Promise<Row> {
  const path = synth(quant);
  const file = await openGguf(path);
  const shape = await modelShapeFromGguf(file, { maxPositions: 1024 });
  const plan = { start: 0, end: shape.blockCount, head: true };
  const outputName = file.tensor('output.weight') !== undefined ? 'output.weight' : 'token_embd.weight';
  const stageBytes = file.tensors.filter((t) => /^blk\./.test(t.name) || t.name === outputName || t.name === 'output_norm.weight').reduce((a, t) => a + t.byteLength, 0);
  const opts = { threads: THREADS, weightLayout: LAYOUT };
  const cacheDir = join(DIR, `cache-${quant}`);

  // Cold open, as a member does it: the GGUF page-cached (as weights a member just received are),
  // so that the disk's speed is not measured as the build's.
  await rm(cacheDir, { recursive: true, force: true });
  for await (const chunk of createReadStream(path, { highWaterMark: 16 << 20 })) void chunk;
  let t0 = performance.now();
  const cold = await Stage.open(file, shape, plan, { ...opts, cache: new ShardCache(cacheDir) });
  const coldOpenMs = performance.now() - t0;
  if (cold.origin.source !== 'built') throw new Error('cold open found a cached shard');
  const { buildMs: coldBuildMs, sessionMs: coldSessionMs } = cold.origin;
  await cold.dispose();

  // Cache hit.
  t0 = performance.now();
  const warm = await Stage.open(file, shape, plan, { ...opts, cache: new ShardCache(cacheDir) });
  const cacheOpenMs = performance.now() - t0;
  if (warm.origin.source !== 'cache') throw new Error('the second open did not come from the cache');
  const cacheSessionMs = warm.origin.sessionMs;
  await warm.dispose();

  // Phases: the streaming build of stage.ts's prepareModel, with timers.
  await rm(cacheDir, { recursive: true, force: true });
  const times: WeightTimes = { readMs: 0, convertMs: 0, readBytes: 0 };
  let writeMs = 0;
  let makeMs = 0;
  const key = { model: await modelFingerprint(file), ...plan, accuracyLevel: 4, maxPositions: shape.maxPositions, provider: 'cpu', ...(LAYOUT === 'fast' ? { layout: LAYOUT } : {}) };
  t0 = performance.now();
  const model = await new ShardCache(cacheDir).build(key, { path }, async ({ place, reused, flush }) => {
    const m0 = performance.now();
    const timedPlace: typeof place = (...args) => {
      const w0 = performance.now();
      const r = place(...args);
      writeMs += performance.now() - w0;
      return r;
    };
    const source = await openStageWeights(file, shape, { times, layout: LAYOUT });
    try {
      const b = stageGraphBuilder(shape, plan, { accuracyLevel: 4 }, { place: timedPlace });
      for (let L = plan.start; L < plan.end; L++) {
        b.addLayer(reused(L) ? await source.hollowLayer(L) : await source.layer(L));
        const w0 = performance.now();
        await flush();
        writeMs += performance.now() - w0;
      }
      return b.finish(await source.head());
    } finally {
      await source.close();
      makeMs = performance.now() - m0;
    }
  });
  const buildMs = performance.now() - t0;
  t0 = performance.now();
  const session = await createStageSession(model, { ...opts, provider: 'cpu' });
  const sessionCreateMs = performance.now() - t0;
  const feeds: Record<string, ReturnType<typeof f32Tensor>> = {
    hidden_in: f32Tensor(new Float32Array(shape.hidden), [1, 1, shape.hidden]),
    seqlens_k: i32Tensor(new Int32Array([0]), [1]),
    total_sequence_length: i32Tensor(new Int32Array([1]), []),
  };
  const { attentionHeadDim } = await import('../electron/engine/runtime/stage-graph.js');
  const hd = attentionHeadDim(shape);
  for (let L = 0; L < shape.blockCount; L++) {
    feeds[`past_key.${L}`] = f32Tensor(new Float32Array(0), [1, shape.kvHeads, 0, hd]);
    feeds[`past_value.${L}`] = f32Tensor(new Float32Array(0), [1, shape.kvHeads, 0, hd]);
  }
  if (session.inputNames.includes('logits_from')) feeds.logits_from = tensorOf(new BigInt64Array([-1n]), [1]);
  t0 = performance.now();
  await session.run(feeds as never, ['logits'] as never);
  const firstStepMs = performance.now() - t0;
  await session.dispose();
  await rm(cacheDir, { recursive: true, force: true });
  const graphMs = makeMs - times.readMs - times.convertMs - writeMs;
  return {
    quant,
    ggufMB: stageBytes / 1e6,
    coldOpenMs,
    coldBuildMs,
    coldSessionMs,
    coldMBps: stageBytes / 1e3 / coldOpenMs,
    phases: { readMs: times.readMs, convertMs: times.convertMs, writeMs, otherMs: graphMs, finishMs: buildMs - makeMs, sessionCreateMs, firstStepMs },
    cacheOpenMs,
    cacheSessionMs,
  };
}

interface OpenTimes {
  coldOpenMs: number;
  coldCpuMs: number;
  cacheOpenMs: number;
  cacheCpuMs: number;
}

/** Child: cold open then cache open with the tree at `root` (its own Stage and ShardCache). */
async function openChild(root: string, quant: string): Promise<void> {
  const engine = (m: string) => import(join(root, 'electron/engine', m));
  const { openGguf: open } = (await engine('model/gguf/gguf-reader.ts')) as typeof import('../electron/engine/model/gguf/gguf-reader.js');
  const { modelShapeFromGguf: shapeOf } = (await engine('runtime/decoder-shape.ts')) as typeof import('../electron/engine/runtime/decoder-shape.js');
  const { ShardCache: Cache } = (await engine('runtime/shard-cache.ts')) as typeof import('../electron/engine/runtime/shard-cache.js');
  const { Stage: St } = (await engine('runtime/stage.ts')) as typeof import('../electron/engine/runtime/stage.js');
  const file = await open(join(DIR, `llama-3.2-1b-${quant}.gguf`));
  const shape = await shapeOf(file, { maxPositions: 1024 });
  const plan = { start: 0, end: shape.blockCount, head: true };
  const cacheDir = join(DIR, `cmp-cache-${quant}`);
  await rm(cacheDir, { recursive: true, force: true });
  const timed = async (): Promise<[number, number]> => {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    const st = await St.open(file, shape, plan, { threads: THREADS, cache: new Cache(cacheDir) });
    const ms = performance.now() - t0;
    const c = process.cpuUsage(c0);
    await st.dispose();
    return [ms, (c.user + c.system) / 1000];
  };
  const [coldOpenMs, coldCpuMs] = await timed();
  const [cacheOpenMs, cacheCpuMs] = await timed();
  await rm(cacheDir, { recursive: true, force: true });
  const out: OpenTimes = { coldOpenMs, coldCpuMs, cacheOpenMs, cacheCpuMs };
  console.log(`RESULT ${JSON.stringify(out)}`);
}

async function compare(other: string): Promise<void> {
  const rounds = Number(process.env.KIWI_BENCH_ROUNDS ?? 3);
  const trees = { before: other, after: ROOT };
  const results: Record<string, Record<string, OpenTimes[]>> = {};
  for (const q of QUANTS) {
    synth(q);
    results[q] = { before: [], after: [] };
    for (let r = 0; r < rounds; r++) {
      // Alternate which goes first, so a neighbour's burst hits both alike.
      const order = r % 2 === 0 ? (['before', 'after'] as const) : (['after', 'before'] as const);
      for (const which of order) {
        const out = execFileSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
          cwd: ROOT,
          env: { ...process.env, KIWI_BENCH_CHILD: `${trees[which]}|${q}` },
          encoding: 'utf8',
        });
        const line = out.split('\n').find((l) => l.startsWith('RESULT '));
        if (line === undefined) throw new Error(`no result from ${which} ${q}: ${out}`);
        results[q]![which]!.push(JSON.parse(line.slice(7)) as OpenTimes);
        console.error(`${q} ${which} round ${r + 1}: ${line.slice(7)}`);
      }
    }
  }
  const med = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
  const f = (n: number) => (n / 1000).toFixed(2);
  console.log(`shard open, Llama-3.2-1B synth, ${THREADS} threads, ${rounds} alternating rounds, medians (min-max), load ${os.loadavg()[0]!.toFixed(1)}`);
  console.log('| format | stage MB | version | cold open s | MB/s | cold CPU s | cache open s | cache CPU s |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const q of QUANTS) {
    const g = await openGguf(synth(q));
    const outputName = g.tensor('output.weight') !== undefined ? 'output.weight' : 'token_embd.weight';
    const bytes = g.tensors.filter((t) => /^blk\./.test(t.name) || t.name === outputName || t.name === 'output_norm.weight').reduce((a, t) => a + t.byteLength, 0);
    for (const which of ['before', 'after'] as const) {
      const rs = results[q]![which]!;
      const cold = rs.map((x) => x.coldOpenMs);
      const range = (a: number[]) => `${f(Math.min(...a))}-${f(Math.max(...a))}`;
      console.log(`| ${q} | ${(bytes / 1e6).toFixed(0)} | ${which} | ${f(med(cold))} (${range(cold)}) | ${(bytes / 1e3 / med(cold)).toFixed(0)} | ${f(med(rs.map((x) => x.coldCpuMs)))} | ${f(med(rs.map((x) => x.cacheOpenMs)))} (${range(rs.map((x) => x.cacheOpenMs))}) | ${f(med(rs.map((x) => x.cacheCpuMs)))} |`);
    }
  }
  const out = join(ROOT, 'bench/results/shard-build.json');
  await mkdir(join(ROOT, 'bench/results'), { recursive: true });
  const previous = JSON.parse(await readFile(out, 'utf8').catch(() => '{}')) as Record<string, unknown>;
  previous[`compare-${LABEL}`] = { date: new Date().toISOString(), threads: THREADS, load: os.loadavg()[0], rounds, results };
  await writeFile(out, JSON.stringify(previous, null, 1));
}

async function main(): Promise<void> {
  const child = process.env.KIWI_BENCH_CHILD;
  if (child !== undefined) {
    const [root, quant] = child.split('|') as [string, string];
    return openChild(root, quant);
  }
  if (process.env.KIWI_BENCH_COMPARE !== undefined) return compare(process.env.KIWI_BENCH_COMPARE);
  await mkdir(DIR, { recursive: true });
  const rows: Row[] = [];
  for (const q of QUANTS) {
    rows.push(await measure(q));
    console.error(`${q} done`);
  }
  const f = (n: number) => n.toFixed(0);
  console.log(`shard build, Llama-3.2-1B synth, ${THREADS} threads, ${LAYOUT} layout, load ${os.loadavg()[0]!.toFixed(1)} (${LABEL})`);
  console.log('| format | stage MB | cold open ms | MB/s | build ms | session+step ms | read | convert | write | other | finish | ORT create | first step | cache open ms |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    const p = r.phases;
    console.log(`| ${r.quant} | ${f(r.ggufMB)} | ${f(r.coldOpenMs)} | ${f(r.coldMBps)} | ${f(r.coldBuildMs)} | ${f(r.coldSessionMs)} | ${f(p.readMs)} | ${f(p.convertMs)} | ${f(p.writeMs)} | ${f(p.otherMs)} | ${f(p.finishMs)} | ${f(p.sessionCreateMs)} | ${f(p.firstStepMs)} | ${f(r.cacheOpenMs)} |`);
  }
  const out = join(ROOT, 'bench/results/shard-build.json');
  await mkdir(join(ROOT, 'bench/results'), { recursive: true });
  const previous = JSON.parse(await readFile(out, 'utf8').catch(() => '{}')) as Record<string, unknown>;
  previous[LABEL] = { date: new Date().toISOString(), threads: THREADS, load: os.loadavg()[0], rows };
  await writeFile(out, JSON.stringify(previous, null, 1));
}

await main();
