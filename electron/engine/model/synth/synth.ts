// Synthesizes a random-weight GGUF model of a given shape and weight type, streamed to disk (an 8B
// model is many GB and is never held in memory). Weights: a seeded pool of 2^20 normal values
// (std 0.02) is quantized once with the real quantizers, and every matrix is filled with randomly
// placed runs of the pool's blocks, so output bytes are valid ggml blocks and generation runs at
// disk speed. Norm weights are near 1 (F32), biases small (F32). Deterministic for a seed.
// `q4_k_m` is not one ggml type but llama.cpp's per-tensor mix (see q4kmType).
import { rename, rm } from 'node:fs/promises';
import { KiwiError } from '../../errors.js';
import { createGgufWriter, gv } from '../gguf/gguf-writer.js';
import type { GgufTensorSpec, GgufWriteValue } from '../gguf/gguf-writer.js';
import { GgmlType, ggmlTypeInfo, ggmlTypeName, tensorByteLength } from '../gguf/gguf-types.js';
import { quantize } from '../gguf/quant/quantize.js';
import { Prng } from './prng.js';
import { shapeHeadDim } from './shapes.js';
import type { ModelShape } from './shapes.js';
import { synthVocab } from './synth-vocab.js';

/** What synth writes: one ggml type for every matrix, or llama.cpp's Q4_K_M mix of Q4_K and Q6_K. */
export type SynthQuant = GgmlType | 'q4_k_m';

export const SYNTH_QUANTS: Readonly<Record<string, SynthQuant>> = {
  f32: GgmlType.F32,
  f16: GgmlType.F16,
  bf16: GgmlType.BF16,
  q8_0: GgmlType.Q8_0,
  q4_0: GgmlType.Q4_0,
  q4_k: GgmlType.Q4_K,
  q6_k: GgmlType.Q6_K,
  q4_k_m: 'q4_k_m',
};

// llama_ftype values (llama.h) written as general.file_type.
const FILE_TYPE: Partial<Record<GgmlType, number>> = {
  [GgmlType.F32]: 0,
  [GgmlType.F16]: 1,
  [GgmlType.Q4_0]: 2,
  [GgmlType.Q8_0]: 7,
  [GgmlType.Q4_K]: 15, // MOSTLY_Q4_K_M, as `llama-quantize --pure Q4_K_M` labels an all-Q4_K file
  [GgmlType.Q6_K]: 18,
  [GgmlType.BF16]: 32,
};
const FILE_TYPE_Q4_K_M = 15;

/** The general.file_type (llama_ftype) of a synth format. */
export function synthFileType(quant: SynthQuant): number {
  return quant === 'q4_k_m' ? FILE_TYPE_Q4_K_M : (FILE_TYPE[quant] ?? 0);
}

/**
 * llama.cpp's use_more_bits: the first and last eighth of the layers and every third layer
 * between them get the bigger type (integer divisions, as in C).
 */
export function q4kmMoreBits(layer: number, layers: number): boolean {
  const eighth = Math.floor(layers / 8);
  return layer < eighth || layer >= Math.floor((7 * layers) / 8) || (layer - eighth) % 3 === 2;
}

/**
 * The type llama.cpp's llama_tensor_get_type picks for a dense (non-MoE) llama-family tensor under
 * LLAMA_FTYPE_MOSTLY_Q4_K_M, before the shape fallback: Q6_K for the output projection (and for
 * the token embedding when it doubles as the output), for attn_v and ffn_down in the
 * q4kmMoreBits layers; Q4_K for everything else. An output row that is not whole 256-blocks gets
 * Q8_0 directly. Not modelled: llama.cpp's 70B-class (80-layer) bump of attn_v to Q5_K and its
 * Q5_0 fallback for narrow Q4_K rows (synth has no Q5_K/Q5_0 writer; it falls back to Q4_0).
 */
