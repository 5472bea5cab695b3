import { describe, expect, it } from 'vitest';
import { runKiwi } from './test-support/run-kiwi.js';

describe('kiwi join', () => {
  it('refuses advertised addresses that are not ws:// URLs, before contacting anyone', async () => {
    const r = await runKiwi(['join', '7-apple-banana-cherry', '--rendezvous', 'ws://127.0.0.1:9', '--advertise', 'http://example.org', '--json']);
    expect(r.code).not.toBe(0);
    expect(r.stdout + r.stderr).toMatch(/--advertise takes up to 8 comma-separated ws:\/\/ or wss:\/\/ URLs/);
  });

  it('documents the memory reserve and the advertised addresses', async () => {
    const help = await runKiwi(['join', '--help']);
    for (const flag of ['--keep-free-mb', '--advertise']) expect(help.stdout).toContain(flag);
  });
});
