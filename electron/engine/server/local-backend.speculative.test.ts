// GET /health of `kiwi serve` shows speculative decoding (runtime/speculative.ts) when it is on.
import { describe, expect, test } from 'vitest';
import { testModelPath } from '../model/test-models.js';
import { LocalBackend } from './local-backend.js';

describe('GET /health', () => {
  test('shows speculation (mode and acceptance) when it is on, nothing when it is off', async () => {
    const path = await testModelPath('stories260K.gguf');
    for (const speculative of [{ kind: 'fixed', k: 3 }, { kind: 'off' }] as const) {
      const backend = await LocalBackend.open(path, { speculative, maxPositions: 128, threads: 1 });
      try {
        const health = backend.health();
        if (speculative.kind === 'off') expect(health.speculative).toBeUndefined();
        else expect(health.speculative).toMatchObject({ mode: 3, drafter: 'prompt-lookup', verify_steps: 0, drafted: 0, accepted: 0, acceptance: null });
      } finally {
        await backend.close();
      }
    }
  });
});
