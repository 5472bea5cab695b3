import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { AUTO_WIRE_POLICY, chooseLinkWire, DEFAULT_THROUGHPUT_MBPS, EXACT_WIRE_POLICY, isLossless, linkThroughputMBps, parseWirePolicy, wireCosts, type LinkFacts } from './link-wire.js';

const decode2048 = { hidden: 2048, decodeBatch: 1, prefillTokens: 128 };
const link = (throughputMBps: number | undefined, kind: LinkFacts['kind'] = 'direct'): LinkFacts => ({ kind, rttMs: 1, ...(throughputMBps !== undefined ? { throughputMBps } : {}) });
const BYTES = { f32: 4, f16: 2, int8: 1 } as const;

describe('chooseLinkWire', () => {
  it('exact is f32 without zstd on any link, however slow', () => {
    for (const l of [link(0.01, 'relayed'), link(10_000), { kind: undefined, rttMs: undefined }]) {
      expect(chooseLinkWire(l, decode2048, 'exact')).toEqual({ encoding: 'f32', zstd: false });
      expect(chooseLinkWire(l, decode2048, EXACT_WIRE_POLICY)).toEqual({ encoding: 'f32', zstd: false });
    }
  });

  it('a fixed choice is taken as given', () => {
    expect(chooseLinkWire(link(10_000), decode2048, { encoding: 'int8', zstd: true })).toEqual({ encoding: 'int8', zstd: true });
    expect(chooseLinkWire(link(0.01), decode2048, { activations: 'f16', zstd: 'off' })).toEqual({ encoding: 'f16', zstd: false });
  });

  it('auto keeps f32 on a fast link and goes to int8 on a slow one', () => {
    // f32 costs 3.4 ns/element, int8 37 and 3 bytes less: they cross near 3 B / 33.6 ns = 89 MB/s.
    expect(chooseLinkWire(link(1000), decode2048, 'auto')).toEqual({ encoding: 'f32', zstd: false });
    expect(chooseLinkWire(link(200), decode2048, 'auto')).toEqual({ encoding: 'f32', zstd: false });
    expect(chooseLinkWire(link(50), decode2048, 'auto').encoding).toBe('int8');
    // So slow that zstd's CPU time is worth the bytes it saves.
    expect(chooseLinkWire(link(0.5, 'relayed'), decode2048, 'auto')).toEqual({ encoding: 'int8', zstd: true });
  });

  it('with zstd off, auto never compresses; with exact activations, zstd auto only ever adds zstd to f32', () => {
    for (const t of [0.1, 1, 10, 100, 1000]) {
      expect(chooseLinkWire(link(t), decode2048, { activations: 'auto', zstd: 'off' }).zstd).toBe(false);
      expect(chooseLinkWire(link(t), decode2048, { activations: 'exact', zstd: 'auto' }).encoding).toBe('f32');
    }
    expect(chooseLinkWire(link(0.05), decode2048, { activations: 'exact', zstd: 'auto' })).toEqual({ encoding: 'f32', zstd: true });
    expect(chooseLinkWire(link(1000), decode2048, { activations: 'exact', zstd: 'auto' })).toEqual({ encoding: 'f32', zstd: false });
  });

  it('without a measured throughput uses the default of the link\'s kind, relayed slower than direct', () => {
    expect(DEFAULT_THROUGHPUT_MBPS.relayed).toBeLessThan(DEFAULT_THROUGHPUT_MBPS.direct);
    expect(linkThroughputMBps(link(undefined, 'direct'))).toBe(DEFAULT_THROUGHPUT_MBPS.direct);
    expect(linkThroughputMBps(link(undefined, 'relayed'))).toBe(DEFAULT_THROUGHPUT_MBPS.relayed);
    expect(linkThroughputMBps({ kind: undefined, rttMs: undefined })).toBe(DEFAULT_THROUGHPUT_MBPS.relayed);
    // A nonsense measurement is ignored, not trusted.
    expect(linkThroughputMBps(link(Number.NaN))).toBe(DEFAULT_THROUGHPUT_MBPS.direct);
    expect(linkThroughputMBps(link(-3))).toBe(DEFAULT_THROUGHPUT_MBPS.direct);
    const direct = chooseLinkWire(link(undefined, 'direct'), decode2048, 'auto');
    const relayed = chooseLinkWire(link(undefined, 'relayed'), decode2048, 'auto');
    expect(BYTES[relayed.encoding]).toBeLessThanOrEqual(BYTES[direct.encoding]);
  });

  it('a slower link never gets a wider encoding (property)', () => {
    fc.assert(
      fc.property(fc.double({ min: 0.01, max: 5000, noNaN: true }), fc.double({ min: 0.01, max: 5000, noNaN: true }), fc.integer({ min: 64, max: 8192 }), fc.integer({ min: 1, max: 32 }), (a, b, hidden, batch) => {
        const [slow, fast] = a < b ? [a, b] : [b, a];
        const frame = { hidden, decodeBatch: batch, prefillTokens: 64 };
        const s = chooseLinkWire(link(slow), frame, { activations: 'auto', zstd: 'off' });
        const f = chooseLinkWire(link(fast), frame, { activations: 'auto', zstd: 'off' });
        expect(BYTES[s.encoding]).toBeLessThanOrEqual(BYTES[f.encoding]);
      }),
    );
  });

  it('wireCosts lists every allowed wire, cheapest first, the choice first', () => {
    const costs = wireCosts(link(20), decode2048, AUTO_WIRE_POLICY);
    expect(costs).toHaveLength(6);
    for (let i = 1; i < costs.length; i++) expect(costs[i]!.ms).toBeGreaterThanOrEqual(costs[i - 1]!.ms);
    expect(costs[0]!.wire).toEqual(chooseLinkWire(link(20), decode2048, 'auto'));
    expect(wireCosts(link(20), decode2048, { activations: 'f16', zstd: 'auto' }).map((c) => c.wire.encoding)).toEqual(['f16', 'f16']);
  });

  it('refuses a frame shape that is not whole positive numbers', () => {
    for (const frame of [{ hidden: 0, decodeBatch: 1, prefillTokens: 1 }, { hidden: 64, decodeBatch: 1.5, prefillTokens: 1 }, { hidden: 64, decodeBatch: 1, prefillTokens: -1 }]) {
      let err: unknown;
      try {
        chooseLinkWire(link(10), frame, 'auto');
      } catch (e) {
        err = e;
      }
      expect(isKiwiError(err, 'USAGE')).toBe(true);
    }
  });
});

