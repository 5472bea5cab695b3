import { describe, expect, it } from 'vitest';
import { mergeGpus, probeHost } from './host-probe.js';

describe('host probe', () => {
  it('reports this machine’s CPU and memory', async () => {
    const host = await probeHost();
    expect(host.cpu.cores).toBeGreaterThanOrEqual(1);
    expect(host.cpu.model.length).toBeGreaterThan(0);
    expect(host.memory.totalBytes).toBeGreaterThan(256 * 2 ** 20);
    expect(host.memory.availableBytes).toBeGreaterThan(0);
    expect(host.memory.availableBytes).toBeLessThanOrEqual(host.memory.totalBytes);
    expect(Array.isArray(host.gpus)).toBe(true);
  });

  it('prefers nvidia-smi figures for NVIDIA boards and keeps other controllers', () => {
    const controllers = [
      { vendor: 'NVIDIA Corporation', model: 'GeForce RTX 4090', bus: '', vram: 24564, vramDynamic: false },
      { vendor: 'Intel Corporation', model: 'UHD Graphics 770', bus: '', vram: 0, vramDynamic: true },
      { vendor: 'Apple', model: 'Apple M2', bus: '', vram: 16384, vramDynamic: true, memoryFree: 8000 },
    ];
    const nvidia = [{ index: 0, name: 'NVIDIA GeForce RTX 4090', uuid: 'GPU-1', memoryTotalBytes: 24564 * 2 ** 20, memoryFreeBytes: 20000 * 2 ** 20 }];
    expect(mergeGpus(controllers, nvidia)).toEqual([
      { name: 'NVIDIA GeForce RTX 4090', vendor: 'NVIDIA', vramTotalBytes: 24564 * 2 ** 20, vramFreeBytes: 20000 * 2 ** 20, source: 'nvidia-smi' },
      { name: 'UHD Graphics 770', vendor: 'Intel Corporation', vramTotalBytes: null, vramFreeBytes: null, source: 'systeminformation' },
      { name: 'Apple M2', vendor: 'Apple', vramTotalBytes: 16384 * 2 ** 20, vramFreeBytes: 8000 * 2 ** 20, source: 'systeminformation' },
    ]);
  });

  it('keeps NVIDIA controllers from systeminformation when nvidia-smi is absent', () => {
    const controllers = [{ vendor: 'NVIDIA Corporation', model: 'GeForce GTX 1080', bus: '', vram: 8192, vramDynamic: false }];
    expect(mergeGpus(controllers, [])).toEqual([
      { name: 'GeForce GTX 1080', vendor: 'NVIDIA Corporation', vramTotalBytes: 8192 * 2 ** 20, vramFreeBytes: null, source: 'systeminformation' },
    ]);
  });
});
