// Which of the stage graph's operators onnxruntime-node's CPU provider runs in fp16: each op is
// built alone with fp16 inputs, run on the CPU and compared with the same op in f32. This pins
// what an fp16 stage graph (issue 20) may use on the CPU; a change of onnxruntime that adds or
// drops a kernel fails here and tells which.
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { f16BitsToF32, f32ToF16Bits } from '../model/gguf/quant/half.js';
import { GraphBuilder, MS_DOMAIN, encodeModel, type AttrValue } from '../ort/onnx-graph.js';

type Precision = 'float32' | 'float16';
interface OpCase {
  name: string;
  op: string;
  domain?: string;
  attrs?: Record<string, AttrValue>;
  /** Float inputs (converted to the precision), then the int32 ones. */
  floats: Array<{ name: string; dims: number[]; data: number[]; init?: boolean }>;
  ints?: Array<{ name: string; dims: number[]; data: number[] }>;
  uint8?: Array<{ name: string; dims: number[]; data: number[] }>;
  /** Input order as the op wants it (names from above; '' for an absent optional input). */
  order: string[];
  outputs: number;
  outDims: Array<(string | number)[]>;
}

const seq = <T>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));
const halfBytes = (data: number[]): Uint8Array => new Uint8Array(Uint16Array.from(data.map(f32ToF16Bits)).buffer);

function model(c: OpCase, p: Precision): Uint8Array {
  const g = new GraphBuilder(c.name);
  const names = new Map<string, string>();
  for (const f of c.floats) {
    if (f.init === true) {
      const bytes = p === 'float32' ? new Uint8Array(Float32Array.from(f.data).buffer) : halfBytes(f.data);
      names.set(f.name, g.initializer(f.name, p, f.dims, bytes));
    } else names.set(f.name, g.input(f.name, p, f.dims));
  }
  for (const t of c.ints ?? []) names.set(t.name, g.input(t.name, 'int32', t.dims));
  for (const t of c.uint8 ?? []) names.set(t.name, g.initializer(t.name, 'uint8', t.dims, Uint8Array.from(t.data)));
  const outs = seq(c.outputs, (i) => `y${i}`);
  g.node(c.op, c.order.map((n) => (n === '' ? '' : names.get(n)!)), { outputs: outs, attrs: c.attrs ?? {}, ...(c.domain !== undefined ? { domain: c.domain } : {}) });
  outs.forEach((o, i) => g.output(o, p, c.outDims[i]!));
  return encodeModel(g).model;
}

/** Runs the op on the CPU provider; returns its outputs as f32, or the error message. */
async function runOp(c: OpCase, p: Precision): Promise<number[][] | string> {
  let session: ort.InferenceSession | undefined;
  try {
    session = await ort.InferenceSession.create(model(c, p), { executionProviders: ['cpu'], logSeverityLevel: 4, graphOptimizationLevel: 'disabled' });
    const feeds: Record<string, ort.Tensor> = {};
    for (const f of c.floats) {
      if (f.init === true) continue;
      feeds[f.name] = p === 'float32'
        ? new ort.Tensor('float32', Float32Array.from(f.data), f.dims)
        : new ort.Tensor('float16', Uint16Array.from(f.data.map(f32ToF16Bits)), f.dims);
    }
    for (const t of c.ints ?? []) feeds[t.name] = new ort.Tensor('int32', Int32Array.from(t.data), t.dims);
    const out = await session.run(feeds);
    return seq(c.outputs, (i) => {
      const t = out[`y${i}`]!;
      return t.type === 'float16' ? Array.from(t.data as Uint16Array, f16BitsToF32) : Array.from(t.data as Float32Array);
    });
  } catch (err) {
    return (err as Error).message.split('\n')[0]!;
  } finally {
    await session?.release();
  }
}

