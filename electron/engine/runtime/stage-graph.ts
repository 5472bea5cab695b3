// Builds the ONNX graph of one pipeline stage: decoder layers [start, end) of a Llama-family
// model, plus the head (final RMSNorm + output projection) when the stage is the head. The
// embedding lookup of the first stage happens outside the graph (embedding.ts: rows are
// dequantized on demand, so the table stays compact). Pure: takes the decoder shape and
// already-converted weights, returns a GraphBuilder. Read the forward pass top to bottom.
import { GraphBuilder, MS_DOMAIN, f32Bytes } from '../ort/onnx-graph.js';
import type { AttrValue, ElemType, GraphBuilderOptions } from '../ort/onnx-graph.js';
import { f32ToF16Bits } from '../model/gguf/quant/half.js';
import { ropeCaches } from './rope.js';
import { linearToF32 } from './weights/repack.js';
import { KiwiError } from '../errors.js';
import type { RopeSettings } from './rope.js';

/** What the graph needs to know about the model (a subset of the model config). */
export interface DecoderShape {
  blockCount: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocab: number;
  rmsEps: number;
  rope: RopeSettings;
  /** llama.cpp's `llama` converter permutes q/k so adjacent pairs rotate (rope NORM); qwen2/3 use NEOX halves. */
  ropeInterleaved: boolean;
  /** Largest position a request may reach (size of the cos/sin caches). */
  maxPositions: number;
}

/** A linear layer y = x W^T with W [n, k] (n outputs, k inputs), as stored in GGUF (ne0 = k). */
export type LinearWeight =
  | { kind: 'float'; n: number; k: number; /** [n, k] row-major f32 */ weight: Float32Array }
  | {
      kind: 'nbits';
      n: number;
      k: number;
      bits: 4 | 8;
      blockSize: number;
      /** [n, k / blockSize, blockSize * bits / 8] uint8 (MatMulNBits B) */
      b: Uint8Array;
      /** [n * k / blockSize] f32 */
      scales: Float32Array;
      /**
       * [n * k / blockSize] f32 per-block offsets (Q4_K's mins): w = scale * (u - 8 or 128) + offset.
       * The graph adds MatMul(blockSums(x), offsets) to a MatMulNBits without zero points, which
       * onnxruntime prepacks (float zero points are not prepacked: ~40x slower decode).
       */
      blockOffsets?: Float32Array;
      /**
       * [n, ceil(k / blockSize * bits / 8)] uint8 zero points, two 4-bit ones a byte (low nibble
       * first): w = scale * (u - zero point). Absent: 8 or 128. The fast layout's requantized blocks.
       */
      zeroPoints?: Uint8Array;
    };

export interface LayerWeights {
  attnNorm: Float32Array; // [hidden]
  q: LinearWeight; // [heads*headDim, hidden]
  k: LinearWeight; // [kvHeads*headDim, hidden]
  v: LinearWeight; // [kvHeads*headDim, hidden]
  qBias?: Float32Array; // [heads*headDim] (qwen2)
  kBias?: Float32Array; // [kvHeads*headDim]
  vBias?: Float32Array; // [kvHeads*headDim]
  qNorm?: Float32Array; // [headDim] (qwen3)
  kNorm?: Float32Array; // [headDim]
  o: LinearWeight; // [hidden, heads*headDim]
  ffnNorm: Float32Array; // [hidden]
  gate: LinearWeight; // [ffn, hidden]
  up: LinearWeight; // [ffn, hidden]
  down: LinearWeight; // [hidden, ffn]
}

export interface StageWeights {
  start: number;
  end: number;
  layers: LayerWeights[];
  /** Present when the stage is the head. */
  head?: { norm: Float32Array /* [hidden] */; output: LinearWeight /* [vocab, hidden] */ };
}

export interface StageGraphOptions {
  /** MatMulNBits accuracy_level: 0 = activations stay f32 (exact mode), 4 = int8 activations (faster). */
  accuracyLevel: 0 | 4;
  /**
   * Precision inside the stage: fp16 keeps activations, norms, rope caches, scales and the KV
   * cache (past/present inputs and outputs) in fp16, with a Cast at hidden_in and at
   * hidden_out/logits/hidden_norm, so what crosses to the next stage stays f32 (the link policy
   * then encodes it). Default fp32; stagePrecisionFor() picks per execution provider.
   */
  precision?: StagePrecision;
  /**
   * Add the replay inputs (runtime/replay.ts): a row of generated tokens then runs as their decode
   * steps in one pass. Every run must feed them (replayFeeds). Default off; ring stages have them
   * (stage.ts prepareModel).
   */
  replayInputs?: boolean;
}

