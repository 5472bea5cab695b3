// Reads the weights of one stage (layers [start, end), plus embedding / head when the stage
// has them) from a GGUF by byte range, and converts them to the stage graph's forms.
// Invariant: only tensors of the range are read; a tensor type that cannot be converted ends
// in a KiwiError naming the tensor and type.
import { KiwiError } from '../errors.js';
import type { GgufFile, GgufTensorInfo, GgufTensorReader } from '../model/gguf/gguf-reader.js';
import { openTensorReader } from '../model/gguf/gguf-reader.js';
import { GgmlType, ggmlTypeName } from '../model/gguf/gguf-types.js';
import type { DecoderShape, LayerWeights, LinearWeight, StageWeights } from './stage-graph.js';
import { f32FromBf16Bytes, f32FromF16Bytes, f32FromF32Bytes, q4_0ToNBits, q4_KToNBits, q6_KToNBits, q8_0ToNBits } from './weights/repack.js';
import { DEQUANTIZABLE_TYPES, dequantize } from '../model/gguf/dequantize.js';
import type { LayerRange } from './layer-range.js';

export interface StagePlan extends LayerRange {
  /** The stage runs the final norm and output projection. */
  head: boolean;
}

export async function loadStageWeights(file: GgufFile, shape: DecoderShape, plan: StagePlan): Promise<StageWeights> {
  const source = await openStageWeights(file, shape);
  try {
    const out: StageWeights = { start: plan.start, end: plan.end, layers: [] };
    for (let L = plan.start; L < plan.end; L++) out.layers.push(await source.layer(L));
    if (plan.head) out.head = await source.head();
    return out;
  } finally {
    await source.close();
  }
}

/** The stage's weights one layer at a time (so a streaming build holds one layer, not the range). */
export interface StageWeightSource {
  layer(L: number): Promise<LayerWeights>;
  /**
   * Layer L's weights as the graph sees their forms (kinds, shapes, bits, which optional tensors
   * exist) with no bytes: for a layer whose built initializers are already on disk (the shard
   * cache), so neither its GGUF bytes nor a conversion are needed. Shapes are checked as in layer().
   */
  hollowLayer(L: number): Promise<LayerWeights>;
  head(): Promise<NonNullable<StageWeights['head']>>;
  close(): Promise<void>;
}

export async function openStageWeights(file: GgufFile, shape: DecoderShape): Promise<StageWeightSource> {
  const reader = await openTensorReader(file);
  const tensor = (name: string): GgufTensorInfo => {
    const t = file.tensor(name);
    if (t === undefined) throw new KiwiError('MODEL_UNSUPPORTED', `tensor '${name}' is missing from ${file.path}`, { tensor: name });
    return t;
  };
  const vectorInfo = (name: string, length: number): GgufTensorInfo => {
    const t = tensor(name);
    if (t.dims.reduce((a, b) => a * b, 1) !== length) {
      throw new KiwiError('GGUF_INVALID', `tensor '${name}' has shape [${t.dims.join(', ')}], expected ${length} elements`);
    }
    return t;
  };
  const matrixInfo = (name: string, n: number, k: number): GgufTensorInfo => {
    const t = tensor(name);
    if (t.dims.length !== 2 || t.dims[0] !== k || t.dims[1] !== n) {
      throw new KiwiError('GGUF_INVALID', `tensor '${name}' has shape [${t.dims.join(', ')}], expected [${k}, ${n}]`);
    }
    return t;
  };
  const vector = async (name: string, length: number): Promise<Float32Array> => {
    const t = vectorInfo(name, length);
    return toF32(t, await reader.read(t));
  };
  const matrix = async (name: string, n: number, k: number): Promise<LinearWeight> => {
    const t = matrixInfo(name, n, k);
    return toLinear(t, await reader.read(t), n, k);
  };
  // The same tensors without their bytes (hollowLayer).
  const hollow = {
    vector: (name: string, length: number): Promise<Float32Array> => {
      vectorInfo(name, length);
      return Promise.resolve(new Float32Array(0));
    },
    matrix: (name: string, n: number, k: number): Promise<LinearWeight> => Promise.resolve(hollowLinear(matrixInfo(name, n, k), n, k)),
  };

  const { hidden, heads, kvHeads, headDim, vocab } = shape;
  const readLayer = async (L: number, read: { vector: typeof vector; matrix: typeof matrix }): Promise<LayerWeights> => {
    const p = `blk.${L}`;
    const ffn = tensor(`${p}.ffn_gate.weight`).dims[1] ?? 0;
    const { vector: vec, matrix: mat } = read;
    const optionalVector = async (name: string, length: number) => (file.tensor(name) !== undefined ? vec(name, length) : undefined);
    const weights: LayerWeights = {
      attnNorm: await vec(`${p}.attn_norm.weight`, hidden),
      q: await mat(`${p}.attn_q.weight`, heads * headDim, hidden),
      k: await mat(`${p}.attn_k.weight`, kvHeads * headDim, hidden),
      v: await mat(`${p}.attn_v.weight`, kvHeads * headDim, hidden),
      o: await mat(`${p}.attn_output.weight`, hidden, heads * headDim),
      ffnNorm: await vec(`${p}.ffn_norm.weight`, hidden),
      gate: await mat(`${p}.ffn_gate.weight`, ffn, hidden),
      up: await mat(`${p}.ffn_up.weight`, ffn, hidden),
      down: await mat(`${p}.ffn_down.weight`, hidden, ffn),
    };
    const qBias = await optionalVector(`${p}.attn_q.bias`, heads * headDim);
    const kBias = await optionalVector(`${p}.attn_k.bias`, kvHeads * headDim);
    const vBias = await optionalVector(`${p}.attn_v.bias`, kvHeads * headDim);
    const qNorm = await optionalVector(`${p}.attn_q_norm.weight`, headDim);
    const kNorm = await optionalVector(`${p}.attn_k_norm.weight`, headDim);
    if (qBias) weights.qBias = qBias;
    if (kBias) weights.kBias = kBias;
    if (vBias) weights.vBias = vBias;
    if (qNorm) weights.qNorm = qNorm;
    if (kNorm) weights.kNorm = kNorm;
    return weights;
  };
  const layer = (L: number): Promise<LayerWeights> => readLayer(L, { vector, matrix });
  const hollowLayer = (L: number): Promise<LayerWeights> => readLayer(L, hollow);
  const head = async (): Promise<NonNullable<StageWeights['head']>> => {
    // Tied embeddings: llama.cpp uses token_embd.weight when output.weight is absent.
    const outputName = file.tensor('output.weight') !== undefined ? 'output.weight' : 'token_embd.weight';
    return { norm: await vector('output_norm.weight', hidden), output: await matrix(outputName, vocab, hidden) };
  };
  return { layer, hollowLayer, head, close: () => reader.close() };
}

