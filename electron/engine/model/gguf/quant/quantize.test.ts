// Half/bfloat16 rounding, dequantization of hand-built blocks, and the quantizers' exactness
// (Q4_0, Q8_0 as llama.cpp's reference) and error bounds.
import { describe, expect, it } from 'vitest';
import { dequantize, scaleMinK4 } from '../dequantize.js';
import { GgmlType, ggmlTypeInfo } from '../gguf-types.js';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from './half.js';
import { QUANTIZABLE_TYPES, quantize } from './quantize.js';

function block(bytes: number[]): Uint8Array {
  return Uint8Array.from(bytes);
}
function u16le(v: number): number[] {
  return [v & 0xff, v >> 8];
}

/** Deterministic normal-ish values (Box-Muller over a tiny LCG). */
function normals(n: number, seed: number, std = 1): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  const next = (): number => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s + 1) / 4294967297;
  };
  for (let i = 0; i < n; i++) out[i] = std * Math.sqrt(-2 * Math.log(next())) * Math.cos(2 * Math.PI * next());
  return out;
}

describe('half conversions', () => {
  it('rounds f32 to f16 to nearest even like F16C', () => {
    const cases: Array<[number, number]> = [
      [1, 0x3c00],
      [-2, 0xc000],
      [0.5, 0x3800],
      [65504, 0x7bff],
      [65519, 0x7bff],
      [65520, 0x7c00], // halfway to 65536: ties to even, which is infinity
      [1e9, 0x7c00],
      [2 ** -24, 0x0001],
      [2 ** -25, 0x0000], // halfway between 0 and the smallest subnormal: ties to even (0)
      [1.5 * 2 ** -25, 0x0001],
      [1 + 2 ** -11, 0x3c00], // tie, even mantissa stays
      [1 + 3 * 2 ** -11, 0x3c02], // tie, odd mantissa rounds up
      [2 ** -14, 0x0400],
      [-0, 0x8000],
      [Infinity, 0x7c00],
    ];
    for (const [v, bits] of cases) expect(f32ToF16Bits(v), String(v)).toBe(bits);
    expect(f32ToF16Bits(NaN) & 0x7c00).toBe(0x7c00);
    expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(NaN)))).toBe(true);
  });

  it('decodes every half value back to the same bits', () => {
    const wrong: number[] = [];
    for (let h = 0; h < 0x10000; h++) {
      if ((h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0) continue; // NaNs
      if (f32ToF16Bits(f16BitsToF32(h)) !== h) wrong.push(h);
    }
    expect(wrong).toEqual([]);
  });

  it('rounds f32 to bf16 to nearest even and keeps NaN', () => {
    expect(f32ToBf16Bits(1)).toBe(0x3f80);
    expect(f32ToBf16Bits(1 + 2 ** -8)).toBe(0x3f80);
    expect(f32ToBf16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(f32ToBf16Bits(-3.140625)).toBe(0xc049);
    expect(bf16BitsToF32(0x3f80)).toBe(1);
    expect(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(NaN)))).toBe(true);
  });
});

