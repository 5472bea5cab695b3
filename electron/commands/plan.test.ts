import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGguf } from '../engine/model/gguf/gguf-reader.js';
import { summarizeModel } from '../engine/model/model-summary.js';
import { testModelPath } from '../engine/model/test-models.js';
import { modelSizesFromSummary } from './plan.js';
import { runKiwi as run } from './test-support/run-kiwi.js';

const model = {
  name: 'qwen3-32b-q4_k_m',
  layers: 64,
  block_bytes: 292000000,
  head_bytes: 640000000,
  head_resident_bytes: 1070000000,
  kv_bytes_per_token_per_layer: 4096,
};

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kiwi-plan-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function fleetFile(name: string, value: unknown): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, typeof value === 'string' ? value : JSON.stringify(value));
  return path;
}

describe('kiwi plan', () => {
  it('prints one JSON plan whose stages cover every layer', async () => {
    const path = await fleetFile('ok.json', {
      model,
      context: 4096,
      concurrency: 4,
      devices: [
        { name: 'alice-4090', memory_bytes: 23e9, bandwidth_gbps: 1008, nat: 'permissive', rendezvous_rtt_ms: 12 },
        { name: 'bob-m2', memory_bytes: 20e9, bandwidth_gbps: 100, nat: 'restrictive', rendezvous_rtt_ms: 30 },
      ],
      rtt_ms: [['alice-4090', 'bob-m2', 2.5]],
    });
    const { code, stdout } = await run(['plan', '--fleet', path, '--json']);
    expect(code).toBe(0);
    const lines = stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const plan = JSON.parse(lines[0] as string);
    expect(plan.tier).toBe('bandwidth');
    expect(plan.stages[0].start).toBe(0);
    expect(plan.stages.at(-1).end).toBe(64);
    expect(plan.baselines.uniform.fits).toBeTypeOf('boolean');
  });

  it('prints a readable table without --json', async () => {
    const path = await fleetFile('table.json', { model, context: 1024, devices: [{ name: 'solo', memory_bytes: 40e9, bandwidth_gbps: 50 }] });
    const { code, stdout } = await run(['plan', '--fleet', path]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/solo\s+\[0, 64\)/);
    expect(stdout).toMatch(/bottleneck/);
  });

  it('keeps what devices hold (holds in the fleet file) and prints what each must fetch', async () => {
    const path = await fleetFile('holds.json', {
      model: { ...model, layers: 32, head_bytes: 2 * model.block_bytes },
      context: 1024,
      devices: [
        { name: 'host', memory_bytes: 100e9, block_ms: 1, holds: [[0, 9]] },
        { name: 'm1', memory_bytes: 100e9, block_ms: 0.56, holds: [[9, 21]] },
      ],
    });
    const json = await run(['plan', '--fleet', path, '--json']);
    expect(json.code).toBe(0);
    const plan = JSON.parse(json.stdout);
    expect(plan.stages.map((s: { start: number; end: number; fetch_bytes: number }) => [s.start, s.end, s.fetch_bytes])).toEqual([[0, 9, 0], [9, 32, 11 * model.block_bytes]]);
    const table = await run(['plan', '--fleet', path]);
    expect(table.stdout).toMatch(/m1\s+\[9, 32\).*fetch 2\.99 GiB/);
  });

  it('exits non-zero with the error JSON when the fleet cannot hold the model', async () => {
    const path = await fleetFile('short.json', {
      model,
      context: 4096,
      concurrency: 4,
      devices: [
        { name: 'alice-4090', memory_bytes: 10e9, bandwidth_gbps: 1008 },
        { name: 'carol-laptop', memory_bytes: 8e9, bandwidth_gbps: 60 },
      ],
    });
    const { code, stdout, stderr } = await run(['plan', '--fleet', path, '--json']);
    expect(code).toBe(1);
    const { error } = JSON.parse(stdout) as { error: Record<string, unknown> };
    expect(error.code).toBe('PLAN_INSUFFICIENT_MEMORY');
    expect(['alice-4090', 'carol-laptop']).toContain(error.device);
    expect(error.short_by_bytes).toBeGreaterThan(0);
    expect(error.message).toMatch(/short by/);
    expect(stderr).toMatch(/short by/);
  });

  it('refuses a file that is not JSON, or not a fleet, with FLEET_INVALID', async () => {
    const notJson = await run(['plan', '--fleet', await fleetFile('bad.json', '{"model":'), '--json']);
    expect(notJson.code).toBe(1);
    expect(JSON.parse(notJson.stdout).error.code).toBe('FLEET_INVALID');
    const notFleet = await run(['plan', '--fleet', await fleetFile('bad2.json', { model, devices: [] }), '--json']);
    expect(JSON.parse(notFleet.stdout).error.code).toBe('FLEET_INVALID');
  });

  it('says which file is missing', async () => {
    const { code, stdout } = await run(['plan', '--fleet', join(dir, 'nope.json'), '--json']);
    expect(code).toBe(1);
    expect(JSON.parse(stdout).error.code).toBe('FILE_NOT_FOUND');
  });

  it('requires --fleet', async () => {
    const { code, stderr } = await run(['plan']);
    expect(code).toBe(2);
    expect(stderr).toMatch(/--fleet/);
  });

  it('reads the sizes of a GGUF model named in the fleet file', async () => {
    const gguf = await testModelPath('stories260K.gguf');
    const path = await fleetFile('gguf.json', {
      model: { gguf },
      context: 256,
      concurrency: 2,
      devices: [
        { name: 'a', memory_bytes: 10e6, bandwidth_gbps: 20 },
        { name: 'b', memory_bytes: 10e6, bandwidth_gbps: 10 },
      ],
    });
    const { code, stdout } = await run(['plan', '--fleet', path, '--json']);
    expect(code).toBe(0);
    const plan = JSON.parse(stdout);
    const summary = summarizeModel(await openGguf(gguf));
    expect(plan.stages.at(-1).end).toBe(summary.block_count);
  });

  it('derives block, head and KV sizes from the model summary of stories260K', async () => {
    const summary = summarizeModel(await openGguf(await testModelPath('stories260K.gguf')));
    const sizes = modelSizesFromSummary(summary);
    expect(sizes.layers).toBe(summary.block_count);
    expect(sizes.blockBytes).toBe(summary.bytes_per_block.max);
    // stories260K has its own output projection: the head reads it and keeps it beside the embedding.
    expect(summary.tied_embeddings).toBe(false);
    const { embedding, output, output_norm } = summary.head_bytes;
    expect(sizes.headBytes).toBe(output + output_norm);
    expect(sizes.headResidentBytes).toBe(embedding + output + output_norm);
    // With tied embeddings the head reads the embedding matrix as its projection and keeps it once.
    const tied = modelSizesFromSummary({ ...summary, tied_embeddings: true, head_bytes: { embedding, output: 0, output_norm, total: embedding + output_norm } });
    expect(tied.headBytes).toBe(embedding + output_norm);
    expect(tied.headResidentBytes).toBe(embedding + output_norm);
    expect(sizes.kvBytesPerTokenPerLayer).toBe(2 * summary.head_count_kv * summary.head_dim * 4); // f32 K/V
  });
});