export function q4kmType(name: string, ne0: number, layers: number, tiedEmbeddings: boolean): GgmlType {
  if (name === 'output.weight' || (tiedEmbeddings && name === 'token_embd.weight')) {
    return ne0 % ggmlTypeInfo(GgmlType.Q4_K).blockSize === 0 ? GgmlType.Q6_K : GgmlType.Q8_0;
  }
  const m = /^blk\.(\d+)\.(attn_v|ffn_down)\.weight$/.exec(name);
  if (m !== null && q4kmMoreBits(Number(m[1]), layers)) return GgmlType.Q6_K;
  return GgmlType.Q4_K;
}

// A k-quant row must be whole 256-element blocks; narrower rows fall back as llama.cpp's
// quantizer does (to a 32-element type).
const FALLBACK: Partial<Record<GgmlType, GgmlType>> = {
  [GgmlType.Q4_K]: GgmlType.Q4_0,
  [GgmlType.Q6_K]: GgmlType.Q8_0,
};

const POOL_ELEMENTS = 1 << 20;
const WEIGHT_STD = 0.02;
const CHUNK_BYTES = 4 * 1024 * 1024;

export interface SynthOptions {
  shape: ModelShape;
  quant: SynthQuant;
  /** The output projection's type (the token embedding's where tied) instead of quant's; a type synth writes. */
  headType?: GgmlType;
  out: string;
  seed?: number;
  /** Called after each chunk with bytes written so far and the final file size. */
  onProgress?: (written: number, total: number) => void;
  signal?: AbortSignal;
}

export interface SynthResult {
  path: string;
  bytes: number;
  tensors: number;
  parameters: number;
}

type TensorKind = 'matrix' | 'norm' | 'bias' | 'rope_freqs';

interface PlannedTensor extends GgufTensorSpec {
  kind: TensorKind;
}

/** The llama.cpp tensor list of the shape, in file order; `headType` overrides the output projection's type. */
export function planTensors(shape: ModelShape, quant: SynthQuant, headType?: GgmlType): PlannedTensor[] {
  const hd = shapeHeadDim(shape);
  const e = shape.embeddingLength;
  const qDim = shape.headCount * hd;
  const kvDim = shape.headCountKv * hd;
  const matrixType = (name: string, ne0: number): GgmlType => {
    const head = name === 'output.weight' || (shape.tiedEmbeddings && name === 'token_embd.weight');
    const want = head && headType !== undefined ? headType : quant === 'q4_k_m' ? q4kmType(name, ne0, shape.blockCount, shape.tiedEmbeddings) : quant;
    if (ne0 % ggmlTypeInfo(want).blockSize === 0) return want;
    const fb = FALLBACK[want];
    if (fb !== undefined && ne0 % ggmlTypeInfo(fb).blockSize === 0) return fb;
    return GgmlType.F16;
  };
  const matrix = (name: string, ne0: number, ne1: number): PlannedTensor => ({ name, type: matrixType(name, ne0), dims: [ne0, ne1], kind: 'matrix' });
  const f32 = (name: string, n: number, kind: TensorKind): PlannedTensor => ({ name, type: GgmlType.F32, dims: [n], kind });

  const list: PlannedTensor[] = [matrix('token_embd.weight', e, shape.vocabSize)];
  if (shape.ropeScaling?.type === 'llama3') list.push(f32('rope_freqs.weight', hd / 2, 'rope_freqs'));
  for (let i = 0; i < shape.blockCount; i++) {
    const p = `blk.${String(i)}.`;
    list.push(f32(`${p}attn_norm.weight`, e, 'norm'));
    list.push(matrix(`${p}attn_q.weight`, e, qDim));
    list.push(matrix(`${p}attn_k.weight`, e, kvDim));
    list.push(matrix(`${p}attn_v.weight`, e, kvDim));
    if (shape.qkvBias) {
      list.push(f32(`${p}attn_q.bias`, qDim, 'bias'));
      list.push(f32(`${p}attn_k.bias`, kvDim, 'bias'));
      list.push(f32(`${p}attn_v.bias`, kvDim, 'bias'));
    }
    if (shape.qkNorm) {
      list.push(f32(`${p}attn_q_norm.weight`, hd, 'norm'));
      list.push(f32(`${p}attn_k_norm.weight`, hd, 'norm'));
    }
    list.push(matrix(`${p}attn_output.weight`, qDim, e));
    list.push(f32(`${p}ffn_norm.weight`, e, 'norm'));
    list.push(matrix(`${p}ffn_gate.weight`, e, shape.feedForwardLength));
    list.push(matrix(`${p}ffn_down.weight`, shape.feedForwardLength, e));
    list.push(matrix(`${p}ffn_up.weight`, e, shape.feedForwardLength));
  }
  list.push(f32('output_norm.weight', e, 'norm'));
  if (!shape.tiedEmbeddings) list.push(matrix('output.weight', e, shape.vocabSize));
  return list;
}

