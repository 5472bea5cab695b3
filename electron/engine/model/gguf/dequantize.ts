// GGML tensor data -> f32, following the block layouts and dequantize_row_* of ggml (ggml-common.h,
// ggml-quants.c). Arithmetic is rounded to f32 step by step (Math.fround) as the C code does.
import { KiwiError } from '../../errors.js';
import { GgmlType, ggmlTypeInfo, ggmlTypeName } from './gguf-types.js';
import { f16Table32 } from './quant/half.js';

const fr = Math.fround;

/** Types dequantize() handles. */
export const DEQUANTIZABLE_TYPES: readonly GgmlType[] = [
  GgmlType.F32,
  GgmlType.F16,
  GgmlType.BF16,
  GgmlType.F64,
  GgmlType.Q4_0,
  GgmlType.Q4_1,
  GgmlType.Q5_0,
  GgmlType.Q5_1,
  GgmlType.Q8_0,
  GgmlType.Q2_K,
  GgmlType.Q3_K,
  GgmlType.Q4_K,
  GgmlType.Q5_K,
  GgmlType.Q6_K,
  GgmlType.IQ4_NL,
  GgmlType.IQ4_XS,
];

/** The 16 non-linear 4-bit levels of IQ4_NL and IQ4_XS (kvalues_iq4nl in ggml-common.h). */
const KVALUES_IQ4NL = Int8Array.of(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);

/**
 * Decodes `count` elements of `type` from `bytes` (which must hold at least their blocks).
 * `count` must be a whole number of blocks.
 */
