import { describe, expect, it } from 'vitest';
import { measureHostBandwidth } from './memory-bandwidth.js';
import { loadMembwAddon } from './native-addon.js';

const MIB = 2 ** 20;

function addon() {
  const load = loadMembwAddon();
  if (!load.ok) throw new Error(`the native probe must be built for this test: ${load.reason}`);
  return load.addon;
}

/** What the addon's read loop must sum: word i holds i × 2654435761 (mod 2^64), over every pass and thread. */
function expectedChecksum(bytesPerThread: number, threads: number, passes: number): number {
  const words = BigInt(bytesPerThread / 8);
  const perBuffer = (2654435761n * ((words * (words - 1n)) / 2n)) % 2n ** 64n;
  const total = (perBuffer * BigInt(passes * threads)) % 2n ** 64n;
  return Number(total & (2n ** 52n - 1n));
}

describe('memory bandwidth', () => {
  it('reads every word of every thread’s buffer in the native probe', async () => {
    const r = await addon().measureRead(MIB, 2, 3);
    expect(r.bytes).toBe(MIB * 2 * 3);
    expect(r.seconds).toBeGreaterThan(0);
    expect(r.checksum).toBe(expectedChecksum(MIB, 2, 3));
  });

  it('refuses sizes outside its limits before allocating', () => {
    expect(() => addon().measureRead(8, 1, 1)).toThrow(RangeError);
    expect(() => addon().measureRead(MIB, 0, 1)).toThrow(/threads/);
    expect(() => addon().measureRead(MIB, 1, 0)).toThrow(/passes/);
    expect(() => addon().measureRead(2 ** 40, 1, 1)).toThrow(/16 GiB/);
  });

  it('reports the native method when the addon is built', async () => {
    const r = await measureHostBandwidth({ threads: 2, bytesPerThread: 8 * MIB, rounds: 2, passesPerRound: 1 });
    expect(r.method).toBe('native-read');
    expect(r.fallbackReason).toBeNull();
    expect(r.samplesGBps).toHaveLength(2);
    expect(r.gbps).toBeGreaterThan(0);
  });

  it('falls back to JS copies and says so when the addon is absent', async () => {
    const progress: string[] = [];
    const r = await measureHostBandwidth({
      addon: null,
      threads: 2,
      bytesPerThread: 8 * MIB,
      rounds: 3,
      passesPerRound: 1,
      onProgress: (done, total) => progress.push(`${done}/${total}`),
    });
    expect(r.method).toBe('js-copy');
    expect(r.fallbackReason).toMatch(/not provided/);
    expect(r.gbps).toBeGreaterThan(0);
    expect(progress).toEqual(['1/3', '2/3', '3/3']);
  });

  it('refuses to pretend: asking for the native probe without it is an error', async () => {
    await expect(measureHostBandwidth({ method: 'native', addon: null, rounds: 1 })).rejects.toMatchObject({ code: 'BENCH_FAILED' });
  });

  it('stops between rounds when aborted', async () => {
    const controller = new AbortController();
    const run = measureHostBandwidth({
      threads: 1,
      bytesPerThread: 4 * MIB,
      rounds: 50,
      passesPerRound: 1,
      signal: controller.signal,
      onProgress: (done) => {
        if (done === 1) controller.abort();
      },
    });
    await expect(run).rejects.toThrow(/abort/i);
  });
});