export type StagePrecision = 'fp32' | 'fp16';

/**
 * fp16 for the GPU providers (onnxruntime's CUDA GroupQueryAttention wants fp16), fp32 on the CPU:
 * the CPU provider runs the fp16 graph (fp16-cpu-kernels.test.ts, stage-graph-fp16.test.ts) but its
 * fp16 MatMulNBits/GQA kernels are not faster there, and fp32 keeps the same tokens as llama.cpp.
 */
export function stagePrecisionFor(provider: 'cuda' | 'dml' | 'cpu'): StagePrecision {
  return provider === 'cpu' ? 'fp32' : 'fp16';
}

/** ONNX TensorProto data types for Cast's `to`. */
const ONNX_FLOAT = 1;
const ONNX_FLOAT16 = 10;
const ONNX_INT64 = 7;
const ONNX_BOOL = 9;

/** IEEE half bytes (little endian) of `a`, rounded to nearest. */
export function f16Bytes(a: Float32Array): Uint8Array {
  const h = new Uint16Array(a.length);
  for (let i = 0; i < a.length; i++) h[i] = f32ToF16Bits(a[i]!);
  return new Uint8Array(h.buffer);
}

/** Names of the stage graph's inputs and outputs (the stage runner's contract). */
export const IO = {
  hiddenIn: 'hidden_in', // [batch, seq, hidden] f32
  seqlensK: 'seqlens_k', // [batch] int32: total length - 1 per row
  totalSeqLen: 'total_sequence_length', // [] int32
  pastKey: (layer: number) => `past_key.${layer}`, // [batch, kvHeads, past, headDim] f32
  pastValue: (layer: number) => `past_value.${layer}`,
  // The K/V positions a run adds, [batch, kvHeads, seq, headDim] (row b's from seqlens_k[b] + 1 - seq):
  // the caller writes them into its cache. GQA's whole present K/V stay inside the graph, because
  // onnxruntime-node copies every fetched output into a new buffer, bound or not: fetching the
  // present cost each step a copy of the whole cache (bench/kv-position.ts).
  newKey: (layer: number) => `new_key.${layer}`,
  newValue: (layer: number) => `new_value.${layer}`,
  hiddenOut: 'hidden_out', // [batch, seq, hidden] f32
  logits: 'logits', // [batch, tail, vocab] f32: the last `tail` positions (default 1)
  logitsFrom: 'logits_from', // [1] int64, the head's: -tail (-1: the last position; speculative verification asks for k+1)
  hiddenNorm: 'hidden_norm', // [batch, seq, hidden] f32: the head's final norm of every position (embeddings), fetched only on request
  // Replay (runtime/replay.ts): one row of `seq` tokens whose attention runs as `seq` decode rows.
  replay: 'replay', // [1] int32: 1 = replay the row's positions as decode steps, 0 = a plain step
  replaySeqlensK: 'replay_seqlens_k', // [rows] int32: each replayed position's own total length - 1 ([0] in a plain step)
  replayTotal: 'replay_total', // [] int32: the row's total length after the step (1 in a plain step)
} as const;

/**
 * onnxruntime's GroupQueryAttention needs head_size % 16 == 0 (CPU kernel check). Smaller heads
 * (toy models such as stories260K, head 8) are zero-padded: q/k/v get zero rows, the output
 * projection zero columns, and the padded rope pairs rotate by 0. Dot products and outputs are
 * unchanged; only the adjacent-pair (interleaved) rope layout allows this simple padding.
 */
export function attentionHeadDim(shape: Pick<DecoderShape, 'headDim' | 'ropeInterleaved'>): number {
  const padded = Math.ceil(shape.headDim / 16) * 16;
  if (padded !== shape.headDim && !shape.ropeInterleaved) {
    throw new KiwiError('MODEL_UNSUPPORTED', `head dimension ${shape.headDim} is not a multiple of 16, which Kiwi supports only with llama's rope layout`);
  }
  return padded;
}

export function buildStageGraph(shape: DecoderShape, w: StageWeights, opts: StageGraphOptions): GraphBuilder {
  const b = stageGraphBuilder(shape, w, opts);
  for (const lw of w.layers) b.addLayer(lw);
  return b.finish(w.head);
}

