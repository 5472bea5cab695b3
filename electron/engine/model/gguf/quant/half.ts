// IEEE half (F16) and bfloat16 conversions, bit-exact with ggml: f32 -> f16/bf16 round to
// nearest even (as F16C's _cvtss_sh and ggml_compute_fp32_to_bf16 do); NaN stays NaN.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** f32 -> f16 bits, round to nearest even, overflow to infinity. */
export function f32ToF16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    // Subnormal half (or zero): value = m * 2^-24.
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rem > halfway || (rem === halfway && (half & 1) === 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent (up to infinity).
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1)) half++;
  return sign | half;
}

let f16Table: Float32Array | undefined;

/** All 65536 half values as f32 (256 KiB, built on first use): decoding is a table lookup. */
export function f16Table32(): Float32Array {
  if (f16Table === undefined) {
    const t = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) t[h] = f16BitsToF32Slow(h);
    f16Table = t;
  }
  return f16Table;
}

function f16BitsToF32Slow(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

export function f16BitsToF32(h: number): number {
  return f16Table32()[h & 0xffff]!;
}

/** Rounds a number to the nearest half value (as a JS number). */
export function roundToF16(value: number): number {
  return f16BitsToF32(f32ToF16Bits(value));
}

/** f32 -> bf16 bits, round to nearest even; NaN is kept quiet (ggml_compute_fp32_to_bf16). */
export function f32ToBf16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  if ((x & 0x7fffffff) > 0x7f800000) return ((x >>> 16) | 64) & 0xffff;
  return ((x + (0x7fff + ((x >>> 16) & 1))) >>> 16) & 0xffff;
}

export function bf16BitsToF32(h: number): number {
  u32[0] = (h & 0xffff) << 16;
  return f32[0]!;
}
