// f32 -> GGML tensor data in the block layouts of ggml-common.h. F16, BF16, Q8_0 and Q4_0 are
// bit-exact with llama.cpp's reference quantizers (quantize_row_*_ref); Q4_K and Q6_K use a
// plain min/max scale search, so their bytes are valid blocks but not byte-identical to llama.cpp's
// (which searches scales iteratively). f32 arithmetic is mirrored with Math.fround.
import { KiwiError } from '../../../errors.js';
import { GgmlType, ggmlTypeInfo, ggmlTypeName } from '../gguf-types.js';
import { f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from './half.js';

const fr = Math.fround;

export const QUANTIZABLE_TYPES: readonly GgmlType[] = [
  GgmlType.F32,
  GgmlType.F16,
  GgmlType.BF16,
  GgmlType.Q8_0,
  GgmlType.Q4_0,
  GgmlType.Q4_K,
  GgmlType.Q6_K,
];

/** C's roundf: half away from zero. */
function roundf(x: number): number {
  return x < 0 ? -Math.round(-x) : Math.round(x);
}

/** Encodes `values` (a whole number of blocks) as `type`. */
export function quantize(type: GgmlType, values: Float32Array): Uint8Array<ArrayBuffer> {
  const { blockSize, typeSize } = ggmlTypeInfo(type);
  if (values.length % blockSize !== 0) {
    throw new KiwiError('USAGE', `${String(values.length)} values are not a whole number of ${ggmlTypeName(type)} blocks of ${String(blockSize)}`);
  }
  const nb = values.length / blockSize;
  const out = new Uint8Array(nb * typeSize);
  const dv = new DataView(out.buffer);
  switch (type) {
    case GgmlType.F32:
      out.set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
      return out;
    case GgmlType.F16:
      for (let i = 0; i < values.length; i++) dv.setUint16(i * 2, f32ToF16Bits(values[i]!), true);
      return out;
    case GgmlType.BF16:
      for (let i = 0; i < values.length; i++) dv.setUint16(i * 2, f32ToBf16Bits(values[i]!), true);
      return out;
    case GgmlType.Q8_0:
      quantQ8_0(values, nb, dv);
      return out;
    case GgmlType.Q4_0:
      quantQ4_0(values, nb, out, dv);
      return out;
    case GgmlType.Q4_K:
      quantQ4K(values, nb, out, dv);
      return out;
    case GgmlType.Q6_K:
      quantQ6K(values, nb, out, dv);
      return out;
    default:
      throw new KiwiError('GGUF_UNSUPPORTED', `quantizing to ${ggmlTypeName(type)} is not supported; use one of ${QUANTIZABLE_TYPES.map(ggmlTypeName).join(', ')}`);
  }
}

// quantize_row_q8_0_ref: d = amax/127 (f16), q = roundf(x / d) computed as x * (1/d).
function quantQ8_0(x: Float32Array, nb: number, dv: DataView): void {
  for (let b = 0; b < nb; b++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[b * 32 + j]!));
    const d = fr(amax / 127);
    const id = d !== 0 ? fr(1 / d) : 0;
    const o = b * 34;
    dv.setUint16(o, f32ToF16Bits(d), true);
    for (let j = 0; j < 32; j++) dv.setInt8(o + 2 + j, roundf(fr(x[b * 32 + j]! * id)));
  }
}

// quantize_row_q4_0_ref: d = (value of largest magnitude) / -8, q = min(15, trunc(x/d + 8.5));
// element j goes to the low nibble of byte j, element j+16 to its high nibble.
function quantQ4_0(x: Float32Array, nb: number, out: Uint8Array, dv: DataView): void {
  for (let b = 0; b < nb; b++) {
    let amax = 0;
    let max = 0;
    for (let j = 0; j < 32; j++) {
      const v = x[b * 32 + j]!;
      if (amax < Math.abs(v)) {
        amax = Math.abs(v);
        max = v;
      }
    }
    const d = fr(max / -8);
    const id = d !== 0 ? fr(1 / d) : 0;
    const o = b * 18;
    dv.setUint16(o, f32ToF16Bits(d), true);
    for (let j = 0; j < 16; j++) {
      const x0 = fr(x[b * 32 + j]! * id);
      const x1 = fr(x[b * 32 + 16 + j]! * id);
      const xi0 = Math.min(15, Math.trunc(fr(x0 + 8.5)));
      const xi1 = Math.min(15, Math.trunc(fr(x1 + 8.5)));
      out[o + 2 + j] = xi0 | (xi1 << 4);
    }
  }
}

