// Where a running `kiwi host` / `kiwi join` tells `kiwi status` how to reach its control API: one
// small JSON file per process ({url, token, role, pid}) in a folder only this user can enter
// (0700), the file itself readable only by this user (0600), removed when the process ends. The
// token never travels on a command line or in the process list.
import { chmod, mkdir, open, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { KiwiError } from '../errors.js';
import { kiwiCacheDir } from '../paths.js';

export const ControlFile = z.object({
  url: z.string().url(),
  token: z.string().min(1),
  role: z.enum(['host', 'member']),
  pid: z.number().int().positive(),
  started_at: z.number(),
});
export type ControlFile = z.infer<typeof ControlFile>;

/**
 * $KIWI_RUNTIME_DIR, else run/ in $KIWI_CACHE_DIR (tests, portable installs), else
 * $XDG_RUNTIME_DIR/kiwi (a per-user tmpfs on Linux), else run/ in the cache folder.
 */
export function kiwiRuntimeDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.KIWI_RUNTIME_DIR) return env.KIWI_RUNTIME_DIR;
  if (env.KIWI_CACHE_DIR) return join(env.KIWI_CACHE_DIR, 'run');
  if (env.XDG_RUNTIME_DIR) return join(env.XDG_RUNTIME_DIR, 'kiwi');
  return join(kiwiCacheDir(env), 'run');
}

/** Writes this process's control file (mode 0600 in a 0700 folder); returns its path. */
export async function writeControlFile(entry: Omit<ControlFile, 'pid' | 'started_at'>, dir = kiwiRuntimeDir()): Promise<string> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // mkdir keeps the mode of a folder that exists: tighten it (a no-op on Windows).
  await chmod(dir, 0o700);
  const path = join(dir, `control-${process.pid}.json`);
  const value: ControlFile = { ...entry, pid: process.pid, started_at: Date.now() };
  // Created with 0600 from the first byte (a leftover file of a recycled pid is replaced).
  await rm(path, { force: true });
  const fh = await open(path, 'wx', 0o600);
  try {
    await fh.writeFile(`${JSON.stringify(value)}\n`);
  } finally {
    await fh.close();
  }
  return path;
}

export async function removeControlFile(path: string): Promise<void> {
  await rm(path, { force: true });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user (whose file this user could not have read anyway).
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The control files of running Kiwi processes, newest first (files of ended processes are removed). */
export async function listControlFiles(dir = kiwiRuntimeDir()): Promise<ControlFile[]> {
  const names = await readdir(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [] as string[];
    throw err;
  });
  const found: ControlFile[] = [];
  for (const name of names.filter((n) => /^control-\d+\.json$/.test(n))) {
    const path = join(dir, name);
    const text = await readFile(path, 'utf8').catch(() => null);
    if (text === null) continue;
    let parsed: ReturnType<typeof ControlFile.safeParse>;
    try {
      parsed = ControlFile.safeParse(JSON.parse(text));
    } catch {
      continue;
    }
    if (!parsed.success) continue;
    if (!alive(parsed.data.pid)) {
      // Left by a process that was killed: nobody answers there any more.
      await rm(path, { force: true });
      continue;
    }
    found.push(parsed.data);
  }
  return found.sort((a, b) => b.started_at - a.started_at);
}

/** The origin + path of a control API URL without a trailing slash, for comparing. */
function normalizeUrl(url: string): string {
  const u = new URL(url);
  const path = u.pathname.replace(/\/+$/, '');
  return `${u.protocol}//${u.host}${path === '' ? '' : path}`;
}

/**
 * The running Kiwi `kiwi status` asks: the one at `hostUrl` (its origin or its /api URL), else
 * the only one running, else the only host among several.
 */
export async function findControlFile(hostUrl: string | undefined, dir = kiwiRuntimeDir()): Promise<ControlFile> {
  const running = await listControlFiles(dir);
  if (hostUrl !== undefined) {
    let wanted: string;
    try {
      wanted = normalizeUrl(hostUrl);
    } catch {
      throw new KiwiError('USAGE', `--host must be a URL such as http://127.0.0.1:PORT, got '${hostUrl}'`);
    }
    const hit = running.find((f) => normalizeUrl(f.url) === wanted || new URL(f.url).origin === wanted);
    if (hit === undefined) {
      throw new KiwiError('CONTROL_UNAUTHORIZED', `No running Kiwi of this user at ${hostUrl} left its token in ${dir}${running.length > 0 ? ` (running: ${running.map((f) => f.url).join(', ')})` : ''}.`);
    }
    return hit;
  }
  if (running.length === 0) throw new KiwiError('CONTROL_NOT_FOUND', `No running \`kiwi host\` or \`kiwi join\` of this user (nothing in ${dir}).`);
  if (running.length === 1) return running[0] as ControlFile;
  const hosts = running.filter((f) => f.role === 'host');
  if (hosts.length === 1) return hosts[0] as ControlFile;
  throw new KiwiError('USAGE', `Several Kiwi processes run here; pick one with --host: ${running.map((f) => `${f.url} (${f.role}, pid ${f.pid})`).join(', ')}.`);
}
