// The transformer hyper-parameters of a Llama-family GGUF (llama, mistral, qwen2, qwen3), read from
// the `<arch>.*` metadata keys llama.cpp defines (llama-arch.cpp) and checked against the tensor
// index. Invariant: a ModelConfig is internally consistent (heads divide, shapes match the file).
import { KiwiError } from '../errors.js';
import type { GgufFile } from './gguf/gguf-reader.js';
import { metaInteger, metaNumber, metaString, metaStringArray, requireInteger, requireString } from './gguf/gguf-metadata.js';

export const LLAMA_FAMILY = ['llama', 'mistral', 'qwen2', 'qwen3'] as const;
export type LlamaFamilyArchitecture = (typeof LLAMA_FAMILY)[number];

export interface RopeConfig {
  /** θ base of the rotary frequencies (default 10000). */
  freqBase: number;
  /** Rotated dimensions per head (default: the head dim). */
  dimensionCount: number;
  /** `<arch>.rope.scaling.type` as written ('none', 'linear', 'yarn', ...), 'none' if absent. */
  scalingType: string;
  /** Context scaling factor (1 when none). */
  scalingFactor: number;
  originalContextLength?: number;
  /** Llama 3 frequency smoothing, when the file states it (llama.cpp stores rope_freqs instead). */
  lowFreqFactor?: number;
  highFreqFactor?: number;
  /** Name of the per-frequency divisor tensor (Llama 3.1+ `rope_freqs.weight`), if the file has one. */
  freqFactorsTensor?: string;
}

export interface ModelConfig {
  architecture: string;
  name?: string;
  blockCount: number;
  embeddingLength: number;
  headCount: number;
  headCountKv: number;
  /** Per-head dim of Q and K (`attention.key_length`, else embedding / heads). */
  headDim: number;
  /** Per-head dim of V (`attention.value_length`, else headDim). */
  valueHeadDim: number;
  feedForwardLength: number;
  vocabSize: number;
  contextLength: number;
  rmsEps: number;
  rope: RopeConfig;
  /** No output.weight: the output projection reuses token_embd.weight. */
  tiedEmbeddings: boolean;
  /** blk.N.attn_{q,k,v}.bias present (Qwen2). */
  qkvBias: boolean;
  /** blk.N.attn_{q,k}_norm.weight present (Qwen3). */
  qkNorm: boolean;
}

export interface ModelConfigOptions {
  /** Read the same keys for any architecture (for `kiwi inspect`); default: Llama family only. */
  anyArchitecture?: boolean;
}

function bad(message: string): KiwiError {
  return new KiwiError('GGUF_INVALID', message);
}

// Far above any real model (Llama 3.1 405B: 126 blocks, 16384 embd, 128 heads), low enough that
// a hostile header cannot make callers allocate per-block or per-head arrays of absurd size.
const MAX_DIM = 1 << 24;

function positive(v: number, key: string): number {
  if (v <= 0 || v > MAX_DIM) throw bad(`metadata key '${key}' is ${String(v)}; it must be between 1 and ${String(MAX_DIM)}`);
  return v;
}

