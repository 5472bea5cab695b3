import { describe, expect, it } from 'vitest';
import { freeMemoryReader, watchFreeMemory } from './memory-watch.js';

describe('the free-memory watch', () => {
  it('reports a dip below the reserve once, and recovery only well above it', async () => {
    const readings = [900, 800, 400, 300, 450, 600, 700, 300];
    const changes: Array<[boolean, number]> = [];
    const watch = watchFreeMemory({
      keepFreeBytes: 500,
      readFreeBytes: () => Promise.resolve(readings.shift()!),
      intervalMs: 3_600_000,
      onChange: (low, free) => changes.push([low, free]),
    });
    for (let i = 0; i < 8; i++) await watch.check();
    watch.stop();
    // 450 is above the reserve but not by the hysteresis margin: still low until 700.
    expect(changes).toEqual([[true, 400], [false, 700], [true, 300]]);
  });

  it('ignores a reading that fails', async () => {
    const changes: boolean[] = [];
    const watch = watchFreeMemory({ keepFreeBytes: 10, readFreeBytes: () => Promise.reject(new Error('gone')), intervalMs: 3_600_000, onChange: (low) => changes.push(low) });
    await watch.check();
    watch.stop();
    expect(changes).toEqual([]);
  });

  it('reads this machine\'s free RAM for the CPU provider', async () => {
    const free = await freeMemoryReader('cpu')();
    expect(free).toBeGreaterThan(0);
  });
});
