import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../engine/model/test-models.js';
import { runKiwi as run } from './test-support/run-kiwi.js';

let dir = '';
let savedCacheDir: string | undefined;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-cmd-'));
  savedCacheDir = process.env.KIWI_CACHE_DIR;
  process.env.KIWI_CACHE_DIR = dir;
});
afterAll(async () => {
  if (savedCacheDir === undefined) delete process.env.KIWI_CACHE_DIR;
  else process.env.KIWI_CACHE_DIR = savedCacheDir;
  await rm(dir, { recursive: true, force: true });
});

describe('kiwi bench', () => {
  it('prints one JSON object on stdout and its progress on stderr, then reuses the cache', async () => {
    const first = await run(['bench', '--json']);
    expect(first.code).toBe(0);
    const lines = first.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const result = JSON.parse(lines[0] as string);
    expect(result.cached).toBe(false);
    expect(result.bandwidth.method).toBe('native-read');
    expect(result.bandwidth.host_gbps).toBeGreaterThan(0);
    expect(result.memory.total_bytes).toBeGreaterThan(0);
    expect(result.execution_providers.find((p: { name: string }) => p.name === 'cpu').works).toBe(true);
    expect(first.stderr).toMatch(/kiwi bench: measuring memory bandwidth/);
    expect(first.stderr).toMatch(/round 5\/5/);

    const second = await run(['bench', '--json']);
    const again = JSON.parse(second.stdout);
    expect(again.cached).toBe(true);
    expect(again.bandwidth).toEqual(result.bandwidth);
    expect(second.stderr).toMatch(/using the cached measurements/);
  });

  it('with --model times one decoder block of that shape, shows progress, and caches it per shape', async () => {
    const model = await testModelPath('stories260K.gguf');
    const first = await run(['bench', '--model', model, '--json']);
    expect(first.code).toBe(0);
    const result = JSON.parse(first.stdout);
    // stories260K: llama, 64 wide, 172 ffn, 8 heads (4 kv) of 8, f32 weights, an f32 head of 512 rows.
    // p4: block_ms is what one more block adds to a step, step_ms the step's fixed part (both timed warm), position_ms what a cached position adds, head_ms the head.
    expect(result.block).toMatchObject({ key: 'llama:e64:f172:h8/4x8:f32:o512f32:auto:p4', runs: 15, provider: 'cpu' });
    expect(result.block.block_ms).toBeGreaterThan(0);
    expect(result.block.step_ms).toBeGreaterThanOrEqual(0);
    expect(result.fleet_device.block_ms).toBe(result.block.block_ms);
    expect(result.fleet_device.step_ms).toBe(result.block.step_ms);
    expect(result.block.position_ms).toBeGreaterThanOrEqual(0);
    expect(result.fleet_device.position_ms).toBe(result.block.position_ms);
    expect(result.block.head_ms).toBeGreaterThanOrEqual(0);
    expect(result.fleet_device.head_ms).toBe(result.block.head_ms);
    expect(first.stderr).toMatch(/timing one decoder block of llama:e64/);
    expect(first.stderr).toMatch(/block run 15\/15/);

    const second = await run(['bench', '--model', model, '--json']);
    expect(JSON.parse(second.stdout).block).toEqual(result.block);
    expect(second.stderr).not.toMatch(/block run/);
  });

  it('prints a readable summary without --json', async () => {
    const { code, stdout } = await run(['bench']);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^bandwidth\s+[\d.]+ GB\/s host \(native-read/m);
  });

  it('refuses an unknown bandwidth method', async () => {
    const { code, stderr } = await run(['bench', '--bandwidth', 'magic']);
    expect(code).toBe(2);
    expect(stderr).toMatch(/auto, native or js/);
  });
});
