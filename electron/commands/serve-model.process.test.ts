// Where `kiwi serve` gets its model, as a real process: with no --model it serves the embedded
// stories260K (models/ in the package, found from wherever it is started), and with --model URL
// it downloads the file into the cache (with progress and a checked sha256) and serves it; a
// wrong sha256 ends it with CHECKSUM_MISMATCH before anything is served.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { defaultModelPath } from '../engine/paths.js';
import { isolatedCacheDir, kiwiEntry, ProcessSet, repoRoot, waitEvent } from '../engine/test-support/processes.js';
import { startRangeServer } from '../engine/test-support/range-server.js';

const procs = new ProcessSet();
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());
const scratch = isolatedCacheDir('kiwi-serve-model-');

async function complete(url: string): Promise<string> {
  const res = await fetch(`${url}/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 24, temperature: 0 }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { choices: Array<{ text: string }> }).choices[0]!.text;
}

describe('kiwi serve: where the model comes from', () => {
  it('serves the embedded stories260K without --model, started from any folder', async () => {
    // `env -C`: started from a folder that is not the package, so nothing resolves from the cwd.
    // tsx by its path: `--import tsx` would resolve from the cwd.
    const fromAnywhere = ['--import', pathToFileURL(join(repoRoot, 'node_modules/tsx/dist/loader.mjs')).href, join(repoRoot, 'electron/kiwi.ts')];
    const p = procs.spawn('env', ['-C', scratch(), process.execPath, ...fromAnywhere, 'serve', '--port', '0', '--threads', '1', '--no-shard-cache', '--json']);
    const serving = await waitEvent(p, (e) => e.event === 'serving', 'the serving event', 60_000);
    expect(p.events.find((e) => e.event === 'model')).toMatchObject({ path: defaultModelPath(), embedded: true });
    expect(serving.model).toBe('stories260K');
    const text = await complete(serving.url as string);
    expect(text.trim().length).toBeGreaterThan(0);
  });

  it('downloads --model URL into the cache with progress, checks --model-sha256, and serves it', async () => {
    const data = await readFile(defaultModelPath()!);
    const sha256 = createHash('sha256').update(data).digest('hex');
    const server = await startRangeServer({ body: data });
    try {
      const url = `${server.url}/org/tiny/resolve/main/tiny%20story.gguf`;
      const wrong = procs.spawn(process.execPath, [...kiwiEntry(), 'serve', '--model', url, '--model-sha256', 'ab'.repeat(32), '--port', '0', '--json']);
      expect(await wrong.exited).not.toBe(0);
      expect(wrong.events.find((e) => e.event === 'error' || 'error' in e)).toMatchObject({ error: { code: 'CHECKSUM_MISMATCH' } });

      const p = procs.spawn(process.execPath, [...kiwiEntry(), 'serve', '--model', url, '--model-sha256', sha256, '--port', '0', '--threads', '1', '--no-shard-cache', '--json']);
      const serving = await waitEvent(p, (e) => e.event === 'serving', 'the serving event', 60_000);
      expect(serving.model).toBe('tiny_story');
      const model = p.events.find((e) => e.event === 'model');
      expect(model).toMatchObject({ url, bytes: data.length, downloaded: true });
      expect(model?.path).toBe(join(scratch(), 'cache', 'models', createHash('sha256').update(url).digest('hex').slice(0, 16), 'tiny_story.gguf'));
      expect(p.events.filter((e) => e.event === 'download-progress').at(-1)).toMatchObject({ received_bytes: data.length, total_bytes: data.length, final: true });
      expect((await complete(serving.url as string)).trim().length).toBeGreaterThan(0);
    } finally {
      await server.close();
    }
  });
});
