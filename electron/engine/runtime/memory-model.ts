// What a stage really keeps resident, per GGUF tensor type: the form the runtime converts each
// matrix to (weights/repack.ts) and the size onnxruntime's MLAS packs it into at session creation
// (MatMulNBits with int8 activations, accuracy level 4: the quantized data, an f32 scale and an
// f32 block sum per block, MlasQNBitGemmPackQuantBDataSize), the embedding the first stage keeps in
// JS (GGUF bytes), the f32 K/V buffers and the scratch a run allocates. Pure arithmetic; bench/memory.ts
// measures real processes against it and the planner (planner/model-sizes.ts) admits by it.
import type { GgufFile, GgufTensorInfo } from '../model/gguf/gguf-reader.js';
import { GgmlType, ggmlTypeName } from '../model/gguf/gguf-types.js';
import type { DecoderShape } from './stage-graph.js';
import type { StagePlan } from './stage-weights.js';

/** Bytes of the runtime's form of one matrix element type, per weight (from the packed layout). */
export interface RuntimeForm {
  bits: number;
  blockSize: number;
  /** Per-block side tables of the packed layout: f32 scale + f32 block sum (+ zero points). */
  sideBytesPerBlock: number;
}

/** The runtime's form of a GGUF matrix type (undefined: expanded to f32, 4 bytes a weight). */
export function runtimeForm(type: GgmlType): RuntimeForm | undefined {
  switch (type) {
    case GgmlType.Q4_0:
      return { bits: 4, blockSize: 32, sideBytesPerBlock: 8 };
    case GgmlType.Q4_K:
      // Prepacked like Q4_0 (no zero points) plus the f32 block offsets of the mins term
      // (stage-graph.ts nbitsLinear): 4 + 1 + 1 + 1 = 7 bits a weight.
      return { bits: 4, blockSize: 32, sideBytesPerBlock: 12 };
    case GgmlType.Q8_0:
      return { bits: 8, blockSize: 32, sideBytesPerBlock: 8 };
    case GgmlType.Q6_K:
      return { bits: 8, blockSize: 16, sideBytesPerBlock: 8 };
    default:
      return undefined;
  }
}

/** Resident bytes per weight of a matrix of `type` once its session is created. */
export function packedBytesPerWeight(type: GgmlType): number {
  const f = runtimeForm(type);
  if (f === undefined) return 4;
  return f.bits / 8 + f.sideBytesPerBlock / f.blockSize;
}

/** Same, by ggml type name (what a model summary lists); unknown names count as f32. */
export function packedBytesPerWeightByName(name: string): number {
  const t = (Object.values(GgmlType) as Array<string | number>).find((v) => typeof v === 'number' && ggmlTypeName(v as GgmlType) === name);
  return t === undefined ? 4 : packedBytesPerWeight(t as GgmlType);
}

/** K and V are f32 in the stage's caches (stage.ts): 4 bytes per element. */
export const RUNTIME_KV_BYTES_PER_ELEMENT = 4;

/** K/V buffers grow in steps of this many positions (stage.ts KV_GROWTH_POSITIONS). */
export const KV_GROWTH_STEP = 256;

export interface StageResident {
  /** Packed matrices and f32 vectors in onnxruntime. */
  weights: number;
  /** token_embd bytes the first stage keeps in JS. */
  embedding: number;
  /** K/V buffers of the reserved positions, and the rows the stage keeps of them (stage-keep.ts). */
  kv: number;
  /** Activations of one decode/prefill run (hidden states, logits, attention scratch). */
  scratch: number;
  total: number;
}

function elements(t: GgufTensorInfo): number {
  return t.dims.reduce((a, b) => a * b, 1);
}

/** Resident bytes of one tensor in the runtime's form. */
export function tensorResidentBytes(t: GgufTensorInfo): number {
  return t.dims.length === 2 ? elements(t) * packedBytesPerWeight(t.type) : elements(t) * 4;
}

function stageTensors(file: GgufFile, plan: StagePlan): GgufTensorInfo[] {
  const out: GgufTensorInfo[] = [];
  for (const t of file.tensors) {
    const m = /^blk\.(\d+)\./.exec(t.name);
    if (m !== null) {
      const L = Number(m[1]);
      if (L >= plan.start && L < plan.end) out.push(t);
    } else if (plan.head && t.name === 'output_norm.weight') out.push(t);
  }
  if (plan.head) {
    const output = file.tensor('output.weight') ?? file.tensor('token_embd.weight');
    if (output !== undefined) out.push(output);
  }
  return out;
}

/** Weights (matrix elements) of the stage's matrices. */
export function stageWeightCount(file: GgufFile, _shape: DecoderShape, plan: StagePlan): number {
  return stageTensors(file, plan)
    .filter((t) => t.dims.length === 2)
    .reduce((a, t) => a + elements(t), 0);
}