export function dequantize(type: GgmlType, bytes: Uint8Array, count: number): Float32Array<ArrayBuffer> {
  const { blockSize, typeSize } = ggmlTypeInfo(type);
  if (!Number.isSafeInteger(count) || count < 0 || count % blockSize !== 0) {
    throw new KiwiError('GGUF_INVALID', `cannot dequantize ${String(count)} elements of ${ggmlTypeName(type)}: not a whole number of ${String(blockSize)}-element blocks`);
  }
  const need = (count / blockSize) * typeSize;
  if (bytes.length < need) {
    throw new KiwiError('GGUF_INVALID', `${String(count)} elements of ${ggmlTypeName(type)} need ${String(need)} bytes, got ${String(bytes.length)}`);
  }
  const out = new Float32Array(count);
  const nb = count / blockSize;
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const h = f16Table32();
  const half = (off: number): number => h[dv.getUint16(off, true)]!;
  // Typed-array views below assume a little-endian host, as the GGUF reader checks at load.
  const i8 = new Int8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (type) {
    case GgmlType.F32:
      new Uint8Array(out.buffer).set(bytes.subarray(0, count * 4));
      return out;
    case GgmlType.F64:
      for (let i = 0; i < count; i++) out[i] = dv.getFloat64(i * 8, true);
      return out;
    case GgmlType.F16: {
      const u16 = aligned16(bytes, count);
      for (let i = 0; i < count; i++) out[i] = h[u16[i]!]!;
      return out;
    }
    case GgmlType.BF16: {
      // bf16 is the top half of an f32: shift the bits into place.
      const u16 = aligned16(bytes, count);
      const u32 = new Uint32Array(out.buffer);
      for (let i = 0; i < count; i++) u32[i] = u16[i]! << 16;
      return out;
    }
    case GgmlType.Q8_0:
      // block_q8_0 { f16 d; i8 qs[32]; }
      for (let b = 0; b < nb; b++) {
        const o = b * 34;
        const d = half(o);
        for (let j = 0; j < 32; j++) out[b * 32 + j] = d * i8[o + 2 + j]!;
      }
      return out;
    case GgmlType.Q4_0:
      // block_q4_0 { f16 d; u8 qs[16]; }: element j in the low nibble of qs[j], j+16 in the high one.
      for (let b = 0; b < nb; b++) {
        const o = b * 18;
        const d = half(o);
        for (let j = 0; j < 16; j++) {
          const q = bytes[o + 2 + j]!;
          out[b * 32 + j] = ((q & 0x0f) - 8) * d;
          out[b * 32 + j + 16] = ((q >> 4) - 8) * d;
        }
      }
      return out;
    case GgmlType.Q4_1:
      // block_q4_1 { f16 d; f16 m; u8 qs[16]; }
      for (let b = 0; b < nb; b++) {
        const o = b * 20;
        const d = half(o);
        const m = half(o + 2);
        for (let j = 0; j < 16; j++) {
          const q = bytes[o + 4 + j]!;
          out[b * 32 + j] = fr((q & 0x0f) * d) + m;
          out[b * 32 + j + 16] = fr((q >> 4) * d) + m;
        }
      }
      return out;
    case GgmlType.Q5_0:
      // block_q5_0 { f16 d; u8 qh[4]; u8 qs[16]; }: bit j of qh is the 5th bit of element j.
      for (let b = 0; b < nb; b++) {
        const o = b * 22;
        const d = half(o);
        const qh = dv.getUint32(o + 2, true);
        for (let j = 0; j < 16; j++) {
          const q = bytes[o + 6 + j]!;
          const xh0 = ((qh >>> j) << 4) & 0x10;
          const xh1 = (qh >>> (j + 12)) & 0x10;
          out[b * 32 + j] = (((q & 0x0f) | xh0) - 16) * d;
          out[b * 32 + j + 16] = (((q >> 4) | xh1) - 16) * d;
        }
      }
      return out;
    case GgmlType.Q5_1:
      // block_q5_1 { f16 d; f16 m; u8 qh[4]; u8 qs[16]; }
      for (let b = 0; b < nb; b++) {
        const o = b * 24;
        const d = half(o);
        const m = half(o + 2);
        const qh = dv.getUint32(o + 4, true);
        for (let j = 0; j < 16; j++) {
          const q = bytes[o + 8 + j]!;
          const xh0 = ((qh >>> j) << 4) & 0x10;
          const xh1 = (qh >>> (j + 12)) & 0x10;
          out[b * 32 + j] = fr(((q & 0x0f) | xh0) * d) + m;
          out[b * 32 + j + 16] = fr(((q >> 4) | xh1) * d) + m;
        }
      }
      return out;
    case GgmlType.Q2_K:
      dequantQ2K(bytes, nb, out, half);
      return out;
    case GgmlType.Q3_K:
      dequantQ3K(bytes, nb, out, half);
      return out;
    case GgmlType.Q4_K:
      dequantQ4K(bytes, nb, out, half);
      return out;
    case GgmlType.Q5_K:
      dequantQ5K(bytes, nb, out, half);
      return out;
    case GgmlType.Q6_K:
      dequantQ6K(bytes, i8, nb, out, half);
      return out;
    case GgmlType.IQ4_NL:
      // block_iq4_nl { f16 d; u8 qs[16]; }: like Q4_0's nibble order, through the level table.
      for (let b = 0; b < nb; b++) {
        const o = b * 18;
        const d = half(o);
        for (let j = 0; j < 16; j++) {
          const q = bytes[o + 2 + j]!;
          out[b * 32 + j] = d * KVALUES_IQ4NL[q & 0x0f]!;
          out[b * 32 + j + 16] = d * KVALUES_IQ4NL[q >> 4]!;
        }
      }
      return out;
    case GgmlType.IQ4_XS:
      // block_iq4_xs { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }: 8 sub-blocks of 32
      // with 6-bit scales (low 4 bits in scales_l, high 2 in scales_h), offset by -32.
      for (let b = 0; b < nb; b++) {
        const o = b * 136;
        const d = half(o);
        const scalesH = dv.getUint16(o + 2, true);
        for (let ib = 0; ib < 8; ib++) {
          const ls = ((bytes[o + 4 + (ib >> 1)]! >> (4 * (ib & 1))) & 0x0f) | (((scalesH >> (2 * ib)) & 3) << 4);
          const dl = fr(d * (ls - 32));
          const qs = o + 8 + ib * 16;
          const y = b * 256 + ib * 32;
          for (let j = 0; j < 16; j++) {
            const q = bytes[qs + j]!;
            out[y + j] = dl * KVALUES_IQ4NL[q & 0x0f]!;
            out[y + j + 16] = dl * KVALUES_IQ4NL[q >> 4]!;
          }
        }
      }
      return out;
    default:
      throw new KiwiError('GGUF_UNSUPPORTED', `dequantizing ${ggmlTypeName(type)} is not supported yet`, { type });
  }
}