export function modelConfigFromGguf(file: GgufFile, options: ModelConfigOptions = {}): ModelConfig {
  const m = file.metadata;
  const arch = requireString(m, 'general.architecture');
  if (options.anyArchitecture !== true && !(LLAMA_FAMILY as readonly string[]).includes(arch)) {
    throw new KiwiError(
      'MODEL_UNSUPPORTED',
      `model architecture '${arch}' is not supported; Kiwi runs ${LLAMA_FAMILY.join(', ')}`,
      { architecture: arch },
    );
  }
  const k = (s: string): string => `${arch}.${s}`;
  const headCountValue = m.get(k('attention.head_count'));
  if (headCountValue !== undefined && typeof headCountValue !== 'number') {
    throw new KiwiError('MODEL_UNSUPPORTED', `per-layer head counts ('${k('attention.head_count')}' is an array) are not supported`);
  }

  const blockCount = positive(requireInteger(m, k('block_count')), k('block_count'));
  if (blockCount > 65536) throw bad(`block count ${String(blockCount)} is not plausible`);
  const embeddingLength = positive(requireInteger(m, k('embedding_length')), k('embedding_length'));
  const headCount = positive(requireInteger(m, k('attention.head_count')), k('attention.head_count'));
  const kvValue = m.get(k('attention.head_count_kv'));
  if (kvValue !== undefined && typeof kvValue !== 'number') {
    throw new KiwiError('MODEL_UNSUPPORTED', `per-layer KV head counts ('${k('attention.head_count_kv')}' is an array) are not supported`);
  }
  const headCountKv = positive(metaInteger(m, k('attention.head_count_kv')) ?? headCount, k('attention.head_count_kv'));
  if (headCount % headCountKv !== 0) {
    throw bad(`${String(headCount)} attention heads cannot be grouped over ${String(headCountKv)} KV heads`);
  }
  const keyLength = metaInteger(m, k('attention.key_length'));
  if (keyLength === undefined && embeddingLength % headCount !== 0) {
    throw bad(`embedding length ${String(embeddingLength)} is not divisible by ${String(headCount)} heads and no key_length is given`);
  }
  const headDim = positive(keyLength ?? embeddingLength / headCount, k('attention.key_length'));
  const valueHeadDim = positive(metaInteger(m, k('attention.value_length')) ?? headDim, k('attention.value_length'));
  const feedForwardLength = positive(requireInteger(m, k('feed_forward_length')), k('feed_forward_length'));
  const contextLength = positive(requireInteger(m, k('context_length')), k('context_length'));
  const rmsEps = metaNumber(m, k('attention.layer_norm_rms_epsilon')) ?? 1e-5;
  if (!(rmsEps > 0 && rmsEps < 1)) throw bad(`RMS norm epsilon ${String(rmsEps)} is out of range`);

  const embd = file.tensor('token_embd.weight');
  if (embd === undefined) throw bad("the model has no 'token_embd.weight' tensor");
  const vocabSize = positive(
    metaInteger(m, k('vocab_size')) ?? embd.dims[1] ?? metaStringArray(m, 'tokenizer.ggml.tokens')?.length ?? 0,
    k('vocab_size'),
  );
  if (embd.dims[0] !== embeddingLength || embd.dims[1] !== vocabSize) {
    throw bad(`token_embd.weight has shape [${embd.dims.join(', ')}], expected [${String(embeddingLength)}, ${String(vocabSize)}]`);
  }
  const output = file.tensor('output.weight');
  if (output !== undefined && (output.dims[0] !== embeddingLength || output.dims[1] !== vocabSize)) {
    throw bad(`output.weight has shape [${output.dims.join(', ')}], expected [${String(embeddingLength)}, ${String(vocabSize)}]`);
  }
  const q = file.tensor('blk.0.attn_q.weight');
  if (q !== undefined && (q.dims[0] !== embeddingLength || q.dims[1] !== headCount * headDim)) {
    throw bad(`blk.0.attn_q.weight has shape [${q.dims.join(', ')}], expected [${String(embeddingLength)}, ${String(headCount * headDim)}]`);
  }
  const kw = file.tensor('blk.0.attn_k.weight');
  if (kw !== undefined && kw.dims[1] !== headCountKv * headDim) {
    throw bad(`blk.0.attn_k.weight has shape [${kw.dims.join(', ')}], expected [${String(embeddingLength)}, ${String(headCountKv * headDim)}]`);
  }

  const scalingType = metaString(m, k('rope.scaling.type')) ?? 'none';
  const linear = metaNumber(m, k('rope.scale_linear'));
  const rope: RopeConfig = {
    freqBase: metaNumber(m, k('rope.freq_base')) ?? 10000,
    dimensionCount: positive(metaInteger(m, k('rope.dimension_count')) ?? headDim, k('rope.dimension_count')),
    scalingType: linear !== undefined && scalingType === 'none' ? 'linear' : scalingType,
    scalingFactor: metaNumber(m, k('rope.scaling.factor')) ?? linear ?? 1,
  };
  const orig = metaInteger(m, k('rope.scaling.original_context_length'));
  if (orig !== undefined) rope.originalContextLength = orig;
  const low = metaNumber(m, k('rope.scaling.low_freq_factor'));
  if (low !== undefined) rope.lowFreqFactor = low;
  const high = metaNumber(m, k('rope.scaling.high_freq_factor'));
  if (high !== undefined) rope.highFreqFactor = high;
  if (file.tensor('rope_freqs.weight') !== undefined) rope.freqFactorsTensor = 'rope_freqs.weight';
  if (!(rope.freqBase > 1) || !Number.isFinite(rope.freqBase)) throw bad(`rope freq_base ${String(rope.freqBase)} must be a finite number above 1`);
  if (!(rope.scalingFactor > 0) || !Number.isFinite(rope.scalingFactor)) throw bad(`rope scaling factor ${String(rope.scalingFactor)} must be positive`);
  if (rope.dimensionCount > headDim || rope.dimensionCount % 2 !== 0) {
    throw bad(`rope dimension count ${String(rope.dimensionCount)} must be even and at most the head dim ${String(headDim)}`);
  }

  const config: ModelConfig = {
    architecture: arch,
    blockCount,
    embeddingLength,
    headCount,
    headCountKv,
    headDim,
    valueHeadDim,
    feedForwardLength,
    vocabSize,
    contextLength,
    rmsEps,
    rope,
    tiedEmbeddings: output === undefined,
    qkvBias: file.tensor('blk.0.attn_q.bias') !== undefined,
    qkNorm: file.tensor('blk.0.attn_q_norm.weight') !== undefined,
  };
  const name = metaString(m, 'general.name');
  if (name !== undefined) config.name = name;
  return config;
}