describe('parseWirePolicy (kiwi host --activations / --zstd)', () => {
  it('defaults to exact, and zstd follows activations', () => {
    expect(parseWirePolicy(undefined, undefined)).toEqual({ activations: 'exact', zstd: 'off' });
    expect(parseWirePolicy('auto', undefined)).toEqual({ activations: 'auto', zstd: 'auto' });
    expect(parseWirePolicy('int8', undefined)).toEqual({ activations: 'int8', zstd: 'off' });
    expect(parseWirePolicy('f16', 'on')).toEqual({ activations: 'f16', zstd: 'on' });
    expect(parseWirePolicy('exact', 'auto')).toEqual({ activations: 'exact', zstd: 'auto' });
  });

  it('names the allowed values when given others', () => {
    expect(() => parseWirePolicy('bf16', undefined)).toThrow(/--activations must be one of auto, exact, f32, f16, int8, got 'bf16'/);
    expect(() => parseWirePolicy('auto', 'yes')).toThrow(/--zstd must be one of auto, on, off, got 'yes'/);
  });

  it('knows which policies are lossless', () => {
    expect(isLossless(parseWirePolicy(undefined, 'auto'))).toBe(true);
    expect(isLossless(parseWirePolicy('f32', 'on'))).toBe(true);
    expect(isLossless(parseWirePolicy('auto', 'off'))).toBe(false);
    expect(isLossless(parseWirePolicy('f16', 'off'))).toBe(false);
  });
});
