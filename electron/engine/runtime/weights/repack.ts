// Converts GGUF tensor bytes into what the stage graph consumes: f32 arrays, or MatMulNBits
// blocks (onnxruntime contrib op doc: B [N, K/block, block*bits/8] uint8, scales [N*K/block]).
// Block layouts from ggml-common.h. Exact unless a function says otherwise. Pure: no I/O.
import { KiwiError } from '../../errors.js';
import type { LinearWeight } from '../stage-graph.js';
import { scaleMinK4 } from '../../model/gguf/dequantize.js';
import { f16Table32 } from '../../model/gguf/quant/half.js';

/** IEEE half -> f32 (exact; a table lookup). */
export function f16ToF32(h: number): number {
  return F16[h & 0xffff]!;
}
const F16 = f16Table32();

function u16(bytes: Uint8Array, at: number): number {
  return bytes[at]! | (bytes[at + 1]! << 8);
}

function checkBytes(what: string, bytes: Uint8Array, expected: number): void {
  if (bytes.byteLength !== expected) {
    throw new KiwiError('GGUF_INVALID', `${what}: ${bytes.byteLength} bytes, expected ${expected}`);
  }
}

export function f32FromF32Bytes(bytes: Uint8Array, count: number): Float32Array {
  checkBytes('F32 tensor', bytes, count * 4);
  const out = new Float32Array(count);
  new Uint8Array(out.buffer).set(bytes);
  return out;
}

export function f32FromF16Bytes(bytes: Uint8Array, count: number): Float32Array {
  checkBytes('F16 tensor', bytes, count * 2);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = f16ToF32(u16(bytes, 2 * i));
  return out;
}

/** bf16 is the top half of an f32: exact. */
export function f32FromBf16Bytes(bytes: Uint8Array, count: number): Float32Array {
  checkBytes('BF16 tensor', bytes, count * 2);
  const bits = new Uint32Array(count);
  for (let i = 0; i < count; i++) bits[i] = u16(bytes, 2 * i) << 16;
  return new Float32Array(bits.buffer);
}

const Q8_0_BYTES = 34; // { f16 d; int8 qs[32] }
const Q4_0_BYTES = 18; // { f16 d; uint8 qs[16] }: element j = low nibble of qs[j], j+16 = high nibble
const Q6_K_BYTES = 210; // { uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d }
const QK = 32;
const QK_K = 256;

function checkMatrix(what: string, n: number, k: number, block: number, blockBytes: number, bytes: Uint8Array): number {
  if (k % block !== 0) throw new KiwiError('GGUF_INVALID', `${what}: row length ${k} is not a multiple of ${block}`);
  const blocks = (n * k) / block;
  checkBytes(what, bytes, blocks * blockBytes);
  return blocks;
}

/** Q8_0 -> MatMulNBits 8-bit, block 32, implied zero point 128: u = q + 128. Exact. */
export function q8_0ToNBits(bytes: Uint8Array, n: number, k: number): LinearWeight {
  const blocks = checkMatrix('Q8_0 tensor', n, k, QK, Q8_0_BYTES, bytes);
  const b = new Uint8Array(blocks * QK);
  const scales = new Float32Array(blocks);
  for (let i = 0; i < blocks; i++) {
    const src = i * Q8_0_BYTES;
    scales[i] = f16ToF32(u16(bytes, src));
    for (let j = 0; j < QK; j++) b[i * QK + j] = bytes[src + 2 + j]! ^ 0x80; // int8 q -> q + 128
  }
  return { kind: 'nbits', n, k, bits: 8, blockSize: QK, b, scales };
}

/** Q4_0 -> MatMulNBits 4-bit, block 32, implied zero point 8. Exact (nibble reorder + f16 scale). */
export function q4_0ToNBits(bytes: Uint8Array, n: number, k: number): LinearWeight {
  const blocks = checkMatrix('Q4_0 tensor', n, k, QK, Q4_0_BYTES, bytes);
  const b = new Uint8Array(blocks * 16);
  const scales = new Float32Array(blocks);
  for (let i = 0; i < blocks; i++) {
    const src = i * Q4_0_BYTES;
    scales[i] = f16ToF32(u16(bytes, src));
    // MatMulNBits: element 2j is the low nibble of byte j, 2j+1 the high nibble. Elements 0..15
    // are the low nibbles of qs[0..15], elements 16..31 their high nibbles.
    const qs = src + 2;
    const dst = i * 16;
    for (let j = 0; j < 8; j++) b[dst + j] = (bytes[qs + 2 * j]! & 0x0f) | ((bytes[qs + 2 * j + 1]! & 0x0f) << 4);
    for (let j = 0; j < 8; j++) b[dst + 8 + j] = (bytes[qs + 2 * j]! >> 4) | (bytes[qs + 2 * j + 1]! & 0xf0);
  }
  return { kind: 'nbits', n, k, bits: 4, blockSize: QK, b, scales };
}

/**
 * Q6_K -> MatMulNBits 8-bit, block 16. A Q6_K super-block of 256 has 16 sub-blocks of 16 with
 * w = d * sc[s] * (q - 32), q in [0, 63]; here scale = d * sc (an f16 times an int8 fits f32's
 * 24-bit significand exactly) and u = q + 96 so that u - 128 = q - 32. Exact.
 */