/** Llama 3 per-frequency divisors, as llama.cpp's converter computes rope_freqs.weight. */
export function llama3RopeFactors(shape: ModelShape): Float32Array {
  const s = shape.ropeScaling;
  if (s?.type !== 'llama3') throw new Error('llama3RopeFactors needs a llama3 rope scaling');
  const dim = shapeHeadDim(shape);
  const lowWavelen = s.originalContextLength / s.lowFreqFactor;
  const highWavelen = s.originalContextLength / s.highFreqFactor;
  const out = new Float32Array(dim / 2);
  for (let i = 0; i < dim / 2; i++) {
    const freq = 1 / shape.ropeFreqBase ** ((2 * i) / dim);
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < highWavelen) out[i] = 1;
    else if (wavelen > lowWavelen) out[i] = s.factor;
    else {
      const smooth = (s.originalContextLength / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      out[i] = 1 / ((1 - smooth) / s.factor + smooth);
    }
  }
  return out;
}

function metadataFor(shape: ModelShape, quant: SynthQuant): Array<[string, GgufWriteValue]> {
  const a = shape.architecture;
  const hd = shapeHeadDim(shape);
  const vocab = synthVocab(shape.vocabSize);
  const md: Array<[string, GgufWriteValue]> = [
    ['general.architecture', a],
    ['general.name', shape.name],
    ['general.file_type', gv.u32(synthFileType(quant))],
    ['general.quantization_version', gv.u32(2)],
    [`${a}.vocab_size`, gv.u32(shape.vocabSize)],
    [`${a}.context_length`, gv.u32(shape.contextLength)],
    [`${a}.embedding_length`, gv.u32(shape.embeddingLength)],
    [`${a}.block_count`, gv.u32(shape.blockCount)],
    [`${a}.feed_forward_length`, gv.u32(shape.feedForwardLength)],
    [`${a}.attention.head_count`, gv.u32(shape.headCount)],
    [`${a}.attention.head_count_kv`, gv.u32(shape.headCountKv)],
    [`${a}.attention.layer_norm_rms_epsilon`, gv.f32(shape.rmsEps)],
    [`${a}.rope.freq_base`, gv.f32(shape.ropeFreqBase)],
    [`${a}.rope.dimension_count`, gv.u32(hd)],
  ];
  if (hd !== shape.embeddingLength / shape.headCount) {
    md.push([`${a}.attention.key_length`, gv.u32(hd)], [`${a}.attention.value_length`, gv.u32(hd)]);
  }
  const rs = shape.ropeScaling;
  if (rs !== undefined && rs.type !== 'llama3') {
    // llama3 scaling lives in rope_freqs.weight; llama.cpp knows no 'llama3' scaling type string.
    md.push([`${a}.rope.scaling.type`, rs.type], [`${a}.rope.scaling.factor`, gv.f32(rs.factor)]);
    if (rs.originalContextLength !== undefined) md.push([`${a}.rope.scaling.original_context_length`, gv.u32(rs.originalContextLength)]);
  }
  md.push(
    ['tokenizer.ggml.model', 'llama'],
    ['tokenizer.ggml.tokens', vocab.tokens],
    ['tokenizer.ggml.scores', vocab.scores],
    ['tokenizer.ggml.token_type', vocab.types],
    ['tokenizer.ggml.unknown_token_id', gv.u32(0)],
    ['tokenizer.ggml.bos_token_id', gv.u32(1)],
    ['tokenizer.ggml.eos_token_id', gv.u32(2)],
    ['tokenizer.ggml.add_bos_token', true],
    ['tokenizer.ggml.add_eos_token', false],
  );
  return md;
}

