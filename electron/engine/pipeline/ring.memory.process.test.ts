// Memory the planner admits, measured on real processes (Linux /proc): a default `kiwi host` and two
// default `kiwi join`s on loopback (each runs its device bench and sends it) plan at a timed tier, not
// the memory-proportional `memory` one; each process's anonymous resident memory, once serving, stays
// within the stage memory the plan admitted for it; a member joined with --memory-mb is planned and
// stays within that budget, with the prompt cache full: every process keeps its layers' part of
// each cached prompt, and the plan admits that share per block.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { isolatedCacheDir, kiwiEntry, ProcessSet, repoRoot, type Proc, waitEvent } from '../test-support/processes.js';

const run = promisify(execFile);
const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-ring-memory-');
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

async function rssAnonBytes(p: Proc): Promise<number> {
  const status = await readFile(`/proc/${p.child.pid}/status`, 'utf8');
  return Number(/^RssAnon:\s+(\d+) kB/m.exec(status)![1]) * 1024;
}

interface PlanStage {
  device: string;
  start: number;
  end: number;
  memory_bytes: number;
}

/** bob's whole process: its runtime (with a replay's scratch, 128 MiB: runtime/memory-model.ts replayScratchBytes) and a layer or two. */
const BUDGET_MIB = 480;
/** The host's prompt cache: 2048 positions over the ring's 8 layers, 8 MiB per layer on every stage. */
const CACHE_MIB = Number(process.env.KIWI_TEST_CACHE_MIB ?? 64);
/**
 * Distinct prompts of 48 tokens (ids of the synthetic vocabulary): 42 fill the cache, the rest
 * evict. The scratch of their prefills is planned too (runtime/memory-model.ts scratchBytes: what
 * the arena keeps of a prefill chunk's activations).
 */
const PROMPTS = 48;
const PROMPT_TOKENS = 48;

describe.runIf(process.platform === 'linux')('admitted memory (real processes on loopback)', () => {
  it('plans a default session from measurements and keeps every process within the memory the plan admitted', async () => {
    // 8 blocks of ~60M weights each: the layers, not the runtime's baseline, are most of each process.
    const model = join(tempDir(), 'mem8.gguf');
    const shape = { name: 'mem8', architecture: 'llama', blockCount: 8, embeddingLength: 2048, headCount: 16, headCountKv: 4, feedForwardLength: 8192, vocabSize: 4096, contextLength: 512 };
    await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', JSON.stringify(shape), '--quant', 'q4_0', '--out', model, '--seed', '3'], { cwd: repoRoot });

    const rv = procs.kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
    const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
    const host = procs.kiwiMeasured('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2', '--context', '256', '--parallel', '1', '--prompt-cache-mb', String(CACHE_MIB),
      // A drift re-plan (a loaded machine) would start a new epoch with an empty prompt cache: this test fills it.
      '--replan-drift', 'off', '--json');
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code', 60_000)).code as string;
    // Both members have their own copy: this test is about memory, not transfer time.
    const ada = procs.kiwiMeasured('join', code, '--rendezvous', rendezvous, '--name', 'ada', '--model', model, '--json');
    const bob = procs.kiwiMeasured('join', code, '--rendezvous', rendezvous, '--name', 'bob', '--model', model, '--memory-mb', String(BUDGET_MIB), '--json');
    const serving = await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 170_000);

    // Default flows measured their device (a progress line while the bench ran, cached afterwards).
    const plan = host.events.find((e) => e.event === 'plan') as { tier: string; stages: PlanStage[] };
    expect(['measured', 'bandwidth']).toContain(plan.tier);
    expect(host.events.some((e) => e.event === 'bench-progress')).toBe(true);
    expect(plan.stages.map((s) => s.device).sort()).toEqual(['ada', 'bob', 'host']);
    const bobStage = plan.stages.find((s) => s.device === 'bob')!;
    expect(bobStage.memory_bytes).toBeLessThanOrEqual(BUDGET_MIB * 2 ** 20);

    const client = new OpenAI({ baseURL: serving.url as string, apiKey: 'unused' });
    const got = await client.completions.create({ model: 'mem8', prompt: 'a b c d', max_tokens: 16, temperature: 0 });
    expect(got.usage?.completion_tokens).toBe(16);

    if (process.env.KIWI_TEST_TRACE === '1') console.log(`before: ${JSON.stringify(Object.fromEntries(await Promise.all([['host', host], ['ada', ada], ['bob', bob]].map(async ([n, p]) => [n, Math.round((await rssAnonBytes(p as Proc)) / 2 ** 20)]))))}`);
    // Fill every stage's copies of the prompt cache: distinct long prompts, each kept when it ends.
    const measured: Record<string, number> = {};
    const measure = async (): Promise<void> => {
      for (const [name, p] of [['host', host], ['ada', ada], ['bob', bob]] as const) measured[name] = Math.max(measured[name] ?? 0, await rssAnonBytes(p));
    };
    for (let i = 0; i < PROMPTS; i++) {
      const prompt = Array.from({ length: PROMPT_TOKENS }, (_, j) => 100 + ((i * 977 + j * 31) % 3900));
      const r = await client.completions.create({ model: 'mem8', prompt, max_tokens: 4, temperature: 0 });
      expect(r.usage?.prompt_tokens).toBe(PROMPT_TOKENS);
      await measure();
      if (process.env.KIWI_TEST_TRACE === '1') console.log(`after prompt ${i}: ${JSON.stringify(Object.fromEntries(await Promise.all([['host', host], ['ada', ada], ['bob', bob]].map(async ([n, p]) => [n, Math.round((await rssAnonBytes(p as Proc)) / 2 ** 20)]))))}`);
    }
    const health = (await (await fetch(`${new URL(serving.url as string).origin}/health`)).json()) as { prompt_cache?: { entries: number; bytes: number; max_bytes: number; evictions: number } };
    const pc = health.prompt_cache!;
    expect(pc.evictions, JSON.stringify(pc)).toBeGreaterThan(0);
    expect(pc.bytes, JSON.stringify(pc)).toBeGreaterThan(pc.max_bytes * 0.75);
    const report = plan.stages.map((s) => `${s.device} ${s.start}-${s.end}: RssAnon ${(measured[s.device]! / 2 ** 20).toFixed(0)} MiB, admitted ${(s.memory_bytes / 2 ** 20).toFixed(0)} MiB`);
    for (const s of plan.stages) expect(measured[s.device], report.join('; ')).toBeLessThanOrEqual(s.memory_bytes);
    expect(measured.bob, report.join('; ')).toBeLessThanOrEqual(BUDGET_MIB * 2 ** 20);
    console.log(`admitted vs measured (prompt cache ${(pc.bytes / 2 ** 20).toFixed(1)} of ${CACHE_MIB} MiB, ${pc.entries} entries): ${report.join('; ')}`);
  }, 400_000);
});
