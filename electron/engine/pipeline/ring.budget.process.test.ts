// A member whose --memory-mb fits the runtime but not one layer of the session's model (with its KV
// cache at the session's context) is refused at join, by a real host, with the figure it would
// need; the host warns, does not plan it, and serves with a member that has enough.
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { modelSizesFromGguf, RUNTIME_BASELINE_BYTES } from '../planner/model-sizes.js';
import { isolatedCacheDir, kiwiEntry, ProcessSet, repoRoot, waitEvent } from '../test-support/processes.js';
import { oneLayerNeed, promptCacheSizes } from './member-budget.js';

const run = promisify(execFile);
const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-ring-budget-');
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

const CONTEXT = 8192;
const MIB = 2 ** 20;

describe('kiwi join --memory-mb below one layer (real host on loopback)', () => {
  it('is refused at join with the figure it needs, while a member with enough is planned and the host serves', async () => {
    // 4 KV heads × 64 dims: 2 KiB of KV per position per layer, 16 MiB at 8192 positions, above a budget just over the runtime's.
    const dir = tempDir();
    const model = join(dir, 'budget.gguf');
    const shape = { name: 'budget', architecture: 'llama', blockCount: 2, embeddingLength: 256, headCount: 4, headCountKv: 4, feedForwardLength: 512, vocabSize: 320, contextLength: CONTEXT };
    await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', JSON.stringify(shape), '--quant', 'q8_0', '--out', model, '--seed', '5'], { cwd: repoRoot });
    // The host's default prompt cache (256 MiB): every block holds its share too.
    const sizes = promptCacheSizes(modelSizesFromGguf(await openGguf(model)), 256 * MIB);
    const need = oneLayerNeed(sizes, CONTEXT);
    const smallMib = RUNTIME_BASELINE_BYTES / MIB + 4;
    expect(need.neededMib).toBeGreaterThan(smallMib);

    // The host holds the head and one of the two blocks (with its KV), so a member must hold the other.
    const perBlock = (sizes.blockResidentBytes ?? sizes.blockBytes) + sizes.kvBytesPerTokenPerLayer * CONTEXT + (sizes.promptCacheBytesPerBlock ?? 0);
    const hostCaps = join(dir, 'capabilities-host.json');
    await writeFile(hostCaps, JSON.stringify({ fleet_device: { memory_bytes: Math.round(sizes.headResidentBytes + 1.5 * perBlock) } }));
    const rv = procs.kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
    const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
    const host = procs.kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '1',
      '--context', String(CONTEXT), '--parallel', '1', '--listen', '127.0.0.1', '--capabilities', hostCaps, '--json');
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code', 60_000)).code as string;

    const tiny = procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'tiny', '--listen', '127.0.0.1', '--memory-mb', String(smallMib), '--json');
    const refused = await waitEvent(tiny, (e) => e.event === 'error', 'the refusal', 30_000);
    expect(refused.code).toBe('MEMORY_BUDGET_TOO_SMALL');
    expect(refused.message).toContain(`needs at least ${need.neededMib} MiB per member (runtime ${need.runtimeMib} + one layer ${need.layerMib} + KV ${need.kvMib}`);
    expect(refused.message).toContain(`rerun with --memory-mb ${need.neededMib} or more`);
    expect(await tiny.exited).toBe(1);
    const warning = await waitEvent(host, (e) => e.event === 'warning' && e.code === 'MEMORY_BUDGET_TOO_SMALL', 'the host\'s warning');
    expect(warning.member).toBe('tiny');

    procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--listen', '127.0.0.1', '--memory-mb', '1024', '--json');
    const serving = await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 120_000);
    const plan = host.events.find((e) => e.event === 'plan') as { stages: Array<{ device: string; start: number; end: number }> };
    expect(plan.stages.map((s) => s.device).sort()).toEqual(['ada', 'host']);
    expect(host.events.some((e) => e.event === 'plan' && JSON.stringify(e).includes('"tiny"'))).toBe(false);

    const res = await fetch(`${serving.url as string}/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'budget', prompt: 'a b c', max_tokens: 4, temperature: 0 }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { usage: { completion_tokens: number } };
    expect(body.usage.completion_tokens).toBe(4);
  }, 240_000);
});
