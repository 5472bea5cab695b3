import { describe, expect, test } from 'vitest';
import { GgmlType } from '../../model/gguf/gguf-types.js';
import { dequantize } from '../../model/gguf/dequantize.js';
import { quantize } from '../../model/gguf/quant/quantize.js';
import { GraphBuilder, encodeModel } from '../../ort/onnx-graph.js';
import { createStageSession, f32Tensor } from '../../ort/session.js';
import { nbitsLinear } from '../stage-graph.js';
import type { LinearWeight } from '../stage-graph.js';
import { FAST_BLOCK, f16ToF32, f32FromBf16Bytes, f32FromF16Bytes, linearToF32, q4_0ToNBits, q4_KToNBits, q6_KToNBits, q8_0ToNBits, requantize4 } from './repack.js';
import { toLinear } from './convert.js';

function randomValues(count: number, seed: number): Float32Array {
  let s = seed >>> 0;
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
  return Float32Array.from({ length: count }, () => next() * (1 + Math.abs(next()) * 3));
}

const N = 24;
const K = 512;
const cases: Array<[string, GgmlType, (b: Uint8Array, n: number, k: number) => LinearWeight]> = [
  ['Q8_0', GgmlType.Q8_0, q8_0ToNBits],
  ['Q4_0', GgmlType.Q4_0, q4_0ToNBits],
  ['Q6_K', GgmlType.Q6_K, q6_KToNBits],
];

