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

  test('names the draft model as the drafter; a draft model that cannot be opened fails the load, with its reason', async () => {
    const path = await testModelPath('stories260K.gguf');
    const backend = await LocalBackend.open(path, { speculative: { kind: 'auto' }, draftModel: path, maxPositions: 128, threads: 1 });
    try {
      expect(backend.health().speculative).toMatchObject({ mode: 'auto', drafter: 'draft-model' });
    } finally {
      await backend.close();
    }
    const broken = new LocalBackend(path, { speculative: { kind: 'auto' }, draftModel: `${path}.missing`, maxPositions: 128, threads: 1 });
    await expect(broken.load()).rejects.toMatchObject({ code: 'FILE_NOT_FOUND', message: expect.stringMatching(/^--draft-model .*\.missing: /) });
    expect(broken.status()).toBe('unavailable');
  });
});
