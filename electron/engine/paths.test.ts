// The embedded default model is found from the source tree, the build (dist/) and the packaged
// app's layout (resources/app.asar/dist/... with the model in resources/models/), and nowhere else.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_MODEL_FILE, defaultModelPath } from './paths.js';

const root = resolve(import.meta.dirname, '../..');
const cleanups: string[] = [];
afterEach(async () => {
  for (const d of cleanups.splice(0)) await rm(d, { recursive: true, force: true });
});

describe('defaultModelPath', () => {
  it('finds models/stories260K.gguf at the package root from the source and from dist/', () => {
    const model = join(root, 'models', DEFAULT_MODEL_FILE);
    expect(defaultModelPath()).toBe(model);
    expect(defaultModelPath(join(root, 'dist', 'electron', 'engine'))).toBe(model);
  });

  it('finds it beside app.asar in a packaged app, and is undefined where there is none', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kiwi-paths-'));
    cleanups.push(dir);
    const resources = join(dir, 'Kiwi', 'resources');
    await mkdir(join(resources, 'models'), { recursive: true });
    await writeFile(join(resources, 'models', DEFAULT_MODEL_FILE), 'x');
    expect(defaultModelPath(join(resources, 'app.asar', 'dist', 'electron', 'engine'))).toBe(join(resources, 'models', DEFAULT_MODEL_FILE));
    expect(defaultModelPath(join(dir, 'elsewhere', 'a', 'b'))).toBeUndefined();
  });
});
