// Where Kiwi keeps files that can be rebuilt or re-downloaded (models, shard cache, benchmarks),
// and where the embedded default model is. One function each so every module agrees;
// $KIWI_CACHE_DIR overrides the cache (tests, portable installs).
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';

export function kiwiCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.KIWI_CACHE_DIR) return env.KIWI_CACHE_DIR;
  if (process.platform === 'win32' && env.LOCALAPPDATA) return join(env.LOCALAPPDATA, 'kiwi', 'cache');
  if (process.platform === 'darwin') return join(homedir(), 'Library', 'Caches', 'kiwi');
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'kiwi');
}

/** The model a fresh checkout (and the packaged app) serves without being given one: see models/README.md. */
export const DEFAULT_MODEL_FILE = 'stories260K.gguf';

/**
 * The embedded default model, found by walking up from this module to the folder that holds
 * `models/stories260K.gguf`: the package root when run from source (electron/engine/) or from the
 * build (dist/electron/engine/), and the app's resources folder when packaged (electron-builder
 * puts it under resources/models/, beside app.asar). Undefined when it is not there.
 */
export function defaultModelPath(from: string = import.meta.dirname): string | undefined {
  let dir = resolve(from);
  for (let up = 0; up < 6; up++) {
    const candidate = join(dir, 'models', DEFAULT_MODEL_FILE);
    if (existsSync(candidate)) return candidate;
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return undefined;
}
