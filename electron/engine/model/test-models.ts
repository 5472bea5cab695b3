// Finds the small public files the tests use (stories260K.gguf, llama.cpp's vocab test files):
// $KIWI_TEST_MODELS first, then Kiwi's cache, else a one-time download from the public source with
// the pinned sha256. A missing file is a loud failure that says how to get it, never a skip.
import { access } from 'node:fs/promises';
import { join } from 'node:path';
import { KiwiError } from '../errors.js';
import { kiwiCacheDir } from '../paths.js';
import { downloadFile } from './download.js';
import { TEST_MODEL_CATALOG } from './test-model-catalog.js';

const resolved = new Map<string, Promise<string>>();

/** `fetchImpl` is injectable so tests can stand in a local server for the public source. */
export function testModelPath(name: string, env: NodeJS.ProcessEnv = process.env, fetchImpl: typeof fetch = fetch): Promise<string> {
  const key = `${name}\0${env.KIWI_TEST_MODELS ?? ''}\0${env.KIWI_CACHE_DIR ?? ''}`;
  let found = resolved.get(key);
  if (found === undefined) {
    found = locate(name, env, fetchImpl);
    resolved.set(key, found);
    found.catch(() => resolved.delete(key));
  }
  return found;
}

export function testModelCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(kiwiCacheDir(env), 'test-models');
}

async function locate(name: string, env: NodeJS.ProcessEnv, fetchImpl: typeof fetch): Promise<string> {
  const entry = TEST_MODEL_CATALOG[name];
  if (entry === undefined) throw new Error(`test model '${name}' is not in test-model-catalog.ts`);

  if (env.KIWI_TEST_MODELS) {
    const candidate = join(env.KIWI_TEST_MODELS, name);
    if (await exists(candidate)) return candidate;
  }
  const cached = join(testModelCacheDir(env), name);
  if (await exists(cached)) return cached;

  try {
    return await downloadFile({ url: entry.url, dest: cached, sha256: entry.sha256, expectedBytes: entry.bytes, fetchImpl });
  } catch (err) {
    throw new KiwiError(
      'TEST_MODEL_MISSING',
      `test file '${name}' was not found${env.KIWI_TEST_MODELS ? ` in KIWI_TEST_MODELS=${env.KIWI_TEST_MODELS}` : ' (KIWI_TEST_MODELS is not set)'} ` +
        `nor in ${cached}, and downloading it failed (${(err as Error).message}). ` +
        `Point KIWI_TEST_MODELS at a folder that has it (e.g. ../shared/models), or download ${entry.url} to ${cached} (sha256 ${entry.sha256}).`,
      { name },
    );
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}
