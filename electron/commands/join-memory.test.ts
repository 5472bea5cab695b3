import { describe, expect, it } from 'vitest';
import { runKiwi } from './test-support/run-kiwi.js';

describe('kiwi join --memory-mb', () => {
  it('refuses a budget below the runtime baseline, with the figure it needs, before measuring or contacting anyone', async () => {
    const r = await runKiwi(['join', '7-apple-banana-cherry', '--rendezvous', 'ws://127.0.0.1:9', '--memory-mb', '100', '--json']);
    expect(r.code).not.toBe(0);
    expect(r.stdout + r.stderr).toMatch(/--memory-mb 100 cannot hold a member: its runtime alone needs 192 MiB/);
  });

  it('documents the budget, how it differs from --keep-free-mb, and --no-bench', async () => {
    const help = await runKiwi(['join', '--help']);
    expect(help.stdout).toMatch(/--memory-mb MB .*runtime's own included/);
    expect(help.stdout).toMatch(/--keep-free-mb instead watches/);
    expect(help.stdout).toMatch(/--no-bench/);
  });
});
