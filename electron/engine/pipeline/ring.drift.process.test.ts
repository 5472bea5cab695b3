// Closed-loop planning with real processes on loopback (issue 14): `kiwi host` + two `kiwi join`,
// one of which (bob) over-reports its speed 20x in --capabilities, so the first plan gives it most
// layers. A long greedy stream runs; bob's measured stage time stays far off its prediction, so
// the host re-plans at a safe point with the measured block times (a `replanned` event, reason
// `drift`, naming bob's stage with predicted and measured ms), the new plan gives bob fewer
// layers, and the stream's text is exactly `kiwi generate`'s. Every device reports the fixed part of
// a step and what a cached position adds that this machine's block probe measured (`kiwi bench
// --model`: step_ms, position_ms), so the re-plan keeps the fixed part and prices only the rest per
// layer, and steps are judged at their position (a 320-token stream's last steps cost well over its
// first): that re-plan lands (with at most one refinement when a loaded machine skewed a window or
// the probe), then two whole streams in a row pass without a re-plan (a division priced from
// measurements is kept while it stays within the drift threshold of the best). The file runs
// alone (vitest.config.ts).
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { askStatus, isolatedCacheDir, kiwiEntry, ProcessSet, repoRoot, type Proc, waitEvent } from '../test-support/processes.js';
import { DEFAULT_DRIFT_OPTIONS, detectionStep } from './stage-drift.js';

const run = promisify(execFile);
const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-ring-drift-');
let shown: Proc[] = [];
afterEach((ctx) => {
  if (ctx.task.result?.state === 'fail') for (const p of shown) console.error(`${p.events.map((e) => JSON.stringify(e)).join('\n')}\n${p.stderr.join('\n').slice(-3000)}`);
  shown = [];
  procs.killAll();
});
afterAll(() => procs.dispose());

async function kiwiJson(...args: string[]): Promise<Record<string, unknown>> {
  const { stdout } = await run(process.execPath, [...kiwiEntry(), ...args, '--json'], { cwd: repoRoot, maxBuffer: 1 << 24 });
  return JSON.parse(stdout.trim().split('\n').pop() as string) as Record<string, unknown>;
}

/** A greedy streamed completion of `promptIds`; its text. */
async function stream(url: string, promptIds: number[], maxTokens: number): Promise<string> {
  const client = new OpenAI({ baseURL: url, apiKey: 'unused', maxRetries: 0 });
  const s = await client.completions.create({ model: 'drift', prompt: promptIds, max_tokens: maxTokens, temperature: 0, stream: true });
  let text = '';
  for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
  return text;
}

type PlanEvent = { stages: Array<{ device: string; start: number; end: number; stage_ms: number | null }>; tier: string };
const layersOf = (plan: PlanEvent, name: string): number => plan.stages.filter((s) => s.device === name).reduce((n, s) => n + s.end - s.start, 0);