/**
 * The same graph built one layer at a time: addLayer for layers start, start+1, ... end-1 in order,
 * then finish (with the head's weights when the stage has the head). With a spilling builder
 * (`builder.spill`) each layer's weights go to disk as they are added, so a caller that loads one
 * layer at a time holds one layer's weights, not the stage's.
 */
export function stageGraphBuilder(
  shape: DecoderShape,
  range: { start: number; end: number },
  opts: StageGraphOptions,
  builder: GraphBuilderOptions = {},
): { graph: GraphBuilder; addLayer(lw: LayerWeights): void; finish(head: StageWeights['head']): GraphBuilder } {
  const w = { start: range.start, end: range.end };
  const g = new GraphBuilder(`stage_${w.start}_${w.end}`, builder);
  let added = 0;
  const { hidden, heads, kvHeads } = shape;
  const headDim = attentionHeadDim(shape); // as seen by attention (padded)
  const eps = { float: shape.rmsEps };
  // fp16: every float inside the stage (activations, weights kept as floats, KV cache) is half.
  const fp16 = opts.precision === 'fp16';
  const ft: ElemType = fp16 ? 'float16' : 'float32';
  const fb = (a: Float32Array): Uint8Array => (fp16 ? f16Bytes(a) : f32Bytes(a));
  const toF32 = (t: string): string => (fp16 ? g.op('Cast', [t], { attrs: { to: ONNX_FLOAT } }) : t);

  // Stage input: embedded tokens (first stage) or the previous stage's hidden states.
  let x = g.input(IO.hiddenIn, 'float32', ['batch', 'seq', hidden]); // [batch, seq, hidden] f32
  if (fp16) x = g.op('Cast', [x], { attrs: { to: ONNX_FLOAT16 }, hint: 'hidden_in_f16' }); // the wire stays f32
  const seqlensK = g.input(IO.seqlensK, 'int32', ['batch']);
  const totalSeqLen = g.input(IO.totalSeqLen, 'int32', []);
  const replay = opts.replayInputs === true ? replayInputs(g) : undefined;
  const newPositions = newPositionIndex(g, seqlensK, kvHeads, headDim);
  const rope = ropeCaches(shape.rope, shape.maxPositions, headDim / 2);
  const cos = g.initializer('rope_cos', ft, [shape.maxPositions, headDim / 2], fb(rope.cos));
  const sin = g.initializer('rope_sin', ft, [shape.maxPositions, headDim / 2], fb(rope.sin));
  const padHeads = (lw: LinearWeight, h: number) => padRows(lw, h, shape.headDim, headDim);
  const padBias = (b: Float32Array | undefined, h: number) => (b === undefined ? undefined : padVector(b, h, shape.headDim, headDim));

  // The residual stream: `x` plus the pending branch output `branch` not yet added to it, so the
  // add fuses into the next norm (SkipSimplifiedLayerNormalization output 3 = x + branch).
  // Split invariance: inside one graph every layer after the first starts with that fused norm;
  // a stage starting at layer L > 0 receives x + branch already summed (the same f32 add), so it
  // runs the same kernel with a zero branch: x + 0 is exact and the norm sees the same values.
  let branch: string | undefined =
    w.start > 0 ? castIf(g, g.op('ConstantOfShape', [g.op('Shape', [x])], { hint: 'zero_branch' }), fp16) : undefined; // [batch, seq, hidden] zeros
  const rmsNorm = (weight: Float32Array, name: string): string => {
    const gamma = g.initializer(name, ft, [hidden], fb(weight));
    if (branch === undefined) {
      return g.op('SimplifiedLayerNormalization', [x, gamma], { attrs: { axis: -1, epsilon: eps }, hint: name });
    }
    const [normed, , , sum] = g.node('SkipSimplifiedLayerNormalization', [branch, x, gamma], {
      domain: MS_DOMAIN,
      attrs: { epsilon: eps },
      outputs: 4,
      hint: name,
    });
    x = sum as string; // [batch, seq, hidden]
    branch = undefined;
    return normed as string; // [batch, seq, hidden]
  };
  const linear = (input: string, lw: LinearWeight, name: string, bias?: Float32Array): string => {
    let y: string;
    if (lw.kind === 'float') {
      // MatMul wants [k, n]: transpose GGUF's [n, k] once here.
      const t = new Float32Array(lw.n * lw.k);
      for (let r = 0; r < lw.n; r++) for (let c = 0; c < lw.k; c++) t[c * lw.n + r] = lw.weight[r * lw.k + c]!;
      y = g.op('MatMul', [input, g.initializer(name, ft, [lw.k, lw.n], fb(t))], { hint: name });
    } else {
      y = nbitsLinear(g, input, lw, name, opts.accuracyLevel, fp16);
    }
    if (bias !== undefined) y = g.op('Add', [y, g.initializer(`${name}.bias`, ft, [lw.n], fb(bias))]);
    return y;
  };
  // qwen3: RMSNorm over each head's vector. [batch, seq, h*headDim] -> same shape.
  const headNorm = (t: string, h: number, weight: Float32Array, name: string): string => {
    const split = g.op('Reshape', [t, g.int64s(`${name}.shape4`, [0, 0, h, headDim])]); // [batch, seq, h, headDim]
    const gamma = g.initializer(name, ft, [headDim], fb(weight));
    const normed = g.op('SimplifiedLayerNormalization', [split, gamma], { attrs: { axis: -1, epsilon: eps } });
    return g.op('Reshape', [normed, g.int64s(`${name}.shape3`, [0, 0, h * headDim])]); // [batch, seq, h*headDim]
  };

  const addLayer = (lw: LayerWeights): void => {
    const L = w.start + added++;
    if (L >= w.end) throw new Error(`stage graph ${w.start}-${w.end}: more layers than the range`);
    const p = `blk.${L}`;
    // --- attention ---
    const xn = rmsNorm(lw.attnNorm, `${p}.attn_norm`); // [batch, seq, hidden]
    let q = linear(xn, padHeads(lw.q, heads), `${p}.attn_q`, padBias(lw.qBias, heads)); // [batch, seq, heads*headDim]
    let k = linear(xn, padHeads(lw.k, kvHeads), `${p}.attn_k`, padBias(lw.kBias, kvHeads)); // [batch, seq, kvHeads*headDim]
    const v = linear(xn, padHeads(lw.v, kvHeads), `${p}.attn_v`, padBias(lw.vBias, kvHeads)); // [batch, seq, kvHeads*headDim]
    if ((lw.qNorm !== undefined || lw.kNorm !== undefined) && headDim !== shape.headDim) {
      throw new KiwiError('MODEL_UNSUPPORTED', 'q/k norm with a head dimension that is not a multiple of 16 is not supported');
    }
    if (lw.qNorm !== undefined) q = headNorm(q, heads, lw.qNorm, `${p}.attn_q_norm`);
    if (lw.kNorm !== undefined) k = headNorm(k, kvHeads, lw.kNorm, `${p}.attn_k_norm`);
    const pastK = g.input(IO.pastKey(L), ft, ['batch', kvHeads, 'past', headDim]);
    const pastV = g.input(IO.pastValue(L), ft, ['batch', kvHeads, 'past', headDim]);
    // GQA applies rope to q and k (positions from seqlens_k), appends k/v to the cache, attends causally.
    const gqaAttrs = {
      num_heads: heads,
      kv_num_heads: kvHeads,
      do_rotary: 1,
      rotary_interleaved: shape.ropeInterleaved ? 1 : 0,
      scale: { float: 1 / Math.sqrt(shape.headDim) }, // the real head size, not the padded one
    };
    const [attn] = g.node('GroupQueryAttention', [q, k, v, pastK, pastV, seqlensK, totalSeqLen, cos, sin], {
      domain: MS_DOMAIN,
      attrs: gqaAttrs,
      outputs: [`${p}.attn`, `${p}.present_key`, `${p}.present_value`],
      hint: `${p}.gqa`,
    }); // attn [batch, seq, heads*headDim]; present [batch, kvHeads, past buffer, headDim]
    for (const [present, out] of [[`${p}.present_key`, IO.newKey(L)], [`${p}.present_value`, IO.newValue(L)]] as const) {
      g.op('GatherElements', [present, newPositions], { attrs: { axis: 2 }, output: out });
      g.output(out, ft, ['batch', kvHeads, 'seq', headDim]);
    }
    const replayed = replay === undefined ? (attn as string) : replayAttention(g, replay, { q, k, v, attn: attn as string, presentK: `${p}.present_key`, presentV: `${p}.present_value`, cos, sin }, { heads, kvHeads, headDim, attrs: gqaAttrs, name: p });
    branch = linear(replayed, padColumns(lw.o, heads, shape.headDim, headDim), `${p}.attn_output`); // [batch, seq, hidden]
    // --- feed-forward (SwiGLU) ---
    const hn = rmsNorm(lw.ffnNorm, `${p}.ffn_norm`); // [batch, seq, hidden]
    const gate = linear(hn, lw.gate, `${p}.ffn_gate`); // [batch, seq, ffn]
    const up = linear(hn, lw.up, `${p}.ffn_up`); // [batch, seq, ffn]
    const silu = g.op('Mul', [gate, g.op('Sigmoid', [gate])]); // [batch, seq, ffn]
    branch = linear(g.op('Mul', [silu, up]), lw.down, `${p}.ffn_down`); // [batch, seq, hidden]
  };

  const finish = (head: StageWeights['head']): GraphBuilder => {
    if (w.start + added !== w.end) throw new Error(`stage graph ${w.start}-${w.end}: ${added} layers added`);
    if (head !== undefined) {
      // Embeddings pool the final norm of every position (llama.cpp's --embeddings): a side output
      // the generation loop never fetches.
      const full = branch !== undefined ? g.op('Add', [x, branch]) : x; // [batch, seq, hidden]
      const gammaAll = g.initializer('output_norm_all', ft, [hidden], fb(head.norm));
      nameOutput(g, toF32(g.op('SimplifiedLayerNormalization', [full, gammaAll], { attrs: { axis: -1, epsilon: eps }, hint: 'output_norm_all' })), IO.hiddenNorm);
      g.output(IO.hiddenNorm, 'float32', ['batch', 'seq', hidden]);
      // Only the last position is sampled (speculative verification: the last k+1): slice before
      // the (expensive) vocab projection.
      const from = g.input(IO.logitsFrom, 'int64', [1]);
      const last = (t: string, name: string): string =>
        g.op('Slice', [t, from, g.int64s(`${name}.ends`, [2 ** 31 - 1]), g.int64s(`${name}.axes`, [1])]);
      x = last(x, 'last_x'); // [batch, tail, hidden]
      if (branch !== undefined) branch = last(branch, 'last_branch'); // [batch, tail, hidden]
      const xn = rmsNorm(head.norm, 'output_norm'); // [batch, tail, hidden]
      nameOutput(g, toF32(linear(xn, head.output, 'output')), IO.logits); // [batch, tail, vocab]
      g.output(IO.logits, 'float32', ['batch', 'tail', shape.vocab]);
    } else {
      const out = branch !== undefined ? g.op('Add', [x, branch]) : x; // [batch, seq, hidden]
      nameOutput(g, toF32(out), IO.hiddenOut);
      g.output(IO.hiddenOut, 'float32', ['batch', 'seq', hidden]);
    }
    return g;
  };
  return { graph: g, addLayer, finish };
}