const H = 16; // hidden / head size
const x = seq(2 * H, (i) => Math.sin(i * 0.7) * 0.8);
const skip = seq(2 * H, (i) => Math.cos(i * 0.3) * 0.5);
const gamma = seq(H, (i) => 0.5 + i / H);
const CASES: OpCase[] = [
  { name: 'Add', op: 'Add', floats: [{ name: 'a', dims: [2, H], data: x }, { name: 'b', dims: [2, H], data: skip }], order: ['a', 'b'], outputs: 1, outDims: [[2, H]] },
  { name: 'Mul', op: 'Mul', floats: [{ name: 'a', dims: [2, H], data: x }, { name: 'b', dims: [2, H], data: skip }], order: ['a', 'b'], outputs: 1, outDims: [[2, H]] },
  { name: 'Sigmoid', op: 'Sigmoid', floats: [{ name: 'a', dims: [2, H], data: x }], order: ['a'], outputs: 1, outDims: [[2, H]] },
  {
    name: 'MatMul', op: 'MatMul', order: ['a', 'w'], outputs: 1, outDims: [[2, 3]],
    floats: [{ name: 'a', dims: [2, H], data: x }, { name: 'w', dims: [H, 3], data: seq(3 * H, (i) => ((i % 7) - 3) / 8), init: true }],
  },
  {
    name: 'SimplifiedLayerNormalization', op: 'SimplifiedLayerNormalization', attrs: { axis: -1, epsilon: { float: 1e-5 } },
    floats: [{ name: 'a', dims: [1, 2, H], data: x }, { name: 'g', dims: [H], data: gamma, init: true }], order: ['a', 'g'], outputs: 1, outDims: [[1, 2, H]],
  },
  {
    name: 'SkipSimplifiedLayerNormalization', op: 'SkipSimplifiedLayerNormalization', domain: MS_DOMAIN, attrs: { epsilon: { float: 1e-5 } },
    floats: [{ name: 'a', dims: [1, 2, H], data: x }, { name: 's', dims: [1, 2, H], data: skip }, { name: 'g', dims: [H], data: gamma, init: true }],
    order: ['a', 's', 'g'], outputs: 1, outDims: [[1, 2, H]],
  },
  ...([0, 4] as const).map((level): OpCase => ({
    name: `MatMulNBits (4-bit, accuracy_level ${level})`, op: 'MatMulNBits', domain: MS_DOMAIN,
    attrs: { K: 32, N: 2, bits: 4, block_size: 32, accuracy_level: level },
    floats: [{ name: 'a', dims: [1, 1, 32], data: seq(32, (i) => Math.sin(i) * 0.5) }, { name: 'scales', dims: [2], data: [0.05, 0.02], init: true }],
    uint8: [{ name: 'b', dims: [2, 1, 16], data: seq(32, (i) => (i * 37) % 256) }],
    order: ['a', 'b', 'scales'], outputs: 1, outDims: [[1, 1, 2]],
  })),
  {
    name: 'GroupQueryAttention (prefill of 2, rotary)', op: 'GroupQueryAttention', domain: MS_DOMAIN,
    attrs: { num_heads: 1, kv_num_heads: 1, do_rotary: 1, rotary_interleaved: 1, scale: { float: 0.25 } },
    floats: [
      { name: 'q', dims: [1, 2, H], data: x }, { name: 'k', dims: [1, 2, H], data: skip }, { name: 'v', dims: [1, 2, H], data: gamma.concat(gamma) },
      { name: 'pk', dims: [1, 1, 0, H], data: [] }, { name: 'pv', dims: [1, 1, 0, H], data: [] },
      { name: 'cos', dims: [4, H / 2], data: seq(4 * H / 2, (i) => Math.cos(Math.floor(i / 8) * 0.1 * ((i % 8) + 1))), init: true },
      { name: 'sin', dims: [4, H / 2], data: seq(4 * H / 2, (i) => Math.sin(Math.floor(i / 8) * 0.1 * ((i % 8) + 1))), init: true },
    ],
    ints: [{ name: 'seqlens', dims: [1], data: [1] }, { name: 'total', dims: [], data: [2] }],
    order: ['q', 'k', 'v', 'pk', 'pv', 'seqlens', 'total', 'cos', 'sin'], outputs: 3, outDims: [[1, 2, H], [1, 1, 2, H], [1, 1, 2, H]],
  },
];

describe('fp16 kernels of the CPU provider (onnxruntime-node 1.30)', () => {
  it('reports which stage-graph operators run in fp16 on the CPU, each within fp16 rounding of the f32 op', async () => {
    const report: Record<string, string> = {};
    for (const c of CASES) {
      const ref = await runOp(c, 'float32');
      if (typeof ref === 'string') throw new Error(`${c.name} f32: ${ref}`);
      const half = await runOp(c, 'float16');
      if (typeof half === 'string') {
        report[c.name] = `no fp16 kernel: ${half}`;
        continue;
      }
      let maxErr = 0;
      ref.forEach((r, i) => r.forEach((v, j) => (maxErr = Math.max(maxErr, Math.abs(v - half[i]![j]!) / Math.max(1, Math.abs(v))))));
      report[c.name] = maxErr < 1e-2 ? 'fp16 ok' : `fp16 wrong (max rel err ${maxErr})`;
    }
    // Measured with 1.30: every one has an fp16 CPU kernel (a failing entry names the op and onnxruntime's reason).
    expect(report).toEqual(Object.fromEntries(CASES.map((c) => [c.name, 'fp16 ok'])));
  });
});