/** Pre-quantized random blocks of one type, from which matrices are assembled. */
class BlockPool {
  private readonly pools = new Map<GgmlType, Uint8Array>();
  constructor(private readonly values: Float32Array) {}
  bytes(type: GgmlType): Uint8Array {
    let p = this.pools.get(type);
    if (p === undefined) {
      p = quantize(type, this.values);
      this.pools.set(type, p);
    }
    return p;
  }
}

export async function synthesizeModel(opts: SynthOptions): Promise<SynthResult> {
  const { shape, quant, headType } = opts;
  for (const q of headType !== undefined ? [quant, headType] : [quant]) {
    if (!Object.values(SYNTH_QUANTS).includes(q)) {
      throw new KiwiError('USAGE', `synth cannot write ${typeof q === 'string' ? q : ggmlTypeName(q)}; use one of ${Object.keys(SYNTH_QUANTS).join(', ')}`);
    }
  }
  const seed = opts.seed ?? 0;
  const rng = new Prng(seed);
  const poolValues = new Float32Array(POOL_ELEMENTS);
  for (let i = 0; i < poolValues.length; i++) poolValues[i] = WEIGHT_STD * rng.nextNormal();
  const pool = new BlockPool(poolValues);

  const tensors = planTensors(shape, quant, headType);
  const partPath = `${opts.out}.part`;
  const writer = await createGgufWriter(partPath, { metadata: metadataFor(shape, quant), tensors });
  const total = writer.layout.fileSize;
  let written = writer.layout.dataOffset;
  let parameters = 0;
  const chunk = new Uint8Array(CHUNK_BYTES);
  try {
    for (const t of tensors) {
      opts.signal?.throwIfAborted();
      const byteLength = tensorByteLength(t.type, t.dims);
      parameters += t.dims.reduce((a, b) => a * b, 1);
      if (t.kind === 'matrix') {
        const src = pool.bytes(t.type);
        const { typeSize } = ggmlTypeInfo(t.type);
        const poolBlocks = src.length / typeSize;
        let left = byteLength / typeSize;
        while (left > 0) {
          const blocksThisChunk = Math.min(left, Math.floor(CHUNK_BYTES / typeSize));
          let filled = 0;
          while (filled < blocksThisChunk) {
            const start = rng.nextInt(poolBlocks);
            const run = Math.min(blocksThisChunk - filled, poolBlocks - start, 1 + rng.nextInt(4096));
            chunk.set(src.subarray(start * typeSize, (start + run) * typeSize), filled * typeSize);
            filled += run;
          }
          await writer.write(chunk.subarray(0, blocksThisChunk * typeSize));
          left -= blocksThisChunk;
          written += blocksThisChunk * typeSize;
          opts.onProgress?.(written, total);
        }
      } else {
        const n = t.dims[0]!;
        const v = new Float32Array(n);
        if (t.kind === 'rope_freqs') v.set(llama3RopeFactors(shape));
        else if (t.kind === 'norm') for (let i = 0; i < n; i++) v[i] = 1 + 0.05 * (rng.nextFloat() - 0.5);
        else for (let i = 0; i < n; i++) v[i] = WEIGHT_STD * rng.nextNormal();
        await writer.write(new Uint8Array(v.buffer));
        written += byteLength;
      }
    }
    await writer.finish();
    await rename(partPath, opts.out);
  } catch (err) {
    // The first failure is the one to report; closing and deleting the partial file is best effort.
    await writer.abort().catch(() => undefined);
    await rm(partPath, { force: true }).catch(() => undefined);
    throw err;
  }
  opts.onProgress?.(total, total);
  return { path: opts.out, bytes: total, tensors: tensors.length, parameters };
}
