// Resident memory of a whole model in one process: Kiwi (a single Stage of every layer + head, as
// `kiwi serve` runs it) against llama.cpp (node-llama-cpp, CPU) on the same `kiwi synth` GGUF, per
// quantization. Measured on the real processes from /proc/PID/status (Linux): steady RssAnon and
// RssFile after a short generation, and the peak during load (VmHWM, and the largest RssAnon seen
// by sampling every 20 ms). Kiwi runs twice: a first start that builds its shard in the process
// (what a member does on its first assignment) and a start from the shard cache.
// "expected" is the runtime's packed bytes of the layers held (onnxruntime MLAS's MatMulNBits
// layout, packedLinearBytes in runtime/memory-model.ts) + the embedding kept in JS + the KV
// reservation; the ratios are measured / expected (targets: steady ≤ 1.15, peak ≤ 1.3).
// Run: npx tsx bench/memory.ts
// Env: KIWI_BENCH_QUANTS (default q4_0,q8_0,q4_k,q6_k), KIWI_BENCH_SHAPE (default llama-3.2-1b),
//      KIWI_BENCH_CONTEXT (KV positions reserved, default 256), KIWI_BENCH_THREADS (default 2),
//      KIWI_BENCH_ENGINES (default kiwi-build,kiwi,llama.cpp).
// Prints a table and writes bench/results/memory-<shape>.json. One model process at a time.
import { fork } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { hugePagesEnv } from '../electron/engine/device/huge-pages.js';

const QUANTS = (process.env.KIWI_BENCH_QUANTS ?? 'q4_0,q8_0,q4_k,q6_k').split(',');
const SHAPE = process.env.KIWI_BENCH_SHAPE ?? 'llama-3.2-1b';
const CONTEXT = Number(process.env.KIWI_BENCH_CONTEXT ?? 256);
const THREADS = Number(process.env.KIWI_BENCH_THREADS ?? 2);
const ENGINES = (process.env.KIWI_BENCH_ENGINES ?? 'kiwi-build,kiwi,llama.cpp').split(',') as Engine[];
const PROMPT = Array.from({ length: 16 }, (_, i) => 1 + ((i * 7919) % 20000));
const DECODE = 8;

type Engine = 'kiwi-build' | 'kiwi' | 'llama.cpp';

// ---- child side ----------------------------------------------------------------------------

async function child(engine: Engine, modelPath: string, cacheDir: string): Promise<void> {
  const t0 = performance.now();
  let generate: () => Promise<void>;
  if (engine === 'llama.cpp') {
    const { getLlama } = await import('node-llama-cpp');
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' as never });
    const model = await llama.loadModel({ modelPath });
    const context = await model.createContext({ contextSize: CONTEXT, threads: THREADS, batchSize: PROMPT.length });
    const sequence = context.getSequence();
    generate = async () => {
      let n = 0;
      for await (const _ of sequence.evaluate(PROMPT as never, { temperature: 0 })) if (n++ >= DECODE) break;
    };
  } else {
    const { openGguf } = await import('../electron/engine/model/gguf/gguf-reader.js');
    const { modelShapeFromGguf } = await import('../electron/engine/runtime/decoder-shape.js');
    const { ShardCache } = await import('../electron/engine/runtime/shard-cache.js');
    const { Stage } = await import('../electron/engine/runtime/stage.js');
    const { StageChain } = await import('../electron/engine/runtime/stage-chain.js');
    const { argmax } = await import('../electron/engine/runtime/sampling.js');
    const file = await openGguf(modelPath);
    const shape = await modelShapeFromGguf(file, { maxPositions: CONTEXT });
    const stage = await Stage.open(file, shape, { start: 0, end: shape.blockCount, head: true }, { cache: new ShardCache(cacheDir), threads: THREADS });
    const want = engine === 'kiwi-build' ? 'built' : 'cache';
    if (stage.origin.source !== want) throw new Error(`${engine}: the stage came from ${stage.origin.source}, expected ${want}`);
    const chain = new StageChain([stage]);
    generate = async () => {
      const caches = chain.newCaches(CONTEXT);
      let logits = (await chain.step([{ tokens: PROMPT, caches }]))[0]!;
      for (let i = 0; i < DECODE; i++) logits = (await chain.step([{ tokens: [argmax(logits)], caches }]))[0]!;
    };
  }
  const loadMs = performance.now() - t0;
  await generate();
  process.send!({ type: 'steady', loadMs });
  process.on('message', () => process.exit(0));
}

// ---- parent side ---------------------------------------------------------------------------

interface ProcStatus {
  rssAnon: number;
  rssFile: number;
  hwm: number;
}

async function procStatus(pid: number): Promise<ProcStatus> {
  const text = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string): number => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
    if (m === null) throw new Error(`/proc/${pid}/status has no ${field}`);
    return Number(m[1]) * 1024;
  };
  return { rssAnon: kb('RssAnon'), rssFile: kb('RssFile'), hwm: kb('VmHWM') };
}

interface Measured extends ProcStatus {
  engine: Engine;
  loadMs: number;
  peakAnon: number;
}

