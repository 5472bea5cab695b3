// Microbenchmark of the K-quant forms of a decode-sized matmul (M = 1) on the CPU: a chain of
// Llama-3.2-1B feed-forward pairs (2048 -> 8192 -> 2048), rounds alternating between variants:
//   q4_0      MatMulNBits 4-bit block 32, implied zero point (the Q4_0 reference)
//   q4k-fzp   Q4_K as MatMulNBits with float zero points (what Kiwi built before: not prepacked)
//   q4k-split Q4_K as MatMulNBits without zero points + MatMul(blockSums(x), offsets) (stage-graph.ts)
//   q6k       Q6_K as MatMulNBits 8-bit block 16 (implied zero point 128)
// Run: npx tsx bench/matmulnbits-kquant.ts   Env: KIWI_MM_PAIRS (default 8), KIWI_MM_ROUNDS (3),
// KIWI_MM_ACC (accuracy level, 4), KIWI_MM_VARIANTS (comma list of the names above).
import * as ort from 'onnxruntime-node';
import os from 'node:os';
import { GraphBuilder, MS_DOMAIN, encodeModel, f32Bytes } from '../electron/engine/ort/onnx-graph.js';

const PAIRS = Number(process.env.KIWI_MM_PAIRS ?? 8);
const ROUNDS = Number(process.env.KIWI_MM_ROUNDS ?? 3);
const ACC = Number(process.env.KIWI_MM_ACC ?? 4);
const RUNS = 5;
const names = (process.env.KIWI_MM_VARIANTS ?? 'q4_0,q4k-split,q4k-fzp,q6k').split(',');

function rand(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13; s ^= s >>> 17; s ^= s << 5;
    out[i] = s & 255;
  }
  return out;
}

function build(variant: string): Uint8Array {
  const g = new GraphBuilder('mm');
  let x = g.input('x', 'float32', [1, 1, 2048]);
  const bits = variant === 'q6k' ? 8 : 4;
  const block = variant === 'q6k' ? 16 : 32;
  const lin = (input: string, n: number, k: number, name: string): string => {
    const blocks = k / block;
    const scales = f32Bytes(new Float32Array(n * blocks).fill(0.01));
    const inputs = [
      input,
      g.initializer(`${name}.B`, 'uint8', [n, blocks, (block * bits) / 8], rand((n * k * bits) / 8, n + k + name.length * 7919)),
      g.initializer(`${name}.s`, 'float32', [n * blocks], scales),
    ];
    if (variant === 'q4k-fzp') inputs.push(g.initializer(`${name}.zp`, 'float32', [n * blocks], f32Bytes(new Float32Array(n * blocks).fill(7.3))));
    let y = g.op('MatMulNBits', inputs, { domain: MS_DOMAIN, attrs: { K: k, N: n, bits, block_size: block, accuracy_level: ACC } });
    if (variant === 'q4k-split') {
      const sums = g.op('ReduceSum', [g.op('Reshape', [input, g.int64s(`${name}.r`, [0, 0, blocks, block])]), g.int64s(`${name}.ax`, [-1])], { attrs: { keepdims: 0 } });
      const off = g.initializer(`${name}.off`, 'float32', [blocks, n], f32Bytes(new Float32Array(n * blocks).fill(0.003)));
      y = g.op('Add', [y, g.op('MatMul', [sums, off])]);
    }
    return y;
  };
  for (let i = 0; i < PAIRS; i++) x = lin(lin(x, 8192, 2048, `up${i}`), 2048, 8192, `down${i}`);
  g.op('Identity', [x], { output: 'y' });
  g.output('y', 'float32', [1, 1, 2048]);
  return encodeModel(g).model;
}

const sessions = [];
for (const name of names) {
  const t = performance.now();
  const s = await ort.InferenceSession.create(build(name), { executionProviders: ['cpu'], intraOpNumThreads: 2, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all', logSeverityLevel: 3 });
  sessions.push({ name, s, times: [] as number[], createMs: performance.now() - t });
}
const feeds = { x: new ort.Tensor('float32', new Float32Array(2048).fill(0.1), [1, 1, 2048]) };
for (const v of sessions) await v.s.run(feeds);
for (let r = 0; r < ROUNDS; r++) {
  for (const v of sessions) {
    for (let i = 0; i < (v.name === 'q4k-fzp' ? 1 : RUNS); i++) {
      const t = performance.now();
      await v.s.run(feeds);
      v.times.push(performance.now() - t);
    }
  }
}
console.log(`${PAIRS} feed-forward pairs (${PAIRS * 2} matmuls of 2048x8192), accuracy_level ${ACC}, 2 threads; load ${os.loadavg()[0]!.toFixed(2)}`);
console.log('variant\tms_per_matmul_median\tms_per_matmul_best\tsession_ms');
for (const v of sessions) {
  const t = [...v.times].sort((a, b) => a - b);
  console.log(`${v.name}\t${(t[t.length >> 1]! / (2 * PAIRS)).toFixed(3)}\t${(t[0]! / (2 * PAIRS)).toFixed(3)}\t${v.createMs.toFixed(0)}`);
  await v.s.release();
}
