import { describe, expect, it } from 'vitest';
import { probeExecutionProviders } from './execution-providers.js';

describe('execution provider probe', () => {
  it('finds that the CPU provider runs a session here', async () => {
    const providers = await probeExecutionProviders();
    expect(providers.find((p) => p.name === 'cpu')).toEqual({ name: 'cpu', bundled: true, works: true, error: null });
  });

  it('gives a reason for every listed provider that does not work', async () => {
    for (const p of await probeExecutionProviders()) {
      if (p.works) expect(p.error).toBeNull();
      else expect(p.error?.length).toBeGreaterThan(0);
    }
  });
});
