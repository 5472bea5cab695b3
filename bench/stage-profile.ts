// Profiles one full-model stage (Llama-3.2-1B shape synth GGUF, 2 threads) straight on
// onnxruntime: step time of session-option / KV-capacity variants, rounds alternating, and with
// the `profile` variant the per-operator times from onnxruntime's profiler and its own run time.
// Run: npx tsx bench/stage-profile.ts [q4_0|q8_0]
// Env: KIWI_PROF_VARIANTS (comma list of base, cap1024, cap4096, extended, nospin, noarena,
//      threads1, profile; default base,cap1024), KIWI_PROF_ROUNDS (3), KIWI_PROF_STEPS (16),
//      KIWI_PROF_PREFILL=1 (steps are 128-token prefills), KIWI_PROF_DIR (model + shard, kept).
import * as ort from 'onnxruntime-node';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';

const quant = process.argv[2] ?? 'q4_0';
const dir = process.env.KIWI_PROF_DIR ?? join(os.tmpdir(), 'kiwi-prof');
const STEPS = Number(process.env.KIWI_PROF_STEPS ?? 16);
const PAST = 128;
// KIWI_PROF_PREFILL=1: each step is a 128-token prefill from an empty cache instead of one decode token.
const PREFILL = process.env.KIWI_PROF_PREFILL === '1';
const THREADS = 2;

const { synthesizeModel, SYNTH_QUANTS } = await import('../electron/engine/model/synth/synth.js');
const { resolveShape } = await import('../electron/engine/model/synth/shapes.js');
const { openGguf } = await import('../electron/engine/model/gguf/gguf-reader.js');
const { modelShapeFromGguf } = await import('../electron/engine/runtime/decoder-shape.js');
const { ShardCache } = await import('../electron/engine/runtime/shard-cache.js');
const { Stage } = await import('../electron/engine/runtime/stage.js');

await mkdir(dir, { recursive: true });
const modelPath = join(dir, `llama-3.2-1b-${quant}.gguf`);
if (!existsSync(modelPath)) await synthesizeModel({ shape: resolveShape('llama-3.2-1b'), quant: SYNTH_QUANTS[quant]!, out: modelPath, seed: 1 });
const file = await openGguf(modelPath);
const shape = await modelShapeFromGguf(file, { maxPositions: 1024 });
// Its own shard directory, so the one entry in it is this shard.
const shardDir = join(dir, `profile-shards-${quant}`);
const cache = new ShardCache(shardDir);
const stage = await Stage.open(file, shape, { start: 0, end: shape.blockCount, head: true }, { cache, threads: THREADS, accuracyLevel: 4 });
console.log('stage origin', stage.origin);
await stage.dispose();
// shard-cache.ts layout: one directory per model, the range's graph as range-<key>.onnx.
const modelDir = join(shardDir, (await readdir(shardDir))[0]!);
const onnxPath = join(modelDir, (await readdir(modelDir)).find((e) => /^range-[0-9a-f]+\.onnx$/.test(e))!);

const hd = 64;
const kvH = shape.kvHeads;
function feedsFor(pos: number, kv: Float32Array[], cap: number): { feeds: Record<string, ort.Tensor>; fetches: Record<string, ort.Tensor | null> } {
  const feeds: Record<string, ort.Tensor> = {};
  const fetches: Record<string, ort.Tensor | null> = { logits: null };
  const seq = PREFILL ? PAST : 1;
  if (PREFILL) pos = PAST - 1;
  feeds.hidden_in = new ort.Tensor('float32', new Float32Array(shape.hidden * seq).fill(0.01), [1, seq, shape.hidden]);
  feeds.seqlens_k = new ort.Tensor('int32', Int32Array.of(pos), [1]);
  feeds.total_sequence_length = new ort.Tensor('int32', Int32Array.of(pos + 1), []);
  for (let L = 0; L < shape.blockCount; L++) {
    const k = new ort.Tensor('float32', kv[2 * L]!, [1, kvH, cap, hd]);
    const v = new ort.Tensor('float32', kv[2 * L + 1]!, [1, kvH, cap, hd]);
    feeds[`past_key.${L}`] = k;
    feeds[`past_value.${L}`] = v;
    fetches[`present_key.${L}`] = k;
    fetches[`present_value.${L}`] = v;
  }
  return { feeds, fetches };
}

