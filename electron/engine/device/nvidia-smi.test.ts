import { describe, expect, it } from 'vitest';
import { parseNvidiaSmi } from './nvidia-smi.js';

describe('nvidia-smi parsing', () => {
  it('reads index, name, uuid and total/free VRAM in MiB', () => {
    const text = '0, NVIDIA GeForce RTX 4090, GPU-1234, 24564, 23012\n1, NVIDIA H200, GPU-abcd, 143771, 143000\n';
    expect(parseNvidiaSmi(text)).toEqual([
      { index: 0, name: 'NVIDIA GeForce RTX 4090', uuid: 'GPU-1234', memoryTotalBytes: 24564 * 2 ** 20, memoryFreeBytes: 23012 * 2 ** 20 },
      { index: 1, name: 'NVIDIA H200', uuid: 'GPU-abcd', memoryTotalBytes: 143771 * 2 ** 20, memoryFreeBytes: 143000 * 2 ** 20 },
    ]);
  });

  it('skips a GPU whose memory figures are not available', () => {
    expect(parseNvidiaSmi('0, Some GPU, GPU-1, [N/A], [N/A]\r\n')).toEqual([]);
  });

  it('returns no GPUs for empty output', () => {
    expect(parseNvidiaSmi('\n')).toEqual([]);
  });

  it('refuses output that does not have the queried columns', () => {
    expect(() => parseNvidiaSmi('No devices were found, sorry')).toThrow(/unexpected nvidia-smi line/);
  });
});
