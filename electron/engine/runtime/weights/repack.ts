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

// The repacks below read the GGUF bytes as 16- or 32-bit little-endian words when the bytes are
// aligned for it (a tensor read on its own is: its Buffer starts at offset 0), which is ~5x faster
// than a byte at a time; otherwise, or on a big-endian machine, byte by byte. Both give the same
// bytes (repack.test.ts checks each pair).
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** `bytes` as `Words` elements when its offset allows and the machine is little-endian. */
function wordsOf<W extends Uint16Array | Uint32Array>(bytes: Uint8Array, Words: { new (b: ArrayBufferLike, o: number, l: number): W; BYTES_PER_ELEMENT: number }): W | undefined {
  const size = Words.BYTES_PER_ELEMENT;
  if (!LITTLE_ENDIAN || bytes.byteOffset % size !== 0) return undefined;
  return new Words(bytes.buffer, bytes.byteOffset, Math.floor(bytes.byteLength / size));
}

/** Q8_0 -> MatMulNBits 8-bit, block 32, implied zero point 128: u = q + 128. Exact. */
export function q8_0ToNBits(bytes: Uint8Array, n: number, k: number): LinearWeight {
  const blocks = checkMatrix('Q8_0 tensor', n, k, QK, Q8_0_BYTES, bytes);
  const b = new Uint8Array(blocks * QK);
  const scales = new Float32Array(blocks);
  const src = wordsOf(bytes, Uint16Array);
  if (src !== undefined) {
    // A block is 17 words: the f16 scale, then 16 words of two int8 each.
    const out = new Uint16Array(b.buffer);
    for (let i = 0, w = 0, o = 0; i < blocks; i++, w += 17, o += 16) {
      scales[i] = F16[src[w]!]!;
      for (let j = 1; j <= 16; j++) out[o + j - 1] = src[w + j]! ^ 0x8080;
    }
    return { kind: 'nbits', n, k, bits: 8, blockSize: QK, b, scales };
  }
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
  const src = wordsOf(bytes, Uint16Array);
  if (src !== undefined) {
    // A block is 9 words: the f16 scale, then qs as 8 words. Output word m (bytes 2m, 2m+1) of the
    // low half takes the low nibbles of source words 2m and 2m+1, the high half their high nibbles.
    const out = new Uint16Array(b.buffer);
    for (let i = 0, w = 0, o = 0; i < blocks; i++, w += 9, o += 8) {
      scales[i] = F16[src[w]!]!;
      for (let m = 0; m < 4; m++) {
        const w0 = src[w + 1 + 2 * m]!;
        const w1 = src[w + 2 + 2 * m]!;
        out[o + m] = (w0 & 0x0f) | ((w0 >> 4) & 0xf0) | ((w1 & 0x0f) << 8) | ((w1 << 4) & 0xf000);
        out[o + 4 + m] = ((w0 >> 4) & 0x0f) | ((w0 >> 8) & 0xf0) | ((w1 << 4) & 0xf00) | (w1 & 0xf000);
      }
    }
    return { kind: 'nbits', n, k, bits: 4, blockSize: QK, b, scales };
  }
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
  for (let s = 0; s < supers; s++) {
    const src = s * Q6_K_BYTES;
    const ql = src;
    const qh = src + 128;
    const sc = src + 192;
    const d = F16[bytes[src + 208]! | (bytes[src + 209]! << 8)]!;
    // ggml-quants.c dequantize_row_q6_K: two halves of 128, each from 64 ql bytes and 32 qh bytes;
    // u = q + 96 written in place.
    for (let half = 0; half < 2; half++) {
      const qlh = ql + half * 64;
      const qhh = qh + half * 32;
      const base = s * QK_K + half * 128;
      for (let l = 0; l < 32; l++) {
        const hb = bytes[qhh + l]!;
        const a = bytes[qlh + l]!;
        const c = bytes[qlh + l + 32]!;
        b[base + l] = (a & 0x0f) + ((hb & 3) << 4) + 96;
        b[base + l + 32] = (c & 0x0f) + (((hb >> 2) & 3) << 4) + 96;
        b[base + l + 64] = (a >> 4) + (((hb >> 4) & 3) << 4) + 96;
        b[base + l + 96] = (c >> 4) + (((hb >> 6) & 3) << 4) + 96;
      }
    }
    for (let j = 0; j < 16; j++) {
      const scInt8 = (bytes[sc + j]! << 24) >> 24;
      scales[s * 16 + j] = d * scInt8;
    }
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
  const src32 = wordsOf(bytes, Uint32Array);
  if (src32 !== undefined) {
    // A super-block is 36 words; sub-block j's 32 source bytes (8 words) give 16 output bytes (4
    // words): output byte l = nibble of source byte 2l | nibble of byte 2l+1 << 4.
    const out = new Uint32Array(b.buffer);
    for (let s = 0; s < supers; s++) {
      const src = s * Q4_K_BYTES;
      const d = F16[bytes[src]! | (bytes[src + 1]! << 8)]!;
      const dmin = F16[bytes[src + 2]! | (bytes[src + 3]! << 8)]!;
      const o = src + 4;
      for (let j = 0; j < 8; j++) {
        // get_scale_min_k4
        const sc = j < 4 ? bytes[o + j]! & 63 : (bytes[o + j + 4]! & 0x0f) | ((bytes[o + j - 4]! >> 6) << 4);
        const m = j < 4 ? bytes[o + j + 4]! & 63 : (bytes[o + j + 4]! >> 4) | ((bytes[o + j]! >> 6) << 4);
        const scale = Math.fround(d * sc);
        const blk = s * 8 + j;
        scales[blk] = scale;
        blockOffsets[blk] = 8 * scale - Math.fround(dmin * m);
        const qw = (src + 16 + 32 * (j >> 1)) >> 2;
        const ow = blk * 4;
        if ((j & 1) === 0) {
          for (let l = 0; l < 4; l++) {
            const w0 = src32[qw + 2 * l]!;
            const w1 = src32[qw + 2 * l + 1]!;
            out[ow + l] = lowNibbles(w0) | (lowNibbles(w1) << 16);
          }
        } else {
          for (let l = 0; l < 4; l++) {
            const w0 = src32[qw + 2 * l]!;
            const w1 = src32[qw + 2 * l + 1]!;
            out[ow + l] = highNibbles(w0) | (highNibbles(w1) << 16);
          }
        }
      }
    }
    return { kind: 'nbits', n, k, bits: 4, blockSize: QK, b, scales, blockOffsets };
  }
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

/** The low nibbles of a word's 4 bytes, packed in 16 bits (byte 0's first). */
function lowNibbles(w: number): number {
  return (w & 0x0f) | ((w >> 4) & 0xf0) | ((w >> 8) & 0xf00) | ((w >> 12) & 0xf000);
}

/** The high nibbles of a word's 4 bytes, packed in 16 bits. */
function highNibbles(w: number): number {
  return ((w >> 4) & 0x0f) | ((w >> 8) & 0xf0) | ((w >> 12) & 0xf00) | ((w >>> 16) & 0xf000);
}

type NBits = Extract<LinearWeight, { kind: 'nbits' }>;

/** Block of the fast layout's 4-bit matrices (`--weight-layout fast`): one scale and zero point per 128 weights. */
export const FAST_BLOCK = 128;

/**
 * Requantizes a 4-bit block-32 weight (Q4_0's exact form) into 4-bit blocks of `block` weights
 * with zero points, w ~ scale * (u - zero point): each block's dequantized range, widened to hold
 * 0, in 15 steps (a grid of least squared error measured 10% less error at 3x the time). Lossy (a
 * weight moves by at most one step), for what it saves: onnxruntime's packed layout reads an f32
 * scale and block sum per block, ~1.33x Q4_0's bytes at block 32, ~1.08x at 128
 * (bench/single-node.ts measures the speed and the greedy agreement).
 */
export function requantize4(w: NBits, block: number): NBits {
  if (w.bits !== 4 || w.blockOffsets !== undefined || w.zeroPoints !== undefined || block % w.blockSize !== 0 || w.k % block !== 0) {
    throw new Error(`requantize4: needs a 4-bit weight without offsets or zero points whose rows (${w.k}) hold whole blocks of ${block}`);
  }
  const { n, k } = w;
  const perRow = k / block;
  const zpRow = Math.ceil(perRow / 2);
  const subs = block / w.blockSize; // source blocks per new block
  const subBytes = w.blockSize / 2;
  const src = w.b;
  const srcScales = w.scales;
  const b = new Uint8Array((n * k) / 2);
  const scales = new Float32Array(n * perRow);
  const zeroPoints = new Uint8Array(n * zpRow);
  const lut = new Uint8Array(16);
  // Both layouts keep element e in byte e >> 1 (low nibble first), and a new block is whole source
  // blocks: each source block's nibbles map through a table of its own.
  for (let nb = 0, sb0 = 0; nb < n * perRow; nb++, sb0 += subs) {
    let lo = 0;
    let hi = 0;
    for (let sb = sb0; sb < sb0 + subs; sb++) {
      // Which nibble values occur, as bits of a mask: its lowest and highest bits are the block's extremes.
      let seen = 0;
      for (let i = sb * subBytes, end = i + subBytes; i < end; i++) {
        const x = src[i]!;
        seen |= (1 << (x & 0x0f)) | (1 << (x >> 4));
      }
      const s = srcScales[sb]!;
      const a = s * (31 - Math.clz32(seen & -seen) - 8);
      const c = s * (31 - Math.clz32(seen) - 8);
      if (a < lo) lo = a;
      if (c < lo) lo = c;
      if (a > hi) hi = a;
      if (c > hi) hi = c;
    }
    const scale = hi > lo ? Math.fround((hi - lo) / 15) : 1;
    const zp = Math.min(15, Math.max(0, Math.round(-lo / scale)));
    scales[nb] = scale;
    const c = nb % perRow;
    zeroPoints[(nb - c) / perRow * zpRow + (c >> 1)]! |= zp << ((c & 1) * 4);
    for (let sb = sb0; sb < sb0 + subs; sb++) {
      const step = srcScales[sb]! / scale;
      for (let u = 0; u < 16; u++) {
        const q = Math.round(step * (u - 8)) + zp;
        lut[u] = q < 0 ? 0 : q > 15 ? 15 : q;
      }
      for (let i = sb * subBytes, end = i + subBytes; i < end; i++) {
        const x = src[i]!;
        b[i] = lut[x & 0x0f]! | (lut[x >> 4]! << 4);
      }
    }
  }
  return { kind: 'nbits', n, k, bits: 4, blockSize: block, b, scales, zeroPoints };
}

/** Expands a linear weight to [n, k] f32 (for the embedding table, which is gathered by row). */
export function linearToF32(w: LinearWeight): Float32Array {
  if (w.kind === 'float') return w.weight;
  const out = new Float32Array(w.n * w.k);
  const blocks = (w.n * w.k) / w.blockSize;
  const perRow = w.k / w.blockSize;
  const zpRow = Math.ceil((perRow * w.bits) / 8);
  for (let i = 0; i < blocks; i++) {
    const s = w.scales[i]!;
    const row = Math.floor(i / perRow);
    const col = i % perRow;
    const zero = w.zeroPoints === undefined ? (w.bits === 4 ? 8 : 128)
      : w.bits === 4 ? (w.zeroPoints[row * zpRow + (col >> 1)]! >> ((col & 1) * 4)) & 0x0f : w.zeroPoints[row * zpRow + col]!;
    const offset = w.blockOffsets?.[i];
    for (let j = 0; j < w.blockSize; j++) {
      const e = i * w.blockSize + j;
      const u = w.bits === 8 ? w.b[e]! : (w.b[e >> 1]! >> ((e & 1) * 4)) & 0x0f;
      out[e] = offset === undefined ? s * (u - zero) : s * (u - zero) + offset; // no + 0: keeps -0
    }
  }
  return out;
}
