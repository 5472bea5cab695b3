import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { benchJson, runDeviceBench, type BlockProbe, type DeviceBenchOptions } from './device-bench.js';
import { probeHost } from './host-probe.js';

const MIB = 2 ** 20;
let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Small buffers keep the test quick; the measurement itself is the real one. */
function options(cacheDir: string, extra: Partial<DeviceBenchOptions> = {}): DeviceBenchOptions {
  return { cacheDir, bandwidth: { threads: 2, bytesPerThread: 8 * MIB, rounds: 2, passesPerRound: 1 }, ...extra };
}

describe('device bench', () => {
  it('measures once, then reuses the cached result on the same hardware', async () => {
    const cacheDir = join(dir, 'reuse');
    const progress: string[] = [];
    const first = await runDeviceBench(options(cacheDir, { onProgress: (m) => progress.push(m) }));
    expect(first.cached).toBe(false);
    expect(first.bandwidth.method).toBe('native-read');
    expect(first.bandwidth.host_gbps).toBeGreaterThan(0);
    expect(first.execution_providers.some((p) => p.name === 'cpu' && p.works)).toBe(true);
    expect(first.memory.total_bytes).toBeGreaterThan(0);
    expect(progress.some((m) => /^memory bandwidth: round 2\/2: [\d.]+ GB\/s$/.test(m))).toBe(true);
    expect(first.fleet_device).toEqual({
      name: first.host.hostname,
      memory_bytes: first.memory.available_bytes,
      bandwidth_gbps: first.bandwidth.host_gbps,
      block_ms: null,
    });

    const second = await runDeviceBench(options(cacheDir));
    expect(second.cached).toBe(true);
    expect(second.fingerprint).toBe(first.fingerprint);
    expect(second.measured_at).toBe(first.measured_at);
    expect(second.bandwidth).toEqual(first.bandwidth);
  });

  it('measures again when asked to refresh', async () => {
    const cacheDir = join(dir, 'refresh');
    const first = await runDeviceBench(options(cacheDir));
    const again = await runDeviceBench(options(cacheDir, { refresh: true }));
    expect(again.cached).toBe(false);
    expect(again.fingerprint).toBe(first.fingerprint);
  });

  it('measures again when the hardware changes', async () => {
    const cacheDir = join(dir, 'changed');
    const first = await runDeviceBench(options(cacheDir));
    // The same machine with 16 GiB more RAM is different hardware.
    const upgraded = async () => {
      const host = await probeHost();
      return { ...host, memory: { ...host.memory, totalBytes: host.memory.totalBytes + 16 * 2 ** 30 } };
    };
    const after = await runDeviceBench(options(cacheDir, { probeHost: upgraded }));
    expect(after.cached).toBe(false);
    expect(after.fingerprint).not.toBe(first.fingerprint);
    expect((await readdir(cacheDir)).filter((f) => f.endsWith('.json'))).toHaveLength(2);
  });

  it('measures again, and says why, when the cache file is damaged', async () => {
    const cacheDir = join(dir, 'damaged');
    const first = await runDeviceBench(options(cacheDir));
    await writeFile(join(cacheDir, `device-${first.fingerprint}.json`), '{"version": 1, "fingerprint": ');
    const progress: string[] = [];
    const after = await runDeviceBench(options(cacheDir, { onProgress: (m) => progress.push(m) }));
    expect(after.cached).toBe(false);
    expect(progress.some((m) => /not JSON/.test(m))).toBe(true);
  });

  it('runs a block probe through the seam once per model and caches its result', async () => {
    const cacheDir = join(dir, 'block');
    let runs = 0;
    // The runtime will provide this; here a real timing of real work stands in its place.
    const probe: BlockProbe = {
      key: 'shape-a/cpu',
      run: async () => {
        runs++;
        const t0 = performance.now();
        let x = 0;
        for (let i = 0; i < 1e5; i++) x += Math.sqrt(i);
        return { block_ms: Math.max(performance.now() - t0, 1e-3) + (x > 0 ? 0 : 1), runs: 1, provider: 'cpu' };
      },
    };
    const first = await runDeviceBench(options(cacheDir, { blockProbe: probe }));
    expect(first.block?.key).toBe('shape-a/cpu');
    expect(first.fleet_device.block_ms).toBe(first.block?.block_ms);
    const second = await runDeviceBench(options(cacheDir, { blockProbe: probe }));
    expect(second.cached).toBe(true);
    expect(second.block).toEqual(first.block);
    expect(runs).toBe(1);
  });
});

describe('device bench JSON', () => {
  const host = {
    platform: 'linux' as const,
    arch: 'x64',
    osRelease: '6.1',
    hostname: 'alice',
    cpu: { model: 'AMD Ryzen 9 7950X', cores: 32, physicalCores: 16 },
    memory: { totalBytes: 64 * 2 ** 30, availableBytes: 50 * 2 ** 30 },
    gpus: [{ name: 'NVIDIA GeForce RTX 4090', vendor: 'NVIDIA', vramTotalBytes: 24 * 2 ** 30, vramFreeBytes: 22 * 2 ** 30, source: 'nvidia-smi' as const }],
  };
  const measurements = (providers: Array<{ provider: string; gbps: number; bytes: number; samples_gbps: number[] }>) => ({
    version: 2 as const,
    fingerprint: 'f',
    measured_at: '2026-01-01T00:00:00.000Z',
    execution_providers: [],
    bandwidth: { host_gbps: 60, method: 'native-read' as const, fallback_reason: null, threads: 32, bytes_per_thread: 2 ** 27, rounds: 5, samples_gbps: [60], providers },
    blocks: {},
  });

  it('offers the free VRAM and the bandwidth through the GPU provider when a GPU provider works', () => {
    const json = benchJson(host, measurements([{ provider: 'cuda', gbps: 900, bytes: 2 ** 28, samples_gbps: [900] }]), false, null);
    expect(json.fleet_device).toEqual({ name: 'alice', memory_bytes: 22 * 2 ** 30, bandwidth_gbps: 900, block_ms: null });
  });

  it('offers the available RAM and the host bandwidth when only the CPU provider works', () => {
    const json = benchJson(host, measurements([]), true, null);
    expect(json.cached).toBe(true);
    expect(json.fleet_device).toEqual({ name: 'alice', memory_bytes: 50 * 2 ** 30, bandwidth_gbps: 60, block_ms: null });
  });
});
