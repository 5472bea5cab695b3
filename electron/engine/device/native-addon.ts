// Finds and loads Kiwi's native addons (native/binding.gyp: kiwi_membw.node, kiwi_exec.node).
// Loading fails softly: a missing or broken addon is reported with its reason so callers can fall
// back and say so, never silently.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface MembwAddon {
  /** Reads `bytesPerThread` bytes `passes` times on each of `threads` threads at once. */
  measureRead(bytesPerThread: number, threads: number, passes: number): Promise<{ seconds: number; bytes: number; checksum: number }>;
}

export interface ExecAddon {
  /** execve(2): replaces this process's program, keeping its pid and the descriptors `keepFds` (Node opens all close-on-exec); throws if that fails. */
  exec(file: string, args: readonly string[], env: readonly string[], keepFds: readonly number[]): never;
}

export type AddonLoad<A = MembwAddon> = { ok: true; addon: A; path: string } | { ok: false; reason: string };

/** $KIWI_NATIVE_DIR (a folder holding the addon `name`) first, then native/build/Release above this module. */
function findAddon(name: string, env: NodeJS.ProcessEnv): string | null {
  if (env.KIWI_NATIVE_DIR) {
    const p = join(env.KIWI_NATIVE_DIR, name);
    return existsSync(p) ? p : null;
  }
  const file = join('native', 'build', 'Release', name);
  // Source (electron/engine/device) and build (dist/electron/engine/device) sit at different
  // depths, and a packaged app unpacks native files beside app.asar: walk up to the first match.
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    for (const candidate of [join(dir, file), join(dir.replace(/app\.asar(?=$|[\\/])/, 'app.asar.unpacked'), file)]) {
      if (existsSync(candidate)) return candidate;
    }
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return null;
}

export function loadMembwAddon(env: NodeJS.ProcessEnv = process.env): AddonLoad {
  return loadAddon<MembwAddon>('kiwi_membw.node', 'measureRead', env);
}

export function loadExecAddon(env: NodeJS.ProcessEnv = process.env): AddonLoad<ExecAddon> {
  return loadAddon<ExecAddon>('kiwi_exec.node', 'exec', env);
}

function loadAddon<A>(name: string, method: string, env: NodeJS.ProcessEnv): AddonLoad<A> {
  const path = findAddon(name, env);
  if (path === null) return { ok: false, reason: `native/build/Release/${name} is not built (run node-gyp rebuild --directory native)` };
  try {
    const mod = createRequire(import.meta.url)(path) as Record<string, unknown>;
    if (typeof mod[method] !== 'function') return { ok: false, reason: `${path} does not export ${method}` };
    return { ok: true, addon: mod as A, path };
  } catch (err) {
    return { ok: false, reason: `${path} did not load: ${(err as Error).message}` };
  }
}