export function q6_KToNBits(bytes: Uint8Array, n: number, k: number): LinearWeight {
  const supers = checkMatrix('Q6_K tensor', n, k, QK_K, Q6_K_BYTES, bytes);
  const b = new Uint8Array(supers * QK_K);
  const scales = new Float32Array(supers * 16);
  const q = new Uint8Array(QK_K);
  for (let s = 0; s < supers; s++) {
    const src = s * Q6_K_BYTES;
    const ql = src;
    const qh = src + 128;
    const sc = src + 192;
    const d = f16ToF32(u16(bytes, src + 208));
    // ggml-quants.c dequantize_row_q6_K: two halves of 128, each from 64 ql bytes and 32 qh bytes.
    for (let half = 0; half < 2; half++) {
      const qlh = ql + half * 64;
      const qhh = qh + half * 32;
      for (let l = 0; l < 32; l++) {
        const hb = bytes[qhh + l]!;
        const base = half * 128;
        q[base + l] = (bytes[qlh + l]! & 0x0f) | ((hb & 3) << 4);
        q[base + l + 32] = (bytes[qlh + l + 32]! & 0x0f) | (((hb >> 2) & 3) << 4);
        q[base + l + 64] = (bytes[qlh + l]! >> 4) | (((hb >> 4) & 3) << 4);
        q[base + l + 96] = (bytes[qlh + l + 32]! >> 4) | (((hb >> 6) & 3) << 4);
      }
    }
    for (let j = 0; j < 16; j++) {
      const scInt8 = (bytes[sc + j]! << 24) >> 24;
      scales[s * 16 + j] = d * scInt8;
    }
    for (let e = 0; e < QK_K; e++) b[s * QK_K + e] = q[e]! + 96;
  }
  return { kind: 'nbits', n, k, bits: 8, blockSize: 16, b, scales };
}

const Q4_K_BYTES = 144; // { f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128] }

/**
 * Q4_K -> MatMulNBits 4-bit, block 32, without zero points, plus per-block offsets. Sub-block s
 * of a 256-element super-block is w = d*sc[s]*q - dmin*m[s] (ggml dequantize_row_q4_K);
 * MatMulNBits with the implied zero point 8 computes scale*(q - 8), so scale = d*sc (exact in
 * f32) and offset = 8*scale - dmin*m, which the graph applies as MatMul(blockSums(x), offsets)
 * (stage-graph.ts). LOSSY by f32 rounding only: the offset is one rounded subtraction, so each
 * weight moves by at most ~1 ulp of the block's magnitude 8*scale + dmin*m.
 */
export function q4_KToNBits(bytes: Uint8Array, n: number, k: number): LinearWeight {
  const supers = checkMatrix('Q4_K tensor', n, k, QK_K, Q4_K_BYTES, bytes);
  const b = new Uint8Array(supers * 128);
  const scales = new Float32Array(supers * 8);
  const blockOffsets = new Float32Array(supers * 8);
  for (let s = 0; s < supers; s++) {
    const src = s * Q4_K_BYTES;
    const d = f16ToF32(u16(bytes, src));
    const dmin = f16ToF32(u16(bytes, src + 2));
    for (let j = 0; j < 8; j++) {
      const [sc, m] = scaleMinK4(j, bytes, src + 4);
      const scale = Math.fround(d * sc);
      const blk = s * 8 + j;
      scales[blk] = scale;
      blockOffsets[blk] = 8 * scale - Math.fround(dmin * m);
      // Sub-block j: low (j even) or high (j odd) nibbles of qs[32*(j>>1) .. +32].
      const qs = src + 16 + 32 * (j >> 1);
      const shift = (j & 1) * 4;
      for (let l = 0; l < 16; l++) {
        const lo = (bytes[qs + 2 * l]! >> shift) & 0x0f;
        const hi = (bytes[qs + 2 * l + 1]! >> shift) & 0x0f;
        b[blk * 16 + l] = lo | (hi << 4);
      }
    }
  }
  return { kind: 'nbits', n, k, bits: 4, blockSize: QK, b, scales, blockOffsets };
}

/** Expands a linear weight to [n, k] f32 (for the embedding table, which is gathered by row). */
export function linearToF32(w: LinearWeight): Float32Array {
  if (w.kind === 'float') return w.weight;
  const out = new Float32Array(w.n * w.k);
  const blocks = (w.n * w.k) / w.blockSize;
  for (let i = 0; i < blocks; i++) {
    const s = w.scales[i]!;
    const zero = w.bits === 4 ? 8 : 128;
    const offset = w.blockOffsets?.[i];
    for (let j = 0; j < w.blockSize; j++) {
      const e = i * w.blockSize + j;
      const u = w.bits === 8 ? w.b[e]! : (w.b[e >> 1]! >> ((e & 1) * 4)) & 0x0f;
      out[e] = offset === undefined ? s * (u - zero) : s * (u - zero) + offset; // no + 0: keeps -0
    }
  }
  return out;
}