describe('GGUF to MatMulNBits repacking', () => {
  test.each(cases)('%s repacks exactly: every weight equals ggml dequantization', (_name, type, repack) => {
    const bytes = quantize(type, randomValues(N * K, 7));
    const expected = dequantize(type, bytes, N * K);
    expect(linearToF32(repack(bytes, N, K))).toEqual(expected);
  });

  test('Q4_K repacks without zero points (prepackable) plus block offsets, within a few f32 roundings of ggml dequantization', () => {
    const bytes = quantize(GgmlType.Q4_K, randomValues(N * K, 11));
    const expected = dequantize(GgmlType.Q4_K, bytes, N * K);
    const w = q4_KToNBits(bytes, N, K);
    // Float zero points keep onnxruntime from prepacking MatMulNBits (the ~40x slower path).
    expect('zeroPoints' in w).toBe(false);
    if (w.kind !== 'nbits' || w.blockOffsets === undefined) throw new Error('expected block offsets');
    const got = linearToF32(w);
    // w = d*sc*q - dmin*m cancels, so measure against the block's magnitudes: 15*scale + |offset|.
    let worst = 0;
    for (let i = 0; i < got.length; i++) {
      const blk = Math.floor(i / 32);
      const mag = Math.abs(w.scales[blk]!) * 15 + Math.abs(w.blockOffsets[blk]!);
      worst = Math.max(worst, Math.abs(got[i]! - expected[i]!) / mag);
    }
    expect(worst).toBeLessThan(4 * 2 ** -24);
  });

  // The word-at-a-time paths (aligned input) against the byte-at-a-time ones (the same bytes at an
  // odd offset), on random bytes: every bit pattern of nibbles, signs, scales and 6-bit mins.
  test.each([
    ['Q8_0', 34, 32, q8_0ToNBits],
    ['Q4_0', 18, 32, q4_0ToNBits],
    ['Q6_K', 210, 256, q6_KToNBits],
    ['Q4_K', 144, 256, q4_KToNBits],
  ] as const)('%s: the aligned fast path gives the same bytes as the byte-wise path', (_name, blockBytes, block, repack) => {
    const n = 6;
    const k = 1024;
    const raw = new Uint8Array(((n * k) / block) * blockBytes + 1);
    let s = 12345;
    for (let i = 0; i < raw.length; i++) raw[i] = (s = (Math.imul(s, 1103515245) + 12345) >>> 0) >>> 24;
    const aligned = raw.slice(0, raw.length - 1);
    const odd = raw.subarray(1);
    odd.set(aligned);
    expect(odd.byteOffset % 2).toBe(1);
    const bytesOf = (w: LinearWeight): Uint8Array[] => {
      if (w.kind !== 'nbits') throw new Error('expected nbits');
      const f = (a: Float32Array | undefined) => (a === undefined ? new Uint8Array(0) : new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
      return [w.b, f(w.scales), f(w.blockOffsets)];
    };
    expect(bytesOf(repack(aligned, n, k))).toEqual(bytesOf(repack(odd, n, k)));
  });

  test('refuses a tensor whose byte length does not match its shape', () => {
    expect(() => q4_0ToNBits(new Uint8Array(17), 1, 32)).toThrow(/expected 18/);
    expect(() => q8_0ToNBits(new Uint8Array(34), 1, 48)).toThrow(/multiple of 32/);
  });

  test('decodes f16 and bf16 exactly', () => {
    expect([0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00].map(f16ToF32)).toEqual([1, -2, 2 ** -24, 65504, Infinity]);
    expect(Array.from(f32FromF16Bytes(Uint8Array.of(0x00, 0x3c, 0x00, 0xc0), 2))).toEqual([1, -2]);
    expect(Array.from(f32FromBf16Bytes(Uint8Array.of(0x80, 0x3f, 0x40, 0xc0), 2))).toEqual([1, -3]);
  });

  test.each([...cases, ['Q4_K', GgmlType.Q4_K, q4_KToNBits] as const])(
    '%s blocks multiply in the stage graph\'s MatMulNBits linear like an f32 matmul of the dequantized weights',
    async (_name, type, repack) => {
      const bytes = quantize(type, randomValues(N * K, 3));
      const w = repack(bytes, N, K);
      if (w.kind !== 'nbits') throw new Error('expected nbits');
      const dense = dequantize(type, bytes, N * K);
      const g = new GraphBuilder('mm');
      const x = g.input('x', 'float32', [1, 2, K]);
      nameOutput(g, nbitsLinear(g, x, w, 'w', 0, false), 'y');
      g.output('y', 'float32', [1, 2, N]);
      const session = await createStageSession(encodeModel(g).model, { provider: 'cpu', threads: 1 });
      try {
        const xs = randomValues(2 * K, 5);
        const y = (await session.run({ x: f32Tensor(xs, [1, 2, K]) })).y!.data as Float32Array;
        for (let r = 0; r < 2; r++) {
          for (let n = 0; n < N; n++) {
            let ref = 0;
            let mag = 0;
            for (let k = 0; k < K; k++) {
              ref += xs[r * K + k]! * dense[n * K + k]!;
              mag += Math.abs(xs[r * K + k]! * dense[n * K + k]!);
            }
            // f32 accumulation in a different order: error bounded by ~K * eps * sum|terms|.
            expect(Math.abs(y[r * N + n]! - ref)).toBeLessThan(mag * 1e-5);
          }
        }
      } finally {
        await session.dispose();
      }
    },
  );
});

describe('the fast layout: Q4_0 requantized to blocks of 128 with zero points', () => {
  const nbits = (w: LinearWeight) => {
    if (w.kind !== 'nbits') throw new Error('expected nbits');
    return w;
  };
  const fastOf = (bytes: Uint8Array, n: number, k: number) => requantize4(nbits(q4_0ToNBits(bytes, n, k)), FAST_BLOCK);

  test('keeps every weight within one step of its block, about a third of a step on average, and bit-exact where four blocks share a grid', () => {
    const bytes = quantize(GgmlType.Q4_0, randomValues(N * K, 21));
    const exact = dequantize(GgmlType.Q4_0, bytes, N * K);
    const w = fastOf(bytes, N, K);
    expect([w.blockSize, w.scales.length, w.zeroPoints?.length]).toEqual([FAST_BLOCK, (N * K) / FAST_BLOCK, (N * K) / FAST_BLOCK / 2]);
    const got = linearToF32(w);
    let worst = 0;
    let squares = 0;
    for (let i = 0; i < got.length; i++) {
      const step = w.scales[Math.floor(i / FAST_BLOCK)]!;
      worst = Math.max(worst, Math.abs(got[i]! - exact[i]!) / step);
      squares += ((got[i]! - exact[i]!) / step) ** 2;
    }
    expect(worst).toBeLessThanOrEqual(1);
    expect(Math.sqrt(squares / got.length)).toBeLessThan(0.4);
    expect(got).not.toEqual(exact); // random scales per 32: lossy

    // Four blocks of one scale whose nibbles run 0..15: the grid is theirs, and nothing moves.
    const aligned = new Uint8Array(4 * 18);
    for (let blk = 0; blk < 4; blk++) {
      aligned.set([0x00, 0x3c], blk * 18); // scale 1.0 (f16)
      for (let j = 0; j < 16; j++) aligned[blk * 18 + 2 + j] = (j & 0x0f) | (((15 - j) & 0x0f) << 4);
    }
    const f = fastOf(aligned, 1, 128);
    expect(Array.from(f.scales)).toEqual([1]);
    expect(f.zeroPoints![0]! & 0x0f).toBe(8);
    expect(linearToF32(f)).toEqual(dequantize(GgmlType.Q4_0, aligned, 128));
  });

  test('is what toLinear gives Q4_0 in the fast layout when rows hold whole blocks of 128; other rows and types stay exact', () => {
    const bytes = quantize(GgmlType.Q4_0, randomValues(N * K, 4));
    const form = (k: number) => ({ name: 'w', type: GgmlType.Q4_0, dims: [k, N] });
    expect(nbits(toLinear(form(K), bytes, N, K, 'fast'))).toEqual(fastOf(bytes, N, K));
    expect(toLinear(form(K), bytes, N, K)).toEqual(q4_0ToNBits(bytes, N, K));
    const short = quantize(GgmlType.Q4_0, randomValues(N * 96, 4));
    expect(toLinear(form(96), short, N, 96, 'fast')).toEqual(q4_0ToNBits(short, N, 96));
    const q8 = quantize(GgmlType.Q8_0, randomValues(N * K, 4));
    expect(toLinear({ name: 'w', type: GgmlType.Q8_0, dims: [K, N] }, q8, N, K, 'fast')).toEqual(q8_0ToNBits(q8, N, K));
  });

  test('multiplies in MatMulNBits (zero points as onnxruntime reads them) like an f32 matmul of its own weights', async () => {
    const bytes = quantize(GgmlType.Q4_0, randomValues(N * K, 9));
    const w = fastOf(bytes, N, K);
    const dense = linearToF32(w);
    for (const accuracy of [0, 4] as const) {
      const g = new GraphBuilder('mm');
      const x = g.input('x', 'float32', [1, 1, K]);
      nameOutput(g, nbitsLinear(g, x, w, 'w', accuracy, false), 'y');
      g.output('y', 'float32', [1, 1, N]);
      const session = await createStageSession(encodeModel(g).model, { provider: 'cpu', threads: 1 });
      try {
        const xs = randomValues(K, 5);
        const y = (await session.run({ x: f32Tensor(xs, [1, 1, K]) })).y!.data as Float32Array;
        for (let n = 0; n < N; n++) {
          let ref = 0;
          let mag = 0;
          for (let k = 0; k < K; k++) {
            ref += xs[k]! * dense[n * K + k]!;
            mag += Math.abs(xs[k]! * dense[n * K + k]!);
          }
          // f32 accumulation order at level 0; int8 activations (1/254 per value) at level 4.
          expect(Math.abs(y[n]! - ref)).toBeLessThan(mag * (accuracy === 0 ? 1e-5 : 1e-2));
        }
      } finally {
        await session.dispose();
      }
    }
  });
});

function nameOutput(g: GraphBuilder, value: string, name: string): void {
  g.op('Identity', [value], { output: name });
}