/**
 * A MatMulNBits linear [.., k] -> [.., n] (input rank 3: [batch, seq, k]), plus the block-offset
 * term when the weight has one: y += blockSums(x) . offsets, where x is reshaped to
 * [batch, seq, blocks, blockSize] and summed over the last axis; offsets are transposed to [blocks, n].
 */
export function nbitsLinear(g: GraphBuilder, input: string, lw: Extract<LinearWeight, { kind: 'nbits' }>, name: string, accuracyLevel: 0 | 4, fp16: boolean): string {
  const ft: ElemType = fp16 ? 'float16' : 'float32';
  const fb = (a: Float32Array): Uint8Array => (fp16 ? f16Bytes(a) : f32Bytes(a));
  const blocks = lw.k / lw.blockSize;
  const inputs = [
    input,
    g.initializer(`${name}.B`, 'uint8', [lw.n, blocks, (lw.blockSize * lw.bits) / 8], lw.b),
    g.initializer(`${name}.scales`, ft, [lw.n * blocks], fb(lw.scales)),
    ...(lw.zeroPoints !== undefined ? [g.initializer(`${name}.zero_points`, 'uint8', [lw.n * Math.ceil((blocks * lw.bits) / 8)], lw.zeroPoints)] : []),
  ];
  let y = g.op('MatMulNBits', inputs, {
    domain: MS_DOMAIN,
    attrs: { K: lw.k, N: lw.n, bits: lw.bits, block_size: lw.blockSize, accuracy_level: accuracyLevel },
    hint: name,
  });
  if (lw.blockOffsets !== undefined) {
    const off = new Float32Array(lw.n * blocks);
    for (let r = 0; r < lw.n; r++) for (let c = 0; c < blocks; c++) off[c * lw.n + r] = lw.blockOffsets[r * blocks + c]!;
    const split = g.op('Reshape', [input, g.int64s(`${name}.blk_shape`, [0, 0, blocks, lw.blockSize])]); // [batch, seq, blocks, blockSize]
    const sums = g.op('ReduceSum', [split, g.int64s(`${name}.blk_axis`, [-1])], { attrs: { keepdims: 0 }, hint: `${name}.blk_sums` }); // [batch, seq, blocks]
    y = g.op('Add', [y, g.op('MatMul', [sums, g.initializer(`${name}.offsets`, ft, [blocks, lw.n], fb(off))])]); // [batch, seq, n]
  }
  return y;
}

