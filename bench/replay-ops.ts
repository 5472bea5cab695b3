// Which ops of a stage graph give a row different bits in one n-row call than in n one-row calls
// (issue 15's one-prefill replay, runtime/replay.ts)? Each op alone in a tiny graph, random inputs,
// onnxruntime's CPU provider at 1 and 2 threads: MatMulNBits (4 and 8 bits, accuracy levels 0 and
// 4, also against 2-row calls), float MatMul, GroupQueryAttention (n new positions after 0 and 5
// cached ones: its output and the K/V it writes), SkipSimplifiedLayerNormalization.
// Run: npx tsx bench/replay-ops.ts   Prints one line per op.
import { createStageSession, f32Tensor, i32Tensor, tensorF32, type OrtTensor } from '../electron/engine/ort/session.js';
import { GraphBuilder, MS_DOMAIN, encodeModel, f32Bytes } from '../electron/engine/ort/onnx-graph.js';
import { matmulNBitsGraph } from '../electron/engine/runtime/replay-exactness.js';
let seed = 7;
const rnd = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff) * 2 - 1;
const f32 = (n: number) => Float32Array.from({ length: n }, rnd);
async function sess(g: GraphBuilder, threads: number) {
  const s = await createStageSession(encodeModel(g).model, { provider: 'cpu', threads });
  return { run: async (feeds: Record<string, OrtTensor>, fetches?: readonly string[]) => Object.fromEntries(Object.entries(await s.run(feeds, fetches)).map(([k, v]) => [k, { data: tensorF32(v, k) }])) };
}
const same = (a: Float32Array, b: Float32Array) => { let d = 0, c = 0; for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) { c++; d = Math.max(d, Math.abs(a[i]! - b[i]!)); } return c === 0 ? 'identical' : `${c}/${a.length} differ, max ${d.toExponential(2)}`; };
async function matmulNBits(bits: 4 | 8, acc: 0 | 4, threads: number, n: number) {
  const K = 1024, N = 512, bs = 32;
  const B = new Uint8Array(N * (K / bs) * (bs * bits) / 8).map(() => Math.floor(Math.random() * 256));
  const g = matmulNBitsGraph({ bits, accuracyLevel: acc, K, N, weights: B, scales: f32(N * K / bs).map((v) => v * 0.01) });
  const s = await sess(g, threads);
  const X = f32(n * K);
  const all = (await s.run({ x: f32Tensor(X, [1, n, K]) })).y!.data as Float32Array;
  const one = new Float32Array(n * N);
  for (let i = 0; i < n; i++) one.set((await s.run({ x: f32Tensor(X.subarray(i * K, (i + 1) * K), [1, 1, K]) })).y!.data as Float32Array, i * N);
  // pairs: rows as M=2 calls
  const two = new Float32Array(n * N);
  for (let i = 0; i + 1 < n; i += 2) two.set((await s.run({ x: f32Tensor(X.subarray(i * K, (i + 2) * K), [1, 2, K]) })).y!.data as Float32Array, i * N);
  console.log(`MatMulNBits bits ${bits} acc ${acc} threads ${threads} M=${n}: vs M=1 ${same(all, one)}; vs M=2 ${same(all.subarray(0, Math.floor(n / 2) * 2 * N), two.subarray(0, Math.floor(n / 2) * 2 * N))}`);
}
async function gqa(threads: number, n: number, past: number) {
  const H = 4, KV = 2, D = 16, maxPos = 256;
  const g = new GraphBuilder('g');
  const q = g.input('q', 'float32', [1, 'seq', H * D]), k = g.input('k', 'float32', [1, 'seq', KV * D]), v = g.input('v', 'float32', [1, 'seq', KV * D]);
  const pk = g.input('pk', 'float32', [1, KV, 'p', D]), pv = g.input('pv', 'float32', [1, KV, 'p', D]);
  const sl = g.input('sl', 'int32', [1]), tot = g.input('tot', 'int32', []);
  const cos = g.initializer('cos', 'float32', [maxPos, D / 2], f32Bytes(f32(maxPos * D / 2))), sin = g.initializer('sin', 'float32', [maxPos, D / 2], f32Bytes(f32(maxPos * D / 2)));
  g.node('GroupQueryAttention', [q, k, v, pk, pv, sl, tot, cos, sin], { domain: MS_DOMAIN, attrs: { num_heads: H, kv_num_heads: KV, do_rotary: 1, rotary_interleaved: 1, scale: { float: 0.25 } }, outputs: ['a', 'ok', 'ov'] });
  for (const o of ['a']) g.output(o, 'float32', [1, 'seq', H * D]);
  g.output('ok', 'float32', [1, KV, 't', D]); g.output('ov', 'float32', [1, KV, 't', D]);
  const s = await sess(g, threads);
  const cap = 256;
  const Q = f32(n * H * D), Kx = f32(n * KV * D), Vx = f32(n * KV * D);
  const base = f32(KV * cap * D), baseV = f32(KV * cap * D);
  const t = (a: Float32Array, d: number[]) => f32Tensor(a, d);
  const i32 = (v: number) => i32Tensor(Int32Array.of(v), [1]);
  const run = async (K: Float32Array, V: Float32Array, len: number, from: number, m: number) => {
    const kt = t(K, [1, KV, cap, D]), vt = t(V, [1, KV, cap, D]);
    const r = await s.run({ q: t(Q.slice(from * H * D, (from + m) * H * D), [1, m, H * D]), k: t(Kx.slice(from * KV * D, (from + m) * KV * D), [1, m, KV * D]), v: t(Vx.slice(from * KV * D, (from + m) * KV * D), [1, m, KV * D]), pk: kt, pv: vt, sl: i32(len + m - 1), tot: i32Tensor(Int32Array.of(len + m), []) }, ['a', 'ok', 'ov']);
    // The presents become the caches of the next run (as GroupQueryAttention's shared buffer would update them).
    K.set(r.ok!.data);
    V.set(r.ov!.data);
    return r.a!.data as Float32Array;
  };
  const K1 = base.slice(), V1 = baseV.slice(), K2 = base.slice(), V2 = baseV.slice();
  const all = await run(K1, V1, past, 0, n);
  const one = new Float32Array(n * H * D);
  for (let i = 0; i < n; i++) one.set(await run(K2, V2, past + i, i, 1), i * H * D);
  console.log(`GQA threads ${threads} past ${past} n ${n}: attn ${same(all, one)}; K cache ${same(K1, K2)}; V cache ${same(V1, V2)}`);
}
async function floatMatMul(threads: number, n: number) {
  const K = 256, N = 384; const g = new GraphBuilder('f');
  const x = g.input('x', 'float32', [1, 'seq', K]);
  const y = g.op('MatMul', [x, g.initializer('w', 'float32', [K, N], f32Bytes(f32(K * N)))]);
  g.op('Identity', [y], { output: 'y' }); g.output('y', 'float32', [1, 'seq', N]);
  const s = await sess(g, threads); const X = f32(n * K);
  const all = (await s.run({ x: f32Tensor(X, [1, n, K]) })).y!.data as Float32Array;
  const one = new Float32Array(n * N);
  for (let i = 0; i < n; i++) one.set((await s.run({ x: f32Tensor(X.slice(i * K, (i + 1) * K), [1, 1, K]) })).y!.data as Float32Array, i * N);
  console.log(`MatMul (float weights) threads ${threads} M=${n}: vs M=1 ${same(all, one)}`);
}
async function norm(threads: number, n: number) {
  const Hd = 512; const g = new GraphBuilder('n');
  const x = g.input('x', 'float32', [1, 'seq', Hd]), br = g.input('br', 'float32', [1, 'seq', Hd]);
  const gm = g.initializer('g', 'float32', [Hd], f32Bytes(f32(Hd)));
  g.node('SkipSimplifiedLayerNormalization', [br, x, gm], { domain: MS_DOMAIN, attrs: { epsilon: { float: 1e-5 } }, outputs: ['y', '', '', 'sum'] });
  g.output('y', 'float32', [1, 'seq', Hd]); g.output('sum', 'float32', [1, 'seq', Hd]);
  const s = await sess(g, threads); const X = f32(n * Hd), Bx = f32(n * Hd);
  const all = (await s.run({ x: f32Tensor(X, [1, n, Hd]), br: f32Tensor(Bx, [1, n, Hd]) })).y!.data as Float32Array;
  const one = new Float32Array(n * Hd);
  for (let i = 0; i < n; i++) one.set((await s.run({ x: f32Tensor(X.slice(i * Hd, (i + 1) * Hd), [1, 1, Hd]), br: f32Tensor(Bx.slice(i * Hd, (i + 1) * Hd), [1, 1, Hd]) })).y!.data as Float32Array, i * Hd);
  console.log(`SkipSimplifiedLayerNorm threads ${threads} n ${n}: ${same(all, one)}`);
}
async function main() { for (const th of [1, 2]) {
  for (const bits of [4, 8] as const) for (const acc of [0, 4] as const) await matmulNBits(bits, acc, th, 9);
  await gqa(th, 9, 5); await gqa(th, 9, 0); await norm(th, 9); await floatMatMul(th, 9);
} }
void main();
