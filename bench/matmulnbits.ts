// Microbenchmark of onnxruntime's MatMulNBits on the CPU for decode (M = 1) with cache-cold
// weights: a chain of Llama-3.2-1B feed-forward pairs (2048 -> 8192 -> 2048), per block size,
// bits and accuracy level, rounds alternating between variants. Prints ms per chain run and the
// effective bandwidth over the GGUF-equivalent bytes (Q4_0: 4.5 bits, Q8_0: 8.5 bits per weight),
// at the median and at the best run (the best is what a quiet machine gives).
// Run: npx tsx bench/matmulnbits.ts   Env: KIWI_MM_VARIANTS (bits:block:accuracy list, e.g.
// "4:32:4,4:64:4"; a fourth field `zp` adds uint8 zero points, as the fast layout has), KIWI_MM_PAIRS (default 24: ~450 MB at 4 bits, past this CPU's 300 MiB L3),
// KIWI_MM_ROUNDS (5). Writes bench/results/matmulnbits.json.
import * as ort from 'onnxruntime-node';
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GraphBuilder, MS_DOMAIN, encodeModel, f32Bytes } from '../electron/engine/ort/onnx-graph.js';

const PAIRS = Number(process.env.KIWI_MM_PAIRS ?? 24);
const ROUNDS = Number(process.env.KIWI_MM_ROUNDS ?? 5);
const RUNS = 10;
const variants = (process.env.KIWI_MM_VARIANTS ?? '4:32:4,4:64:4,4:128:4,4:128:4:zp,4:32:0,8:32:4').split(',').map((v) => {
  const [bits, block, acc] = v.split(':').slice(0, 3).map(Number) as [number, number, number];
  return { name: v, bits, block, acc, zp: v.endsWith(':zp') };
});

function rand(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13; s ^= s >>> 17; s ^= s << 5;
    out[i] = s & 255;
  }
  return out;
}

function build(bits: number, block: number, acc: number, zp: boolean): Uint8Array {
  const g = new GraphBuilder('mm');
  let x = g.input('x', 'float32', [1, 1, 2048]);
  const lin = (input: string, n: number, k: number, name: string): string => {
    const blocks = k / block;
    const scales = new Float32Array(n * blocks).fill(0.01);
    return g.op('MatMulNBits', [
      input,
      g.initializer(`${name}.B`, 'uint8', [n, blocks, (block * bits) / 8], rand((n * k * bits) / 8, n + k + name.length * 7919)),
      g.initializer(`${name}.s`, 'float32', [n * blocks], f32Bytes(scales)),
      ...(zp ? [g.initializer(`${name}.zp`, 'uint8', [n * Math.ceil((blocks * bits) / 8)], rand(n * Math.ceil((blocks * bits) / 8), n + k + 1))] : []),
    ], { domain: MS_DOMAIN, attrs: { K: k, N: n, bits, block_size: block, accuracy_level: acc } });
  };
  for (let i = 0; i < PAIRS; i++) x = lin(lin(x, 8192, 2048, `up${i}`), 2048, 8192, `down${i}`);
  g.op('Identity', [x], { output: 'y' });
  g.output('y', 'float32', [1, 1, 2048]);
  return encodeModel(g).model;
}

const sessions = [];
for (const v of variants) {
  const s = await ort.InferenceSession.create(build(v.bits, v.block, v.acc, v.zp), { executionProviders: ['cpu'], intraOpNumThreads: 2, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all', logSeverityLevel: 3 });
  sessions.push({ ...v, s, times: [] as number[] });
}
const feeds = { x: new ort.Tensor('float32', new Float32Array(2048).fill(0.1), [1, 1, 2048]) };
for (const v of sessions) await v.s.run(feeds);
for (let r = 0; r < ROUNDS; r++) {
  for (const v of sessions) {
    for (let i = 0; i < RUNS; i++) {
      const t = performance.now();
      await v.s.run(feeds);
      v.times.push(performance.now() - t);
    }
  }
}
const weights = PAIRS * 2 * 8192 * 2048;
const rows = [];
console.log(`${PAIRS} feed-forward pairs, ${weights / 1e6} M weights; load ${os.loadavg()[0]!.toFixed(2)}`);
console.log('bits:block:accuracy\tmedian_ms\tbest_ms\tgguf_GB/s_median\tgguf_GB/s_best');
for (const v of sessions) {
  const t = [...v.times].sort((a, b) => a - b);
  const med = t[t.length >> 1]!;
  const ggufBytes = (weights * (v.bits === 4 ? 4.5 : 8.5)) / 8;
  const row = { variant: v.name, median_ms: med, best_ms: t[0]!, gbps_median: ggufBytes / med / 1e6, gbps_best: ggufBytes / t[0]! / 1e6 };
  rows.push(row);
  console.log(`${v.name}\t${med.toFixed(2)}\t${row.best_ms.toFixed(2)}\t${row.gbps_median.toFixed(1)}\t${row.gbps_best.toFixed(1)}`);
  await v.s.release();
}
const out = join(fileURLToPath(new URL('.', import.meta.url)), 'results');
await mkdir(out, { recursive: true });
await writeFile(join(out, 'matmulnbits.json'), `${JSON.stringify({ date: new Date().toISOString(), loadavg: os.loadavg(), pairs: PAIRS, rows }, null, 1)}\n`);