/** Inserts zero rows so each of `h` heads of `from` rows becomes `to` rows. */
function padRows(lw: LinearWeight, h: number, from: number, to: number): LinearWeight {
  if (from === to) return lw;
  const src = linearToF32(lw); // [h*from, k]
  const out = new Float32Array(h * to * lw.k);
  for (let i = 0; i < h; i++) out.set(src.subarray(i * from * lw.k, (i + 1) * from * lw.k), i * to * lw.k);
  return { kind: 'float', n: h * to, k: lw.k, weight: out };
}

/** Inserts zero columns so each of `h` head slices of `from` inputs becomes `to` inputs. */
function padColumns(lw: LinearWeight, h: number, from: number, to: number): LinearWeight {
  if (from === to) return lw;
  const src = linearToF32(lw); // [n, h*from]
  const out = new Float32Array(lw.n * h * to);
  for (let r = 0; r < lw.n; r++) {
    for (let i = 0; i < h; i++) out.set(src.subarray(r * lw.k + i * from, r * lw.k + (i + 1) * from), r * h * to + i * to);
  }
  return { kind: 'float', n: lw.n, k: h * to, weight: out };
}

function padVector(v: Float32Array, h: number, from: number, to: number): Float32Array {
  if (from === to) return v;
  const out = new Float32Array(h * to);
  for (let i = 0; i < h; i++) out.set(v.subarray(i * from, (i + 1) * from), i * to);
  return out;
}