// Q4_K: 8 sub-blocks of 32, x ≈ d*sc[j]*q - dmin*m[j] with q in 0..15 and 6-bit sc, m.
function quantQ4K(x: Float32Array, nb: number, out: Uint8Array, dv: DataView): void {
  const scale = new Float64Array(8);
  const minv = new Float64Array(8);
  const sc = new Uint8Array(8);
  const mn = new Uint8Array(8);
  const q = new Uint8Array(256);
  for (let b = 0; b < nb; b++) {
    const base = b * 256;
    let maxScale = 0;
    let maxMin = 0;
    for (let j = 0; j < 8; j++) {
      let lo = Infinity;
      let hi = -Infinity;
      for (let l = 0; l < 32; l++) {
        const v = x[base + j * 32 + l]!;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
      if (lo > 0) lo = 0; // the format subtracts a non-negative min
      scale[j] = (hi - lo) / 15;
      minv[j] = -lo;
      maxScale = Math.max(maxScale, scale[j]!);
      maxMin = Math.max(maxMin, minv[j]!);
    }
    const d = f16BitsToF32(f32ToF16Bits(maxScale / 63));
    const dmin = f16BitsToF32(f32ToF16Bits(maxMin / 63));
    for (let j = 0; j < 8; j++) {
      sc[j] = d > 0 ? Math.min(63, Math.round(scale[j]! / d)) : 0;
      mn[j] = dmin > 0 ? Math.min(63, Math.round(minv[j]! / dmin)) : 0;
      const dj = fr(d * sc[j]!);
      const mj = fr(dmin * mn[j]!);
      for (let l = 0; l < 32; l++) {
        const v = x[base + j * 32 + l]!;
        q[j * 32 + l] = dj > 0 ? Math.max(0, Math.min(15, Math.round((v + mj) / dj))) : 0;
      }
    }
    const o = b * 144;
    dv.setUint16(o, f32ToF16Bits(d), true);
    dv.setUint16(o + 2, f32ToF16Bits(dmin), true);
    // 12 bytes of scales: the layout read back by get_scale_min_k4.
    for (let j = 0; j < 4; j++) {
      out[o + 4 + j] = sc[j]!;
      out[o + 4 + j + 4] = mn[j]!;
    }
    for (let j = 4; j < 8; j++) {
      out[o + 4 + j + 4] = (sc[j]! & 0x0f) | ((mn[j]! & 0x0f) << 4);
      out[o + 4 + j - 4]! |= (sc[j]! >> 4) << 6;
      out[o + 4 + j]! |= (mn[j]! >> 4) << 6;
    }
    for (let j = 0; j < 4; j++) {
      for (let l = 0; l < 32; l++) out[o + 16 + j * 32 + l] = q[j * 64 + l]! | (q[j * 64 + 32 + l]! << 4);
    }
  }
}

// Q6_K: 16 sub-blocks of 16, x ≈ d*sc[j]*(q-32) with q in 0..63 and int8 sc.
function quantQ6K(x: Float32Array, nb: number, out: Uint8Array, dv: DataView): void {
  const scales = new Float64Array(16);
  const L = new Uint8Array(256);
  for (let b = 0; b < nb; b++) {
    const base = b * 256;
    let maxScale = 0;
    let maxAbsScale = 0;
    for (let j = 0; j < 16; j++) {
      let amax = 0;
      let max = 0;
      for (let l = 0; l < 16; l++) {
        const v = x[base + j * 16 + l]!;
        if (Math.abs(v) > amax) {
          amax = Math.abs(v);
          max = v;
        }
      }
      scales[j] = max / -32;
      if (Math.abs(scales[j]!) > maxAbsScale) {
        maxAbsScale = Math.abs(scales[j]!);
        maxScale = scales[j]!;
      }
    }
    const o = b * 210;
    if (maxAbsScale === 0) {
      out.fill(0, o, o + 210);
      for (let l = 0; l < 128; l++) out[o + l] = 0x88; // q = 32 everywhere, i.e. zero
      for (let l = 0; l < 64; l++) out[o + 128 + l] = 0xaa;
      continue;
    }
    const iscale = -128 / maxScale;
    const d = f16BitsToF32(f32ToF16Bits(1 / iscale));
    for (let j = 0; j < 16; j++) {
      const s = Math.max(-128, Math.min(127, Math.round(iscale * scales[j]!)));
      dv.setInt8(o + 192 + j, s);
      const dj = fr(d * s);
      for (let l = 0; l < 16; l++) {
        const v = x[base + j * 16 + l]!;
        const qv = dj !== 0 ? Math.max(-32, Math.min(31, Math.round(v / dj))) : 0;
        L[j * 16 + l] = qv + 32;
      }
    }
    dv.setUint16(o + 208, f32ToF16Bits(d), true);
    for (let n = 0; n < 2; n++) {
      const ql = o + n * 64;
      const qh = o + 128 + n * 32;
      const y = n * 128;
      for (let l = 0; l < 32; l++) {
        const q1 = L[y + l]!;
        const q2 = L[y + l + 32]!;
        const q3 = L[y + l + 64]!;
        const q4 = L[y + l + 96]!;
        out[ql + l] = (q1 & 0x0f) | ((q3 & 0x0f) << 4);
        out[ql + l + 32] = (q2 & 0x0f) | ((q4 & 0x0f) << 4);
        out[qh + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
      }
    }
  }
}
