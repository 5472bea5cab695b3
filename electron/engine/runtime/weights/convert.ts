// GGUF tensor bytes to the stage graph's forms, by tensor type: vectors to f32, matrices to
// MatMulNBits blocks (repack.ts) or f32. Pure: no I/O (the repack workers run it too).
import { KiwiError } from '../../errors.js';
import type { GgufTensorInfo } from '../../model/gguf/gguf-reader.js';
import { GgmlType, ggmlTypeName } from '../../model/gguf/gguf-types.js';
import { DEQUANTIZABLE_TYPES, dequantize } from '../../model/gguf/dequantize.js';
import type { LinearWeight } from '../stage-graph.js';
import { f32FromBf16Bytes, f32FromF16Bytes, f32FromF32Bytes, FAST_BLOCK, q4_0ToNBits, q4_KToNBits, q6_KToNBits, q8_0ToNBits, requantize4 } from './repack.js';

/** What a conversion needs of a tensor's header. */
export type TensorForm = Pick<GgufTensorInfo, 'name' | 'type' | 'dims'>;

/**
 * How matrices are laid out for MatMulNBits. exact: the GGUF's own blocks, bit for bit (default).
 * fast: Q4_0 requantized to blocks of 128 with zero points (repack.ts requantize4; lossy), which
 * onnxruntime reads in about the GGUF's bytes; other types as exact.
 */
export type WeightLayout = 'exact' | 'fast';
export const WEIGHT_LAYOUTS: readonly WeightLayout[] = ['exact', 'fast'];

/** Whether `layout` requantizes this matrix (Q4_0 whose rows hold whole fast blocks). */
function requantized(t: TensorForm, k: number, layout: WeightLayout): boolean {
  return layout === 'fast' && t.type === GgmlType.Q4_0 && k % FAST_BLOCK === 0;
}

function count(t: TensorForm): number {
  return t.dims.reduce((a, b) => a * b, 1);
}

function unsupported(t: TensorForm, what: string): KiwiError {
  return new KiwiError(
    'MODEL_UNSUPPORTED',
    `tensor '${t.name}' has type ${ggmlTypeName(t.type)}, which Kiwi cannot use as ${what}; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, and (expanded to f32) ${DEQUANTIZABLE_TYPES.map(ggmlTypeName).filter((n) => !['F32', 'F16', 'BF16', 'Q8_0', 'Q4_0', 'Q4_K', 'Q6_K'].includes(n)).join(', ')}`,
    { tensor: t.name, type: ggmlTypeName(t.type) },
  );
}

export function toF32(t: TensorForm, bytes: Uint8Array): Float32Array {
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
export function hollowLinear(t: TensorForm, n: number, k: number, layout: WeightLayout = 'exact'): LinearWeight {
  const nbits = (bits: 4 | 8, blockSize: number): LinearWeight => ({ kind: 'nbits', n, k, bits, blockSize, b: new Uint8Array(0), scales: new Float32Array(0) });
  if (requantized(t, k, layout)) return { ...nbits(4, FAST_BLOCK), zeroPoints: new Uint8Array(0) } as LinearWeight;
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

export function toLinear(t: TensorForm, bytes: Uint8Array, n: number, k: number, layout: WeightLayout = 'exact'): LinearWeight {
  if (requantized(t, k, layout)) return requantize4(q4_0ToNBits(bytes, n, k) as Extract<LinearWeight, { kind: 'nbits' }>, FAST_BLOCK);
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