describe('re-planning from measured stage times (real processes on loopback)', () => {
  it('re-plans when a member over-reported its speed, gives it fewer layers, keeps the streams exact, and then holds still', async () => {
    const dir = tempDir();
    const model = join(dir, 'drift.gguf');
    // Blocks large enough that a stage's time grows with its layers (not the runtime's per-call overhead).
    const shape = { name: 'drift', architecture: 'llama', blockCount: 8, embeddingLength: 512, headCount: 8, headCountKv: 8, feedForwardLength: 1536, vocabSize: 320, contextLength: 512 };
    await kiwiJson('synth', '--shape', JSON.stringify(shape), '--quant', 'q8_0', '--out', model, '--seed', '7');
    // The fixed part of a step on this machine, as the block probe measures it (the one figure taken from the device).
    const probe = await kiwiJson('bench', '--model', model);
    const { step_ms: stepMs, position_ms: positionMs } = probe.block as { step_ms: number; position_ms: number };
    expect(stepMs).toBeGreaterThanOrEqual(0);
    expect(positionMs).toBeGreaterThanOrEqual(0);
    const caps = async (name: string, blockMs: number): Promise<string> => {
      const file = join(dir, `capabilities-${name}.json`);
      await writeFile(file, JSON.stringify({ fleet_device: { memory_bytes: 4 * 1024 ** 3, block_ms: blockMs, step_ms: stepMs, position_ms: positionMs } }));
      return file;
    };
    // Fixed block figures: the host and ada say 1 ms a block, bob 20x faster.
    const rv = procs.kiwi('rendezvous', '--host', '127.0.0.1', '--port', '0', '--json');
    const rendezvous = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous')).url as string;
    const host = procs.kiwi('host', '--model', model, '--port', '0', '--rendezvous', rendezvous, '--auto-approve', '--expect', '2',
      // Plain decode steps only: speculative verify steps carry several tokens, which the detector does not judge.
      '--context', '512', '--speculative', 'off', '--replan-drift', '25', '--capabilities', await caps('host', 1), '--json');
    shown = [host];
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code', 60_000)).code as string;
    for (const [name, blockMs] of [['ada', 1], ['bob', 0.05]] as const) {
      shown.push(procs.kiwi('join', code, '--rendezvous', rendezvous, '--name', name, '--model', model, '--capabilities', await caps(name, blockMs), '--json'));
    }
    const url = (await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', 120_000)).url as string;
    const first = host.events.find((e) => e.event === 'plan') as unknown as PlanEvent;
    expect(first.tier).toBe('measured');
    const bobBefore = layersOf(first, 'bob');
    expect(bobBefore).toBeGreaterThan(shape.blockCount / 2);

    // A stream long enough for the detector (its cool-down and two windows) and the re-plan's rebuild.
    const maxTokens = 320;
    const reference = await kiwiJson('generate', '--model', model, '--prompt', 'a b c d', '--max-tokens', String(maxTokens));
    const promptIds = reference.prompt_ids as number[];
    expect((reference.ids as number[]).length).toBe(maxTokens);
    expect(maxTokens).toBeGreaterThan(2 * detectionStep(DEFAULT_DRIFT_OPTIONS));
    const text = await stream(url, promptIds, maxTokens);
    expect(text).toBe(reference.text);

    const replanned = await waitEvent(host, (e) => e.event === 'replanned', 'the drift re-plan', 60_000);
    expect(replanned).toMatchObject({ reason: 'drift', stage: 'bob', epoch: 1 });
    expect(replanned.measured_ms as number).toBeGreaterThan(1.25 * (replanned.predicted_ms as number));
    expect(replanned.steps as number).toBeGreaterThanOrEqual(detectionStep(DEFAULT_DRIFT_OPTIONS));
    const recovered = host.events.find((e) => e.event === 'recovered')!;
    expect(recovered.reason as string).toMatch(/^drift: bob's stage/);
    expect(host.events.filter((e) => e.event === 'error')).toEqual([]);
    const second = host.events.findLast((e) => e.event === 'plan') as unknown as PlanEvent;
    expect(layersOf(second, 'bob')).toBeLessThan(bobBefore);
    const blockMs = replanned.block_ms as Record<string, number>;
    expect(Object.keys(blockMs).sort()).toEqual(expect.arrayContaining(['bob']));

    // Figures for the report: predicted and measured per stage, before and after.
    const after = await askStatus(host);
    const timing = after.timing as { meanStageMs: Record<string, number> };
    console.log(JSON.stringify({
      before: first.stages.map((s) => ({ device: s.device, layers: `${s.start}-${s.end}`, predicted_ms: s.stage_ms })),
      replanned,
      after: second.stages.map((s) => ({ device: s.device, layers: `${s.start}-${s.end}`, predicted_ms: s.stage_ms, measured_ms: timing.meanStageMs[`${s.start}-${s.end}`] ?? null })),
    }));

    // The re-plan kept each device's fixed step part and priced the rest per layer, so a stage
    // given another layer count is predicted from its measured time. On a loaded machine one
    // window's figures (and the probe's) can still be off by more than the threshold, so one
    // refinement may follow; then the ring holds still: two whole streams in a row without a
    // re-plan, and at most one correction after the first (none oscillating).
    const recoveries = (): number => host.events.filter((e) => e.event === 'recovered').length;
    let quietStreams = 0;
    for (let i = 0; i < 4 && quietStreams < 2; i++) {
      const before = recoveries();
      expect(await stream(url, promptIds, maxTokens)).toBe(reference.text);
      quietStreams = recoveries() === before ? quietStreams + 1 : 0;
    }
    expect(quietStreams).toBe(2);
    const corrections = host.events.filter((e) => e.event === 'replanned');
    expect(corrections.length).toBeLessThanOrEqual(2);
    const drift = (await askStatus(host)).drift as { last: { name: string } | null; stages: unknown[] };
    expect(drift.last).not.toBeNull();
    console.log(JSON.stringify({ corrections: corrections.slice(1), settled: drift.stages }));
    expect(host.events.filter((e) => e.event === 'error')).toEqual([]);
  }, 300_000);
});