async function measure(engine: Engine, modelPath: string, cacheDir: string): Promise<Measured> {
  const proc = fork(fileURLToPath(import.meta.url), ['--child', engine, modelPath, cacheDir], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    // Kiwi's children run with huge pages where `kiwi` itself would (KIWI_HUGE_PAGES=0: without).
    ...(engine !== 'llama.cpp' ? { env: hugePagesEnv() } : {}),
  });
  let peakAnon = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      try {
        peakAnon = Math.max(peakAnon, (await procStatus(proc.pid!)).rssAnon);
      } catch {
        return; // exited
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  try {
    const loadMs = await new Promise<number>((resolve, reject) => {
      proc.once('message', (m: { loadMs: number }) => resolve(m.loadMs));
      proc.once('exit', (code) => reject(new Error(`${engine} exited with ${code} before it was ready`)));
    });
    // Let deferred frees (GC of dropped buffers) happen as they would in a serving process.
    await new Promise((r) => setTimeout(r, 2000));
    const s = await procStatus(proc.pid!);
    sampling = false;
    await sampler;
    return { engine, loadMs, ...s, peakAnon: Math.max(peakAnon, s.rssAnon) };
  } finally {
    sampling = false;
    const exited = new Promise((r) => proc.once('exit', r));
    if (proc.exitCode === null) proc.send('exit');
    await exited;
  }
}

const MiB = (b: number): number => Math.round(b / 2 ** 20);

async function main(): Promise<void> {
  const { synthesizeModel, SYNTH_QUANTS } = await import('../electron/engine/model/synth/synth.js');
  const { resolveShape } = await import('../electron/engine/model/synth/shapes.js');
  const { openGguf } = await import('../electron/engine/model/gguf/gguf-reader.js');
  const { modelShapeFromGguf } = await import('../electron/engine/runtime/decoder-shape.js');
  const { stageResidentBytes, stageWeightCount } = await import('../electron/engine/runtime/memory-model.js');

  const dir = await mkdtemp(join(os.tmpdir(), 'kiwi-bench-memory-'));
  const rows: Array<Record<string, unknown>> = [];
  try {
    for (const quant of QUANTS) {
      const type = SYNTH_QUANTS[quant];
      if (type === undefined) throw new Error(`unknown quant ${quant}`);
      const modelPath = join(dir, `${SHAPE}-${quant}.gguf`);
      await synthesizeModel({ shape: resolveShape(SHAPE), quant: type, out: modelPath, seed: 1 });
      const file = await openGguf(modelPath);
      const shape = await modelShapeFromGguf(file, { maxPositions: CONTEXT });
      const plan = { start: 0, end: shape.blockCount, head: true };
      const expected = stageResidentBytes(file, shape, plan, { kvPositions: CONTEXT });
      const weights = stageWeightCount(file, shape, plan);
      const cacheDir = join(dir, `shards-${quant}`);
      for (const engine of ENGINES) {
        const m = await measure(engine, modelPath, cacheDir);
        const row = {
          shape: SHAPE,
          quant,
          engine,
          fileMiB: MiB(file.fileSize),
          expectedMiB: engine === 'llama.cpp' ? null : MiB(expected.total),
          packedBitsPerWeight: Number(((expected.weights * 8) / weights).toFixed(2)),
          rssAnonMiB: MiB(m.rssAnon),
          rssFileMiB: MiB(m.rssFile),
          peakAnonMiB: MiB(m.peakAnon),
          vmHwmMiB: MiB(m.hwm),
          steadyRatio: engine === 'llama.cpp' ? null : Number((m.rssAnon / expected.total).toFixed(2)),
          peakRatio: engine === 'llama.cpp' ? null : Number((m.peakAnon / expected.total).toFixed(2)),
          loadS: Number((m.loadMs / 1000).toFixed(1)),
        };
        rows.push(row);
        console.log(JSON.stringify(row));
      }
      await rm(modelPath, { force: true });
      await rm(cacheDir, { recursive: true, force: true });
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  // Kiwi vs llama.cpp per quant: anonymous + file-backed resident (llama.cpp maps its weights).
  for (const r of rows) {
    const llama = rows.find((x) => x.quant === r.quant && x.engine === 'llama.cpp');
    if (llama !== undefined && r !== llama) {
      r.rssVsLlamaCpp = Number(
        (((r.rssAnonMiB as number) + (r.rssFileMiB as number)) / ((llama.rssAnonMiB as number) + (llama.rssFileMiB as number))).toFixed(2),
      );
    }
  }
  const cols = ['quant', 'engine', 'fileMiB', 'expectedMiB', 'packedBitsPerWeight', 'rssAnonMiB', 'rssFileMiB', 'peakAnonMiB', 'vmHwmMiB', 'steadyRatio', 'peakRatio', 'rssVsLlamaCpp', 'loadS'];
  console.log(`\n${SHAPE}, ${CONTEXT} KV positions, ${THREADS} threads (MiB; ratios: measured / expected)`);
  console.log(`| ${cols.join(' | ')} |\n|${cols.map(() => ' --- ').join('|')}|`);
  for (const r of rows) console.log(`| ${cols.map((c) => String(r[c] ?? '—')).join(' | ')} |`);
  const out = fileURLToPath(new URL(`./results/memory-${SHAPE}.json`, import.meta.url));
  await mkdir(join(out, '..'), { recursive: true });
  // Rows of quants not run this time stay from the last run that measured them.
  let kept: Array<Record<string, unknown>> = [];
  try {
    kept = (JSON.parse(await readFile(out, 'utf8')) as { rows: Array<Record<string, unknown>> }).rows.filter((r) => !QUANTS.includes(r.quant as string));
  } catch {
    // No earlier results.
  }
  await writeFile(out, JSON.stringify({ shape: SHAPE, context: CONTEXT, threads: THREADS, date: new Date().toISOString(), rows: [...kept, ...rows] }, null, 1));
  console.log(`wrote ${out}`);
}

if (process.argv[2] === '--child') {
  child(process.argv[3] as Engine, process.argv[4]!, process.argv[5]!).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
} else {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