/** `t` cast to fp16 when `fp16` (ConstantOfShape's zeros are f32). */
function castIf(g: GraphBuilder, t: string, fp16: boolean): string {
  return fp16 ? g.op('Cast', [t], { attrs: { to: ONNX_FLOAT16 } }) : t;
}

/** Names a computed value as a graph output (Identity keeps the builder's naming simple). */
function nameOutput(g: GraphBuilder, value: string, outputName: string): void {
  g.op('Identity', [value], { output: outputName });
}

/**
 * Where a run's new positions sit in GQA's present K/V, for GatherElements on axis 2:
 * [batch, kvHeads, seq, headDim] int64, row b's positions seqlens_k[b] + 1 - seq onwards (GQA
 * copies a row's filled past and appends its new positions after it).
 */
function newPositionIndex(g: GraphBuilder, seqlensK: string, kvHeads: number, headDim: number): string {
  const dims = g.op('Shape', [IO.hiddenIn], { hint: 'new_pos_dims' }); // [batch, seq, hidden]
  const part = (from: number, name: string): string => g.op('Slice', [dims, g.int64s(`new_pos_${name}_from`, [from]), g.int64s(`new_pos_${name}_to`, [from + 1])]);
  const batch = part(0, 'batch');
  const seq = part(1, 'seq');
  const one = g.int64s('new_pos_one', [1]);
  // [batch] first new position of each row: seqlens_k + 1 - seq
  const first = g.op('Sub', [g.op('Add', [g.op('Cast', [seqlensK], { attrs: { to: ONNX_INT64 } }), one]), seq], { hint: 'new_pos_first' });
  const steps = g.op('Range', [g.int64s('new_pos_zero', [0], []), g.op('Reshape', [seq, g.int64s('new_pos_scalar', [], [0])]), g.int64s('new_pos_step', [1], [])]); // [seq]
  const grid = g.op('Add', [
    g.op('Reshape', [first, g.int64s('new_pos_row_shape', [-1, 1, 1, 1])]),
    g.op('Reshape', [steps, g.int64s('new_pos_seq_shape', [1, 1, -1, 1])]),
  ]); // [batch, 1, seq, 1]
  const full = g.op('Concat', [batch, g.int64s('new_pos_kvh', [kvHeads]), seq, g.int64s('new_pos_hd', [headDim])], { attrs: { axis: 0 } });
  return g.op('Expand', [grid, full], { hint: 'new_pos_index' });
}

