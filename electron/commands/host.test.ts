import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../engine/errors.js';
import type { CommandContext } from './command.js';
import { evictionTimes, ringFlagOptions } from './host.js';
import { runKiwi } from './test-support/run-kiwi.js';
import { providerLibraryInstalled } from '../engine/ort/providers.js';
import { testModelPath } from '../engine/model/test-models.js';

const ctx = (values: Record<string, string>): CommandContext => ({
  values, positionals: [], stdout: new PassThrough(), stderr: new PassThrough(), signal: new AbortController().signal,
});

function usageError(f: () => unknown): string {
  try {
    f();
  } catch (err) {
    if (isKiwiError(err, 'USAGE')) return err.message;
    throw err;
  }
  throw new Error('expected a USAGE error');
}

describe('kiwi host flags', () => {
  it('--activations and --zstd become the wire policy, exact by default', () => {
    expect(ringFlagOptions(ctx({}))).toEqual({ wirePolicy: { activations: 'exact', zstd: 'off' } });
    expect(ringFlagOptions(ctx({ activations: 'auto' })).wirePolicy).toEqual({ activations: 'auto', zstd: 'auto' });
    expect(ringFlagOptions(ctx({ activations: 'int8', zstd: 'on' })).wirePolicy).toEqual({ activations: 'int8', zstd: 'on' });
    expect(usageError(() => ringFlagOptions(ctx({ activations: 'fp8' })))).toMatch(/--activations must be one of auto, exact, f32, f16, int8/);
    expect(usageError(() => ringFlagOptions(ctx({ zstd: 'true' })))).toMatch(/--zstd must be one of auto, on, off/);
  });

  it('--recovery-timeout is seconds, as recoveryTimeoutMs', () => {
    expect(ringFlagOptions(ctx({ 'recovery-timeout': '2.5' })).recoveryTimeoutMs).toBe(2500);
    expect(ringFlagOptions(ctx({ 'recovery-timeout': '0' })).recoveryTimeoutMs).toBe(0);
    for (const bad of ['-1', 'soon', '', '1e9']) {
      expect(usageError(() => ringFlagOptions(ctx({ 'recovery-timeout': bad })))).toMatch(/--recovery-timeout must be a number of seconds/);
    }
  });

  it('--replan-drift is off or the drift threshold in percent', () => {
    expect(ringFlagOptions(ctx({ 'replan-drift': 'off' })).drift).toBe(false);
    expect(ringFlagOptions(ctx({ 'replan-drift': '40' })).drift).toMatchObject({ threshold: 0.4 });
    expect(usageError(() => ringFlagOptions(ctx({ 'replan-drift': 'sometimes' })))).toMatch(/--replan-drift must be off or a percentage/);
  });

  it('--heartbeat-timeout sets the soft eviction; the hard one is 8 times it, at least 120 s', () => {
    expect(evictionTimes(ctx({}))).toEqual({ softEvictMs: 15_000, hardEvictMs: 120_000 });
    expect(evictionTimes(ctx({ 'heartbeat-timeout': '3' }))).toEqual({ softEvictMs: 3000, hardEvictMs: 120_000 });
    expect(evictionTimes(ctx({ 'heartbeat-timeout': '60' }))).toEqual({ softEvictMs: 60_000, hardEvictMs: 480_000 });
    expect(evictionTimes(ctx({ 'heartbeat-timeout': '1', 'hard-evict-ms': '5000' }))).toEqual({ softEvictMs: 1000, hardEvictMs: 5000 });
    // The ms flags still work as before.
    expect(evictionTimes(ctx({ 'soft-evict-ms': '800', 'hard-evict-ms': '2000' }))).toEqual({ softEvictMs: 800, hardEvictMs: 2000 });
  });

  it('refuses contradictory or nonsense timeouts', () => {
    expect(usageError(() => evictionTimes(ctx({ 'heartbeat-timeout': '5', 'soft-evict-ms': '800' })))).toMatch(/not both/);
    expect(usageError(() => evictionTimes(ctx({ 'heartbeat-timeout': '0' })))).toMatch(/--heartbeat-timeout must be a number of seconds/);
    expect(usageError(() => evictionTimes(ctx({ 'heartbeat-timeout': '10', 'hard-evict-ms': '5000' })))).toMatch(/must be longer than the heartbeat timeout/);
  });

  it('fails with USAGE before opening a session when a flag is wrong', async () => {
    const bad = await runKiwi(['host', '--activations', 'bf16', '--json']);
    expect(bad.code).not.toBe(0);
    expect(JSON.parse(bad.stdout.trim().split('\n')[0]!)).toMatchObject({ error: { code: 'USAGE' } });
    expect(bad.stdout).not.toContain('"session"');
    // --zstd takes a value now.
    const bare = await runKiwi(['host', '--zstd', '--relay-only', '--json']);
    expect(bare.code).not.toBe(0);
    expect(bare.stdout).toContain('USAGE');
  });

  it('refuses an unknown --provider before opening a session, with or without a model', async () => {
    const bad = await runKiwi(['host', '--provider', 'gpu', '--relay-only', '--json']);
    expect(bad.code).not.toBe(0);
    expect(JSON.parse(bad.stdout.trim().split('\n')[0]!)).toMatchObject({ error: { code: 'USAGE', message: expect.stringMatching(/--provider must be one of auto, cuda, dml, cpu/) } });
    expect(bad.stdout).not.toContain('"session"');
  });

  // This machine has no CUDA provider library (onnxruntime-node's install script did not run).
  it.runIf(process.platform === 'linux' && !providerLibraryInstalled('cuda'))('--provider cuda with a model fails with how to install it, before the code is shown', async () => {
    const model = await testModelPath('stories260K.gguf');
    const r = await runKiwi(['host', '--model', model, '--provider', 'cuda', '--relay-only', '--no-bench', '--json']);
    expect(r.code).not.toBe(0);
    expect(JSON.parse(r.stdout.trim().split('\n')[0]!)).toMatchObject({ error: { code: 'PROVIDER_UNAVAILABLE', message: expect.stringMatching(/libonnxruntime_providers_cuda\.so missing.*ONNXRUNTIME_NODE_INSTALL=cuda12/) } });
    expect(r.stdout).not.toContain('"session"');
  });

  it('documents the new flags in --help', async () => {
    const help = await runKiwi(['host', '--help']);
    for (const flag of ['--activations', '--zstd', '--heartbeat-timeout', '--recovery-timeout', '--provider']) expect(help.stdout).toContain(flag);
    expect(help.stdout).toMatch(/exact \(f32, the same tokens as one machine\), auto/);
  });
});
