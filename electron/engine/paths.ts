// Where Kiwi keeps files that can be rebuilt or re-downloaded (models, shard cache, benchmarks).
// One function so every module agrees; $KIWI_CACHE_DIR overrides it (tests, portable installs).
import { homedir } from 'node:os';
import { join } from 'node:path';

export function kiwiCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.KIWI_CACHE_DIR) return env.KIWI_CACHE_DIR;
  if (process.platform === 'win32' && env.LOCALAPPDATA) return join(env.LOCALAPPDATA, 'kiwi', 'cache');
  if (process.platform === 'darwin') return join(homedir(), 'Library', 'Caches', 'kiwi');
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'kiwi');
}
