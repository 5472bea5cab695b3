import { describe, expect, it } from 'vitest';
import { providerLibraryInstalled } from '../engine/ort/providers.js';
import { runKiwi } from './test-support/run-kiwi.js';

describe('kiwi join', () => {
  it('refuses advertised addresses that are not ws:// URLs, before contacting anyone', async () => {
    const r = await runKiwi(['join', '7-apple-banana-cherry', '--rendezvous', 'ws://127.0.0.1:9', '--advertise', 'http://example.org', '--json']);
    expect(r.code).not.toBe(0);
    expect(r.stdout + r.stderr).toMatch(/--advertise takes up to 8 comma-separated ws:\/\/ or wss:\/\/ URLs/);
  });

  // This machine has no CUDA provider library (onnxruntime-node's install script did not run).
  it.runIf(process.platform === 'linux' && !providerLibraryInstalled('cuda'))('--provider auto runs on the cpu here and prints why, before connecting', async () => {
    const r = await runKiwi(['join', '7-apple-banana-cherry', '--rendezvous', 'ws://127.0.0.1:9', '--no-bench', '--json']);
    const events = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(events[0]).toEqual({
      event: 'provider', provider: 'cpu', requested: 'auto',
      fallbacks: ['cuda: provider library not installed (libonnxruntime_providers_cuda.so missing); using cpu'],
    });
    // Then it goes on to the rendezvous (here: nobody listens).
    expect(events.some((e) => e.event === 'error' && e.code === 'CONNECT_FAILED')).toBe(true);
  });

  it.runIf(process.platform === 'linux' && !providerLibraryInstalled('cuda'))('--provider cuda without its library fails with how to install it, before connecting', async () => {
    const r = await runKiwi(['join', '7-apple-banana-cherry', '--rendezvous', 'ws://127.0.0.1:9', '--provider', 'cuda', '--no-bench', '--json']);
    expect(r.code).not.toBe(0);
    expect(r.stdout + r.stderr).toMatch(/PROVIDER_UNAVAILABLE/);
    expect(r.stdout + r.stderr).toMatch(/ONNXRUNTIME_NODE_INSTALL=cuda12 node node_modules\/onnxruntime-node\/script\/install\.js/);
    expect(r.stdout + r.stderr).not.toMatch(/CONNECT_FAILED/);
  });

  it('refuses an unknown --provider', async () => {
    const r = await runKiwi(['join', '7-apple-banana-cherry', '--rendezvous', 'ws://127.0.0.1:9', '--provider', 'gpu', '--json']);
    expect(r.code).not.toBe(0);
    expect(r.stdout + r.stderr).toMatch(/--provider must be one of auto, cuda, dml, cpu, got 'gpu'/);
  });

  it('documents the memory reserve and the advertised addresses', async () => {
    const help = await runKiwi(['join', '--help']);
    for (const flag of ['--keep-free-mb', '--advertise', '--provider']) expect(help.stdout).toContain(flag);
  });
});