/** The replay inputs, as values: `flag` is a [1] bool. */
interface ReplayValues {
  flag: string;
  seqlensK: string;
  total: string;
  rows: string; // [1] int64: the number of replayed positions
  total64: string; // [1] int64
}

/** The replay inputs (every run feeds them: onnxruntime-node drops feeds of inputs with defaults). */
function replayInputs(g: GraphBuilder): ReplayValues {
  const flag = g.op('Cast', [g.input(IO.replay, 'int32', [1])], { attrs: { to: ONNX_BOOL }, hint: 'replay_flag' });
  const seqlensK = g.input(IO.replaySeqlensK, 'int32', ['replay_rows']);
  const total = g.input(IO.replayTotal, 'int32', []);
  const rows = g.op('Shape', [seqlensK], { hint: 'replay_rows' });
  const total64 = g.op('Reshape', [g.op('Cast', [total], { attrs: { to: ONNX_INT64 } }), g.int64s('replay_total_shape', [1])], { hint: 'replay_total64' });
  return { flag, seqlensK, total, rows, total64 };
}

/**
 * A replay's attention: a stage's GroupQueryAttention runs a row of n positions as one causal
 * pass, which sums in another order than n one-token steps (bench/replay-ops.ts: the attention
 * output differs, the K/V it writes do not). Here the same n positions run again as n rows of one
 * token each, row j over the cache (just written, so it holds every position) up to its own
 * position: the kernel path of a decode step, so its output is that step's, bit for bit. In a
 * plain step (`replay` 0) this is one row over one position, and the first attention's output is
 * used. [batch, seq, heads*headDim] -> same.
 */
function replayAttention(
  g: GraphBuilder,
  r: ReplayValues,
  t: { q: string; k: string; v: string; attn: string; presentK: string; presentV: string; cos: string; sin: string },
  d: { heads: number; kvHeads: number; headDim: number; attrs: Record<string, AttrValue>; name: string },
): string {
  const zero = g.int64s(`${d.name}.replay_zero`, [0]);
  const axis0 = g.int64s(`${d.name}.replay_axis0`, [0]);
  // [batch, seq, h*headDim] -> [rows, 1, h*headDim] (the first `rows` positions)
  const asRows = (x: string, h: number, name: string): string =>
    g.op('Slice', [g.op('Reshape', [x, g.int64s(`${d.name}.replay_${name}_shape`, [-1, 1, h * d.headDim])]), zero, r.rows, axis0]);
  // present [batch, kvHeads, cap, headDim] -> [rows, kvHeads, total, headDim]: row 0's cache, once per replayed position.
  const ends = g.op('Concat', [g.int64s(`${d.name}.replay_one`, [1]), r.total64], { attrs: { axis: 0 } });
  const axes = g.int64s(`${d.name}.replay_axes`, [0, 2]);
  const expanded = g.op('Concat', [r.rows, g.int64s(`${d.name}.replay_kvh`, [d.kvHeads]), r.total64, g.int64s(`${d.name}.replay_hd`, [d.headDim])], { attrs: { axis: 0 } });
  const past = (p: string): string => g.op('Expand', [g.op('Slice', [p, g.int64s(`${d.name}.replay_starts_${p}`, [0, 0]), ends, axes]), expanded]);
  const [attn] = g.node('GroupQueryAttention', [asRows(t.q, d.heads, 'q'), asRows(t.k, d.kvHeads, 'k'), asRows(t.v, d.kvHeads, 'v'), past(t.presentK), past(t.presentV), r.seqlensK, r.total, t.cos, t.sin], {
    domain: MS_DOMAIN,
    attrs: d.attrs,
    outputs: 3,
    hint: `${d.name}.replay_gqa`,
  }); // [rows, 1, heads*headDim]
  const asRow = g.op('Reshape', [attn as string, g.int64s(`${d.name}.replay_row_shape`, [1, -1, d.heads * d.headDim])]); // [1, rows, heads*headDim]
  return g.op('Where', [r.flag, asRow, t.attn], { hint: `${d.name}.attn_or_replay` });
}
