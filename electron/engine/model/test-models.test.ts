import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startRangeServer } from '../test-support/range-server.js';
import { testModelPath } from './test-models.js';
import { TEST_MODEL_CATALOG } from './test-model-catalog.js';

describe('testModelPath', () => {
  let cacheDir: string;
  beforeEach(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'kiwi-test-models-'));
  });
  afterEach(async () => {
    await rm(cacheDir, { recursive: true, force: true });
  });

  it('finds stories260K.gguf through KIWI_TEST_MODELS', async () => {
    const path = await testModelPath('stories260K.gguf');
    expect((await readFile(path)).subarray(0, 4).toString('latin1')).toBe('GGUF');
  });

  it('downloads a missing file once from its source into the cache, verified by its pinned sha256', async () => {
    const real = await readFile(await testModelPath('vocab/ggml-vocab-gpt-2.gguf.inp'));
    const server = await startRangeServer({ body: real });
    try {
      const source = TEST_MODEL_CATALOG['vocab/ggml-vocab-gpt-2.gguf.inp']?.url ?? '';
      const toLocal: typeof fetch = (input, init) => fetch(`${server.url}/file?from=${encodeURIComponent(String(input) === source ? 'ok' : 'bad')}`, init);
      const env = { KIWI_CACHE_DIR: cacheDir };
      const path = await testModelPath('vocab/ggml-vocab-gpt-2.gguf.inp', env, toLocal);
      expect(path).toBe(join(cacheDir, 'test-models', 'vocab/ggml-vocab-gpt-2.gguf.inp'));
      expect(server.requests[0]?.path).toBe('/file?from=ok');
      expect((await readFile(path)).equals(real)).toBe(true);
    } finally {
      await server.close();
    }
  });

  it('fails with a message saying how to get a file it cannot find or download', async () => {
    const offline: typeof fetch = () => Promise.reject(new Error('network is unreachable'));
    const env = { KIWI_CACHE_DIR: cacheDir, KIWI_TEST_MODELS: join(cacheDir, 'empty') };
    await expect(testModelPath('stories260K.gguf', env, offline)).rejects.toThrow(/Point KIWI_TEST_MODELS at a folder that has it.*huggingface\.co/s);
  });
});