/** What a stage of `plan` keeps resident with `kvPositions` positions reserved for `requests` requests. */
export function stageResidentBytes(
  file: GgufFile,
  shape: DecoderShape,
  plan: StagePlan,
  opts: { kvPositions: number; requests?: number },
): StageResident {
  const weights = stageTensors(file, plan).reduce((a, t) => a + tensorResidentBytes(t), 0);
  const embedding = plan.start === 0 ? (file.tensor('token_embd.weight')?.byteLength ?? 0) : 0;
  const requests = opts.requests ?? 1;
  const positions = Math.ceil(opts.kvPositions / KV_GROWTH_STEP) * KV_GROWTH_STEP;
  // With the K/V of its blocks, the rows a stage with blocks keeps of each request (stage-keep.ts).
  const kv = ((plan.end - plan.start) * 2 * shape.kvHeads * shape.headDim * RUNTIME_KV_BYTES_PER_ELEMENT + (plan.end > plan.start ? keptRowBytes(shape.hidden) : 0)) * positions * requests;
  const scratchShape = { hidden: shape.hidden, ffn: ffnWidth(file, shape.hidden), heads: shape.heads, vocab: shape.vocab };
  const scratch = scratchBytes(scratchShape, plan.head) + scratchBytesPerPosition(scratchShape) * opts.kvPositions;
  return { weights, embedding, kv, scratch, total: weights + embedding + kv + scratch };
}

/**
 * Positions a prompt's prefill runs at most in one step (generation-loop.ts cuts longer prompts into
 * chunks of this size), so a run's activations are bounded whatever the prompt's length.
 */
export const PREFILL_CHUNK_TOKENS = 128;

/** A model's sizes that set a run's activations. */
export interface ScratchShape {
  hidden: number;
  /** Feed-forward width (gate and up projections). */
  ffn: number;
  heads: number;
  vocab: number;
}

/**
 * onnxruntime's CPU arena grows in powers of two (BFC arena, kNextPowerOfTwo) and keeps what it
 * grew to, and the allocator keeps freed buffers of the runs outside it: a serving process holds
 * up to twice a run's peak. Measured (bench/serve-memory-growth.ts, mem8 at 512 positions): RssAnon
 * settles 70-79 MiB above the loaded process, where one prefill chunk's peak is about 36 MiB (with
 * glibc's MALLOC_ARENA_MAX=1 and a fixed MALLOC_MMAP_THRESHOLD_=65536, 19-35 MiB: most of the rest
 * is freed memory the allocator keeps).
 */
export const SCRATCH_RETENTION = 2;

/**
 * The part of a run's activations that does not grow with the context: per position of a prefill
 * chunk, the hidden-sized buffers one block keeps live (residual, norm, q, attention output,
 * projection, down; about 6) and the feed-forward ones (gate, up, activation, product: 4), f32,
 * kept SCRATCH_RETENTION times; plus the head's logits.
 */
export function scratchBytes(shape: ScratchShape, head: boolean): number {
  return SCRATCH_RETENTION * PREFILL_CHUNK_TOKENS * 4 * (6 * shape.hidden + 4 * shape.ffn) + (head ? shape.vocab * 4 * 2 : 0);
}

/**
 * A one-pass replay's rows per run hold at most about this much attention scratch
 * (Stage.replayChunks): a bound on the memory of a recovery. Each chunk reads the weights once more,
 * but larger ones copy the cache per row out of the CPU's caches: bench/replay.ts at 500 tokens, 1B
 * Q4_0, median of 3 rounds, replay / prefill: 16 MiB 1.93x, 32 MiB 1.97x, 64 MiB 1.61x, 96 MiB
 * 1.70x, one chunk 7.1x.
 */
export const REPLAY_CHUNK_BYTES = 64 * 2 ** 20;

/**
 * The replay attention's copies for one replayed row over `positions` (stage-graph.ts
 * replayAttention: the row's K and V cache, and GQA's present K and V of each), per layer: twice a
 * position's K/V bytes per position.
 */
export function replayRowBytes(kvBytesPerTokenPerLayer: number, positions: number): number {
  return 2 * kvBytesPerTokenPerLayer * positions;
}

/**
 * What a ring stage keeps after a one-pass replay (its graph has the replay inputs): the arena
 * keeps its largest run, a chunk (or one row, where a row over `context` positions is larger),
 * SCRATCH_RETENTION times. Measured (a 4-block stage, 500 tokens replayed after 32, 64 MiB chunks,
 * 2 threads): RssAnon 126 MiB over what a decode-step replay adds at the 1B shape, 125 MiB at the
 * 8B one.
 */
export function replayScratchBytes(kvBytesPerTokenPerLayer: number, context: number): number {
  return SCRATCH_RETENTION * Math.max(REPLAY_CHUNK_BYTES, replayRowBytes(kvBytesPerTokenPerLayer, context));
}

/** The rows a stage keeps of a request per position: what it sent on, f32 (stage-keep.ts). */
export function keptRowBytes(hidden: number): number {
  return hidden * 4;
}

/** The part that grows with the positions a request reaches: a chunk's attention scores and probabilities, every head, f32. */
export function scratchBytesPerPosition(shape: Pick<ScratchShape, 'heads'>): number {
  return SCRATCH_RETENTION * PREFILL_CHUNK_TOKENS * 4 * 2 * shape.heads;
}

/** The feed-forward width of `file`'s blocks (its first ffn_up matrix's outputs; 4x hidden when it has none). */
export function ffnWidth(file: GgufFile, hidden: number): number {
  const up = file.tensors.find((t) => /^blk\.\d+\.ffn_up\.weight$/.test(t.name));
  return up?.dims[1] ?? 4 * hidden;
}
