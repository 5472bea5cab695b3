import { describe, expect, it } from 'vitest';
import { formatBytes, formatEta, ProgressRate, progressText, type ProgressSample } from './progress-rate.js';

/** A simulated transfer: `total` bytes in `chunk`-byte pieces at `bytesPerS`, on an injected clock. */
function simulate(total: number, chunk: number, bytesPerS: number, tracker: (now: () => number) => ProgressRate): { samples: ProgressSample[]; updates: number; at: number[] } {
  let t = 0;
  const rate = tracker(() => t);
  const samples: ProgressSample[] = [];
  const at: number[] = [];
  let updates = 0;
  for (let done = 0; done < total;) {
    done = Math.min(total, done + chunk);
    t = (done / bytesPerS) * 1000;
    updates++;
    const s = rate.update(done, total);
    if (s !== null) {
      samples.push(s);
      at.push(t);
    }
  }
  return { samples, updates, at };
}

describe('ProgressRate', () => {
  it('turns a 100 MB transfer of 64 KiB chunks into a handful of events a second, the last one exact', () => {
    const total = 100_000_000;
    // 20 MB/s: five seconds, 1526 chunk reports.
    const { samples, updates, at } = simulate(total, 65_536, 20_000_000, (now) => new ProgressRate({ now }));
    expect(updates).toBe(1526);
    const seconds = 5;
    // At most four a second (one per 250 ms) plus the final one; at least two a second.
    expect(samples.length).toBeLessThanOrEqual(4 * seconds + 2);
    expect(samples.length).toBeGreaterThanOrEqual(2 * seconds);
    for (let i = 1; i < samples.length - 1; i++) expect((at[i] as number) - (at[i - 1] as number)).toBeGreaterThanOrEqual(250);
    const last = samples.at(-1) as ProgressSample;
    expect(last).toMatchObject({ done: total, total, final: true, etaSeconds: 0 });
    expect(samples.filter((s) => s.final)).toHaveLength(1);
    // The rate is the simulated 20 MB/s, and the time left counts down to the real remainder.
    expect(last.rate).toBeCloseTo(20_000_000, -3);
    const mid = samples.find((s) => s.done >= total / 2 && !s.final) as ProgressSample;
    expect(mid.rate).toBeCloseTo(20_000_000, -4);
    expect(mid.etaSeconds).toBeCloseTo((total - mid.done) / 20_000_000, 1);
    const etas = samples.filter((s) => !s.final && s.etaSeconds !== null).map((s) => s.etaSeconds as number);
    for (let i = 1; i < etas.length; i++) expect(etas[i]).toBeLessThan(etas[i - 1] as number);
  });

  it('follows a change of speed within its window', () => {
    let t = 0;
    const rate = new ProgressRate({ now: () => t, windowMs: 2000 });
    let done = 0;
    const seen: ProgressSample[] = [];
    // 10 s at 1 MB/s, then 10 s at 5 MB/s, reported every 10 ms (the first report at 10 ms).
    for (let i = 1; i <= 2000; i++) {
      t = i * 10;
      done += i <= 1000 ? 10_000 : 50_000;
      const s = rate.update(done, 60_000_000);
      if (s !== null) seen.push(s);
    }
    const last = seen.at(-1);
    expect(last?.final).toBe(true);
    // The final sample is the whole transfer's mean; the ones before it the recent speed.
    expect(last?.rate).toBeCloseTo(((60_000_000 - 10_000) * 1000) / 19_990, 3);
    expect(seen.at(-2)?.rate).toBeCloseTo(5_000_000, -3);
    expect(seen.find((s) => s.done >= 5_000_000)?.rate).toBeCloseTo(1_000_000, -3);
    t = 20_000;
    const again = new ProgressRate({ now: () => t, windowMs: 2000 });
    again.update(0, 100);
    t = 21_000;
    expect(again.update(50, 100)?.rate).toBeCloseTo(50, 5);
  });

  it('starts a new transfer when the count goes back or the total changes, and finishes one of unknown size', () => {
    let t = 0;
    const rate = new ProgressRate({ now: () => t });
    expect(rate.update(0, null)).toMatchObject({ done: 0, total: null, final: false, rate: null, etaSeconds: null });
    t = 100;
    expect(rate.update(10, null)).toBeNull();
    t = 1000;
    expect(rate.update(500, null)).toMatchObject({ done: 500, final: false, etaSeconds: null });
    t = 1100;
    expect(rate.finish(600)).toMatchObject({ done: 600, final: true, rate: 545.4545454545455 });
    // A re-plan: a new transfer of another size reports at once.
    t = 1150;
    expect(rate.update(5, 50)).toMatchObject({ done: 5, total: 50, final: false, rate: null });
    t = 1160;
    expect(rate.update(50, 50)).toMatchObject({ done: 50, final: true, etaSeconds: 0 });
  });

  it('writes sizes, times and a progress line for people', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(300 * 2 ** 20)).toBe('300 MiB');
    expect(formatEta(42.4)).toBe('42 s');
    expect(formatEta(125)).toBe('2 min 5 s');
    expect(formatEta(3840)).toBe('1 h 4 min');
    expect(progressText({ done: 2 ** 29, total: 2 ** 31, rate: 50 * 2 ** 20, etaSeconds: 30.7, final: false })).toBe('512 MiB of 2.0 GiB (25%), 50 MiB/s, 31 s left');
    expect(progressText({ done: 2 ** 31, total: 2 ** 31, rate: 50 * 2 ** 20, etaSeconds: 0, final: true })).toBe('2.0 GiB of 2.0 GiB (100%), 50 MiB/s, done');
  });
});