/** A Uint16Array over the first `count` u16 of `bytes` (copied when not 2-byte aligned). */
function aligned16(bytes: Uint8Array, count: number): Uint16Array {
  if (bytes.byteOffset % 2 === 0) return new Uint16Array(bytes.buffer, bytes.byteOffset, count);
  // Not bytes.slice(): on a Buffer that is a view, not a copy.
  const copy = new Uint8Array(count * 2);
  copy.set(bytes.subarray(0, count * 2));
  return new Uint16Array(copy.buffer);
}

/** The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (get_scale_min_k4); used by the runtime's repacking. */
export function scaleMinK4(j: number, s: Uint8Array, o: number): [number, number] {
  return [scaleK4(j, s, o), minK4(j, s, o)];
}

/** The 6-bit scale of sub-block j of a Q4_K/Q5_K block whose 12 scale bytes start at o (get_scale_min_k4). */
function scaleK4(j: number, s: Uint8Array, o: number): number {
  return j < 4 ? s[o + j]! & 63 : (s[o + j + 4]! & 0x0f) | ((s[o + j - 4]! >> 6) << 4);
}

/** The 6-bit min of sub-block j (get_scale_min_k4). */
function minK4(j: number, s: Uint8Array, o: number): number {
  return j < 4 ? s[o + j + 4]! & 63 : (s[o + j + 4]! >> 4) | ((s[o + j]! >> 6) << 4);
}

// block_q2_K { u8 scales[16]; u8 qs[64]; f16 d; f16 dmin; } — 16 sub-blocks of 16, 2-bit values.
function dequantQ2K(bytes: Uint8Array, nb: number, out: Float32Array, half: (o: number) => number): void {
  for (let b = 0; b < nb; b++) {
    const o = b * 84;
    const d = half(o + 80);
    const min = half(o + 82);
    let y = b * 256;
    let is = 0;
    for (let n = 0; n < 2; n++) {
      const q = o + 16 + n * 32;
      for (let shift = 0; shift < 8; shift += 2) {
        for (let half16 = 0; half16 < 2; half16++) {
          const sc = bytes[o + is++]!;
          const dl = fr(d * (sc & 0x0f));
          const ml = fr(min * (sc >> 4));
          for (let l = 0; l < 16; l++) out[y++] = fr(dl * ((bytes[q + half16 * 16 + l]! >> shift) & 3)) - ml;
        }
      }
    }
  }
}

// block_q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; } — 16 sub-blocks of 16; 2 low bits
// in qs, the 3rd bit in hmask (a clear bit subtracts 4), 6-bit scales offset by -32.
function dequantQ3K(bytes: Uint8Array, nb: number, out: Float32Array, half: (o: number) => number): void {
  const scales = new Int8Array(16);
  for (let b = 0; b < nb; b++) {
    const o = b * 110;
    const d = half(o + 108);
    const sc = o + 96;
    // Unpack the 12 scale bytes: low 4 bits from bytes 0-7, high 2 bits from bytes 8-11.
    for (let j = 0; j < 16; j++) {
      const low = j < 8 ? bytes[sc + j]! & 0x0f : bytes[sc + j - 8]! >> 4;
      const high = (bytes[sc + 8 + (j & 3)]! >> (2 * (j >> 2))) & 3;
      scales[j] = (low | (high << 4)) - 32;
    }
    let y = b * 256;
    let is = 0;
    let m = 1;
    for (let n = 0; n < 2; n++) {
      const q = o + 32 + n * 32;
      for (let shift = 0; shift < 8; shift += 2) {
        for (let h = 0; h < 2; h++) {
          const dl = fr(d * scales[is++]!);
          for (let l = 0; l < 16; l++) {
            const idx = h * 16 + l;
            const v = ((bytes[q + idx]! >> shift) & 3) - (bytes[o + idx]! & m ? 0 : 4);
            out[y++] = dl * v;
          }
        }
        m <<= 1;
      }
    }
  }
}