const base: ort.InferenceSession.SessionOptions = {
  executionProviders: ['cpu'],
  graphOptimizationLevel: 'all',
  intraOpNumThreads: THREADS,
  interOpNumThreads: 1,
  executionMode: 'sequential',
  enableCpuMemArena: true,
  enableMemPattern: true,
  logSeverityLevel: 3,
};
// name -> [session options, KV capacity]
const variants: Record<string, [ort.InferenceSession.SessionOptions, number]> = {
  base: [base, PAST + STEPS + 8],
  cap1024: [base, 1024],
  cap4096: [base, 4096],
  extended: [{ ...base, graphOptimizationLevel: 'extended' }, PAST + STEPS + 8],
  nospin: [{ ...base, extra: { session: { intra_op: { allow_spinning: '0' } } } }, PAST + STEPS + 8],
  noarena: [{ ...base, enableCpuMemArena: false, enableMemPattern: false }, PAST + STEPS + 8],
  threads1: [{ ...base, intraOpNumThreads: 1 }, PAST + STEPS + 8],
  profile: [{ ...base, enableProfiling: true, profileFilePrefix: join(dir, 'ortprof') }, PAST + STEPS + 8],
};
const ROUNDS = Number(process.env.KIWI_PROF_ROUNDS ?? 3);
const pick = (process.env.KIWI_PROF_VARIANTS ?? 'base,cap1024').split(',');
const live = [];
for (const name of pick) {
  const [opts, cap] = variants[name]!;
  const t0 = performance.now();
  const sess = await ort.InferenceSession.create(onnxPath, opts);
  console.log(`${name}: session created in ${(performance.now() - t0).toFixed(0)} ms`);
  const kv = Array.from({ length: 2 * shape.blockCount }, () => new Float32Array(kvH * cap * hd).fill(0.01));
  live.push({ name, sess, cap, kv, times: [] as number[] });
}
for (let r = 0; r < ROUNDS; r++) {
  for (const v of live) {
    for (let s = 0; s < STEPS + 1; s++) {
      const { feeds, fetches } = feedsFor(PAST + s, v.kv, v.cap);
      const a = performance.now();
      await v.sess.run(feeds, fetches);
      if (s >= 1) v.times.push(performance.now() - a);
    }
  }
}
for (const { name, sess, times } of live) {
  times.sort((a, b) => a - b);
  console.log(`${name}\tstep median ${times[times.length >> 1]!.toFixed(1)} ms\tp10 ${times[Math.floor(times.length / 10)]!.toFixed(1)}\tmin ${times[0]!.toFixed(1)}\tload ${os.loadavg()[0]!.toFixed(2)}`);
  if (name === 'profile') {
    sess.endProfiling();
    await sess.release();
    const files = (await readdir(dir)).filter((f) => f.startsWith('ortprof'));
    const events = JSON.parse(await readFile(join(dir, files[files.length - 1]!), 'utf8')) as Array<{ cat: string; name: string; dur: number; args?: { op_name?: string } }>;
    const byOp = new Map<string, number>();
    const byNode = new Map<string, number>();
    let runs = 0;
    const runUs: number[] = [];
    for (const e of events) {
      if (e.cat === 'Session' && e.name === 'model_run') {
        runs++;
        runUs.push(e.dur);
      }
      if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
      const op = e.args?.op_name ?? '?';
      byOp.set(op, (byOp.get(op) ?? 0) + e.dur);
      const n = e.name.replace(/^blk\.\d+\./, 'blk.*.').replace(/_\d+_kernel_time$/, '').replace('_kernel_time', '');
      byNode.set(n, (byNode.get(n) ?? 0) + e.dur);
    }
    runUs.sort((a, b) => a - b);
    console.log(`profile: ${runs} runs; inside onnxruntime (model_run): median ${(runUs[runUs.length >> 1]! / 1000).toFixed(1)} ms, min ${(runUs[0]! / 1000).toFixed(1)} ms`);
    for (const [op, us] of [...byOp].sort((a, b) => b[1] - a[1])) console.log(`  ${op}\t${(us / runs / 1000).toFixed(2)} ms/run`);
    for (const [n, us] of [...byNode].sort((a, b) => b[1] - a[1]).slice(0, 14)) console.log(`  ${n}\t${(us / runs / 1000).toFixed(2)} ms/run`);
    for (const f of files) await rm(join(dir, f));
  } else {
    await sess.release();
  }
}
