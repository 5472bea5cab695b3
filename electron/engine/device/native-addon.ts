// Finds and loads Kiwi's native probe (native/binding.gyp → kiwi_membw.node). Loading fails
// softly: a missing or broken addon is reported with its reason so callers can fall back to JS
// and say so, never silently.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface MembwAddon {
  /** Reads `bytesPerThread` bytes `passes` times on each of `threads` threads at once. */
  measureRead(bytesPerThread: number, threads: number, passes: number): Promise<{ seconds: number; bytes: number; checksum: number }>;
}

export type AddonLoad = { ok: true; addon: MembwAddon; path: string } | { ok: false; reason: string };

const ADDON_FILE = join('native', 'build', 'Release', 'kiwi_membw.node');

/** $KIWI_NATIVE_DIR (a folder holding kiwi_membw.node) first, then native/build/Release above this module. */
export function findMembwAddon(env: NodeJS.ProcessEnv = process.env): string | null {
  if (env.KIWI_NATIVE_DIR) {
    const p = join(env.KIWI_NATIVE_DIR, 'kiwi_membw.node');
    return existsSync(p) ? p : null;
  }
  // Source (electron/engine/device) and build (dist/electron/engine/device) sit at different
  // depths, and a packaged app unpacks native files beside app.asar: walk up to the first match.
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    for (const candidate of [join(dir, ADDON_FILE), join(dir.replace(/app\.asar(?=$|[\\/])/, 'app.asar.unpacked'), ADDON_FILE)]) {
      if (existsSync(candidate)) return candidate;
    }
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return null;
}

export function loadMembwAddon(env: NodeJS.ProcessEnv = process.env): AddonLoad {
  const path = findMembwAddon(env);
  if (path === null) return { ok: false, reason: 'native/build/Release/kiwi_membw.node is not built (run node-gyp rebuild --directory native)' };
  try {
    const mod = createRequire(import.meta.url)(path) as Partial<MembwAddon>;
    if (typeof mod.measureRead !== 'function') return { ok: false, reason: `${path} does not export measureRead` };
    return { ok: true, addon: mod as MembwAddon, path };
  } catch (err) {
    return { ok: false, reason: `${path} did not load: ${(err as Error).message}` };
  }
}