describe('dequantize known blocks', () => {
  it('decodes a Q8_0 block as d times each int8', () => {
    const qs = Array.from({ length: 32 }, (_, j) => j * 8 - 128);
    const b = block([...u16le(0x3800), ...qs.map((q) => q & 0xff)]);
    expect(Array.from(dequantize(GgmlType.Q8_0, b, 32))).toEqual(qs.map((q) => q * 0.5));
  });

  it('decodes a Q4_0 block with element j in the low nibble and j+16 in the high nibble', () => {
    const qs = Array.from({ length: 16 }, (_, j) => j | ((15 - j) << 4));
    const out = dequantize(GgmlType.Q4_0, block([...u16le(0x4000), ...qs]), 32);
    const expected = [...Array.from({ length: 16 }, (_, j) => 2 * (j - 8)), ...Array.from({ length: 16 }, (_, j) => 2 * (7 - j))];
    expect(Array.from(out)).toEqual(expected);
  });

  it('decodes a Q4_K block with 6-bit packed scales and mins', () => {
    // sc = [1,2,3,4,17,33,50,63], m = [0,5,10,15,20,40,60,63], packed as get_scale_min_k4 reads them.
    const scales = [65, 130, 195, 196, 64, 133, 202, 207, 65, 129, 194, 255];
    const b = block([...u16le(0x3c00), ...u16le(0x3800), ...scales, ...new Array<number>(128).fill(0x53)]);
    const out = dequantize(GgmlType.Q4_K, b, 256);
    const perSub = [3, 7.5, 4, 12.5, 41, 145, 120, 283.5];
    for (let i = 0; i < 256; i++) expect(out[i], `element ${String(i)}`).toBe(perSub[i >> 5]);
  });

  it('decodes a Q6_K block from its low, high and scale arrays', () => {
    const sc = Array.from({ length: 16 }, (_, j) => (j - 8) & 0xff);
    const b = block([...new Array<number>(128).fill(0x21), ...new Array<number>(64).fill(0xe4), ...sc, ...u16le(0x3800)]);
    const out = dequantize(GgmlType.Q6_K, b, 256);
    const q = [-31, -15, 2, 18];
    for (let e = 0; e < 256; e++) expect(out[e], `element ${String(e)}`).toBe(0.5 * ((e >> 4) - 8) * q[(e % 128) >> 5]!);
  });

  it('unpacks the 6-bit scales and mins of a Q4_K block for every sub-block', () => {
    const scales = Uint8Array.of(65, 130, 195, 196, 64, 133, 202, 207, 65, 129, 194, 255);
    const got = Array.from({ length: 8 }, (_, j) => scaleMinK4(j, scales, 0));
    expect(got).toEqual([
      [1, 0],
      [2, 5],
      [3, 10],
      [4, 15],
      [17, 20],
      [33, 40],
      [50, 60],
      [63, 63],
    ]);
  });

  it('decodes F16 and BF16 element by element', () => {
    expect(Array.from(dequantize(GgmlType.F16, block([...u16le(0x3c00), ...u16le(0xc000), ...u16le(0x0001)]), 3))).toEqual([1, -2, 2 ** -24]);
    expect(Array.from(dequantize(GgmlType.BF16, block([...u16le(0x3f80), ...u16le(0xc049)]), 2))).toEqual([1, -3.140625]);
  });

  it('decodes from unaligned views into a larger buffer', () => {
    const backing = new Uint8Array(1 + 6 + 34);
    backing.set([...u16le(0x3c00), ...u16le(0xc000), ...u16le(0x3f80)], 1);
    const view = backing.subarray(1);
    expect(Array.from(dequantize(GgmlType.F16, view, 2))).toEqual([1, -2]);
    expect(Array.from(dequantize(GgmlType.BF16, view.subarray(4), 1))).toEqual([1]);
    expect(Array.from(dequantize(GgmlType.F32, view.subarray(0, 4), 1))).toEqual([new Float32Array(Uint8Array.of(0, 0x3c, 0, 0xc0).buffer)[0]]);
  });

  it('refuses a count that is not a whole number of blocks or more than the bytes hold', () => {
    expect(() => dequantize(GgmlType.Q4_0, new Uint8Array(18), 16)).toThrow(/whole number/);
    expect(() => dequantize(GgmlType.Q4_0, new Uint8Array(18), 64)).toThrow(/need 36 bytes/);
    expect(() => dequantize(GgmlType.IQ2_XXS, new Uint8Array(66), 256)).toThrow(/not supported/);
  });
});

describe('quantize', () => {
  it('encodes Q4_0 exactly as the llama.cpp reference quantizer', () => {
    // x = j - 16: the largest magnitude is -16, so d = 2 and q = min(15, trunc(x/2 + 8.5)).
    const x = Float32Array.from({ length: 32 }, (_, j) => j - 16);
    const q = Array.from({ length: 32 }, (_, j) => Math.min(15, Math.floor((j + 1) / 2)));
    const expected = [...u16le(0x4000), ...Array.from({ length: 16 }, (_, j) => q[j]! | (q[j + 16]! << 4))];
    expect(Array.from(quantize(GgmlType.Q4_0, x))).toEqual(expected);
  });

  it('encodes Q8_0 exactly as the llama.cpp reference quantizer', () => {
    // amax = 127 gives d = 1 and q = roundf(x), ties away from zero.
    const x = Float32Array.from({ length: 32 }, (_, j) => (j === 0 ? 127 : j === 1 ? -2.5 : j === 2 ? 2.5 : j - 10.25));
    const q = Array.from(x, (v) => (v < 0 ? -Math.round(-v) : Math.round(v)));
    expect(q.slice(0, 3)).toEqual([127, -3, 3]);
    expect(Array.from(quantize(GgmlType.Q8_0, x))).toEqual([...u16le(0x3c00), ...q.map((v) => v & 0xff)]);
  });

  it('encodes an all-zero block as zeros that decode to zeros', () => {
    for (const t of QUANTIZABLE_TYPES) {
      const n = ggmlTypeInfo(t).blockSize === 1 ? 32 : ggmlTypeInfo(t).blockSize;
      expect(Array.from(dequantize(t, quantize(t, new Float32Array(n)), n)).every((v) => v === 0), String(t)).toBe(true);
    }
  });

  it('round-trips random weights within the error each format allows', () => {
    const x = normals(256 * 16, 7, 0.02);
    const rms = Math.sqrt(x.reduce((a, v) => a + v * v, 0) / x.length);
    const bounds: Array<[GgmlType, number]> = [
      [GgmlType.F32, 0],
      [GgmlType.F16, 0.001],
      [GgmlType.BF16, 0.005],
      [GgmlType.Q8_0, 0.01],
      [GgmlType.Q6_K, 0.03],
      [GgmlType.Q4_K, 0.12],
      [GgmlType.Q4_0, 0.12],
    ];
    for (const [t, bound] of bounds) {
      const y = dequantize(t, quantize(t, x), x.length);
      let err = 0;
      for (let i = 0; i < x.length; i++) err += (y[i]! - x[i]!) ** 2;
      expect(Math.sqrt(err / x.length) / rms, String(t)).toBeLessThanOrEqual(bound);
    }
  });
});
