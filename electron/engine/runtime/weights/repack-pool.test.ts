import { afterAll, describe, expect, test } from 'vitest';
import { KiwiError } from '../../errors.js';
import { GgmlType } from '../../model/gguf/gguf-types.js';
import { quantize } from '../../model/gguf/quant/quantize.js';
import type { LinearWeight } from '../stage-graph.js';
import { toLinear } from './convert.js';
import { RepackPool } from './repack-pool.js';

function randomValues(count: number, seed: number): Float32Array {
  let s = seed >>> 0;
  const next = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
  return Float32Array.from({ length: count }, () => next() * 2);
}

const bytesOf = (w: LinearWeight): Uint8Array[] => {
  const f = (a: ArrayBufferView | undefined) => (a === undefined ? new Uint8Array(0) : new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
  return w.kind === 'float' ? [f(w.weight)] : [w.b, f(w.scales), f(w.blockOffsets)];
};

describe('RepackPool', () => {
  const pool = new RepackPool(2);
  afterAll(() => pool.close());
  const n = 16;
  const k = 512;

  test('converts on worker threads to the same bytes as on this thread, several at once', async () => {
    const types = [GgmlType.Q4_0, GgmlType.Q8_0, GgmlType.Q4_K, GgmlType.Q6_K, GgmlType.F16, GgmlType.F32];
    const jobs = types.map((type, i) => {
      const bytes = quantize(type, randomValues(n * k, 3 + i));
      const form = { name: `t${i}`, type, dims: [k, n] };
      return { expected: bytesOf(toLinear(form, bytes, n, k)), got: pool.convert(form, bytes.slice(), n, k) };
    });
    for (const j of jobs) expect(bytesOf(await j.got)).toEqual(j.expected);
    expect(pool.failed).toBe(false);
  });

  test('a conversion error arrives as the KiwiError toLinear throws', async () => {
    const form = { name: 'blk.0.bad', type: GgmlType.Q4_0, dims: [k, n] };
    const err = await pool.convert(form, new Uint8Array(100), n, k).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KiwiError);
    expect((err as KiwiError).code).toBe('GGUF_INVALID');
    // The pool still works after an error.
    const bytes = quantize(GgmlType.Q4_0, randomValues(n * k, 9));
    expect(bytesOf(await pool.convert({ ...form, name: 'ok' }, bytes.slice(), n, k))).toEqual(bytesOf(toLinear(form, bytes, n, k)));
  });
});