// block_q4_K { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; } — 8 sub-blocks of 32 with 6-bit
// scales and mins; each 32 bytes of qs hold two sub-blocks (low nibbles, then high nibbles).
function dequantQ4K(bytes: Uint8Array, nb: number, out: Float32Array, half: (o: number) => number): void {
  for (let b = 0; b < nb; b++) {
    const o = b * 144;
    const d = half(o);
    const min = half(o + 2);
    let y = b * 256;
    for (let j = 0; j < 4; j++) {
      const d1 = fr(d * scaleK4(2 * j, bytes, o + 4));
      const mm1 = fr(min * minK4(2 * j, bytes, o + 4));
      const d2 = fr(d * scaleK4(2 * j + 1, bytes, o + 4));
      const mm2 = fr(min * minK4(2 * j + 1, bytes, o + 4));
      const q = o + 16 + j * 32;
      for (let l = 0; l < 32; l++) out[y + l] = fr(d1 * (bytes[q + l]! & 0x0f)) - mm1;
      for (let l = 0; l < 32; l++) out[y + 32 + l] = fr(d2 * (bytes[q + l]! >> 4)) - mm2;
      y += 64;
    }
  }
}

// block_q5_K { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }
function dequantQ5K(bytes: Uint8Array, nb: number, out: Float32Array, half: (o: number) => number): void {
  for (let b = 0; b < nb; b++) {
    const o = b * 176;
    const d = half(o);
    const min = half(o + 2);
    const qh = o + 16;
    let y = b * 256;
    let u1 = 1;
    let u2 = 2;
    for (let j = 0; j < 4; j++) {
      const d1 = fr(d * scaleK4(2 * j, bytes, o + 4));
      const mm1 = fr(min * minK4(2 * j, bytes, o + 4));
      const d2 = fr(d * scaleK4(2 * j + 1, bytes, o + 4));
      const mm2 = fr(min * minK4(2 * j + 1, bytes, o + 4));
      const ql = o + 48 + j * 32;
      for (let l = 0; l < 32; l++) out[y + l] = fr(d1 * ((bytes[ql + l]! & 0x0f) + (bytes[qh + l]! & u1 ? 16 : 0))) - mm1;
      for (let l = 0; l < 32; l++) out[y + 32 + l] = fr(d2 * ((bytes[ql + l]! >> 4) + (bytes[qh + l]! & u2 ? 16 : 0))) - mm2;
      y += 64;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

// block_q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } — 16 sub-blocks of 16, 6-bit
// values: low 4 bits in ql, high 2 bits in qh, offset by -32.
function dequantQ6K(bytes: Uint8Array, i8: Int8Array, nb: number, out: Float32Array, half: (o: number) => number): void {
  for (let b = 0; b < nb; b++) {
    const o = b * 210;
    const d = half(o + 208);
    for (let n = 0; n < 2; n++) {
      const ql = o + n * 64;
      const qh = o + 128 + n * 32;
      const sc = o + 192 + n * 8;
      const y = b * 256 + n * 128;
      for (let l = 0; l < 32; l++) {
        const is = l >> 4;
        const a = bytes[ql + l]!;
        const c = bytes[ql + l + 32]!;
        const hb = bytes[qh + l]!;
        const q1 = ((a & 0x0f) | ((hb & 3) << 4)) - 32;
        const q2 = ((c & 0x0f) | (((hb >> 2) & 3) << 4)) - 32;
        const q3 = ((a >> 4) | (((hb >> 4) & 3) << 4)) - 32;
        const q4 = ((c >> 4) | (((hb >> 6) & 3) << 4)) - 32;
        out[y + l] = fr(d * i8[sc + is]!) * q1;
        out[y + l + 32] = fr(d * i8[sc + is + 2]!) * q2;
        out[y + l + 64] = fr(d * i8[sc + is + 4]!) * q3;
        out[y + l + 96] = fr(d * i8[sc + is + 6]!) * q4;
      }
    }
  }
}