/** Reads the Llama 3 rope frequency factors, if the model has them. */
export async function readRopeFreqFactors(file: GgufFile, reader?: GgufTensorReader): Promise<Float32Array | undefined> {
  const t = file.tensor('rope_freqs.weight');
  if (t === undefined) return undefined;
  const own = reader ?? (await openTensorReader(file));
  try {
    return toF32(t, await own.read(t));
  } finally {
    if (reader === undefined) await own.close();
  }
}

function count(t: GgufTensorInfo): number {
  return t.dims.reduce((a, b) => a * b, 1);
}

function unsupported(t: GgufTensorInfo, what: string): KiwiError {
  return new KiwiError(
    'MODEL_UNSUPPORTED',
    `tensor '${t.name}' has type ${ggmlTypeName(t.type)}, which Kiwi cannot use as ${what}; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, and (expanded to f32) ${DEQUANTIZABLE_TYPES.map(ggmlTypeName).filter((n) => !['F32', 'F16', 'BF16', 'Q8_0', 'Q4_0', 'Q4_K', 'Q6_K'].includes(n)).join(', ')}`,
    { tensor: t.name, type: ggmlTypeName(t.type) },
  );
}

function toF32(t: GgufTensorInfo, bytes: Uint8Array): Float32Array {
  switch (t.type) {
    case GgmlType.F32:
      return f32FromF32Bytes(bytes, count(t));
    case GgmlType.F16:
      return f32FromF16Bytes(bytes, count(t));
    case GgmlType.BF16:
      return f32FromBf16Bytes(bytes, count(t));
    default:
      throw unsupported(t, 'a vector');
  }
}

/** The form toLinear gives a tensor of this type, with empty arrays. */
function hollowLinear(t: GgufTensorInfo, n: number, k: number): LinearWeight {
  const nbits = (bits: 4 | 8, blockSize: number): LinearWeight => ({ kind: 'nbits', n, k, bits, blockSize, b: new Uint8Array(0), scales: new Float32Array(0) });
  switch (t.type) {
    case GgmlType.F32:
    case GgmlType.F16:
    case GgmlType.BF16:
      return { kind: 'float', n, k, weight: new Float32Array(0) };
    case GgmlType.Q8_0:
      return nbits(8, 32);
    case GgmlType.Q4_0:
      return nbits(4, 32);
    case GgmlType.Q6_K:
      return nbits(8, 16);
    case GgmlType.Q4_K:
      return { ...nbits(4, 32), blockOffsets: new Float32Array(0) } as LinearWeight;
    default:
      if (DEQUANTIZABLE_TYPES.includes(t.type)) return { kind: 'float', n, k, weight: new Float32Array(0) };
      throw unsupported(t, 'a matrix');
  }
}

function toLinear(t: GgufTensorInfo, bytes: Uint8Array, n: number, k: number): LinearWeight {
  switch (t.type) {
    case GgmlType.F32:
    case GgmlType.F16:
    case GgmlType.BF16:
      // f16/bf16 -> f32 is exact; it doubles the memory of f16 weights (MatMul runs in f32).
      return { kind: 'float', n, k, weight: toF32(t, bytes) };
    case GgmlType.Q8_0:
      return q8_0ToNBits(bytes, n, k);
    case GgmlType.Q4_0:
      return q4_0ToNBits(bytes, n, k);
    case GgmlType.Q6_K:
      return q6_KToNBits(bytes, n, k);
    case GgmlType.Q4_K:
      return q4_KToNBits(bytes, n, k);
    default:
      // Other ggml types ggml can dequantize (Q4_1, Q5_0, Q5_K, IQ4_NL, ...): exact f32 expansion, 4-8x the memory.
      if (DEQUANTIZABLE_TYPES.includes(t.type)) return { kind: 'float', n, k, weight: dequantize(t.type, bytes, n * k) };
      throw unsupported(t, 'a matrix');
  }
}
