import { describe, expect, it } from 'vitest';
import { measureProviderBandwidth, readProbeModel } from './provider-bandwidth.js';

describe('bandwidth through an execution provider', () => {
  it('reads the whole initializer every run on the CPU provider', async () => {
    // The probe checks each run's sum (reads × elements), so a positive figure means every byte was read.
    const r = await measureProviderBandwidth('cpu', { bytes: 8 * 2 ** 20, reads: 2, runs: 3 });
    expect(r.provider).toBe('cpu');
    expect(r.bytes).toBe(8 * 2 ** 20);
    expect(r.samplesGBps).toHaveLength(3);
    expect(r.gbps).toBeGreaterThan(0);
  });

  it('refuses probe sizes beyond its limits before building anything', () => {
    expect(() => readProbeModel(4 * 2 ** 30, 1)).toThrow(RangeError);
    expect(() => readProbeModel(1024, 0)).toThrow(RangeError);
  });

  it('fails loudly for a provider that cannot start', async () => {
    await expect(measureProviderBandwidth('no-such-provider', { bytes: 1024, reads: 1, runs: 1 })).rejects.toThrow();
  });
});
