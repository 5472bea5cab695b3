// Huge pages for onnxruntime's packed weights (Linux). A stage's weights live in anonymous memory
// that onnxruntime fills at session creation (prepacking, ../../../shared/docs/ONNXRUNTIME-NOTES.md);
// in 4 KiB pages that is one page fault per 4 KiB, most of a stage's opening time on the 2-core dev
// VM (perf: a memset and its faults). glibc asks the kernel for 2 MiB pages when its tunable
// glibc.malloc.hugetlb=1 is set, which works where transparent huge pages are in 'madvise' mode
// (most distributions' default). Measured there: opening 8 layers of an 8B Q4_0 5.3 -> 4.1 s, a
// 1B `kiwi generate` start to exit 10-30% shorter (bench/huge-pages.ts); decode speed did not
// change beyond that machine's run-to-run noise.
// glibc reads its tunables only when a program starts, so `kiwi` restarts itself once, at its very
// beginning, with the tunable set: through execve, so the pid, the open files and the terminal
// stay the same for whatever started and watches it. KIWI_HUGE_PAGES=0 leaves the process as it is.
import { readFileSync } from 'node:fs';
import { loadExecAddon } from './native-addon.js';

const TUNABLE = 'glibc.malloc.hugetlb=1';

export interface HugePagesFacts {
  platform: NodeJS.Platform;
  env: NodeJS.ProcessEnv;
  /** /sys/kernel/mm/transparent_hugepage/enabled, e.g. 'always [madvise] never' (undefined: unreadable). */
  thp: string | undefined;
  /** The process's command line, as /proc/self/cmdline gives it (NUL-separated). */
  cmdline: string | undefined;
}

/** The program, arguments and environment to restart with, or why not. */
export type HugePagesRestart = { restart: true; file: string; args: string[]; env: string[]; keepFds: number[] } | { restart: false; reason: string };

/** Whether and how to restart this process with huge pages. Pure. */
export function hugePagesRestart(f: HugePagesFacts): HugePagesRestart {
  if (f.platform !== 'linux') return { restart: false, reason: 'huge pages through glibc are Linux only' };
  if (f.env.KIWI_HUGE_PAGES === '0') return { restart: false, reason: 'KIWI_HUGE_PAGES=0' };
  if (hugetlbTunable(f.env) !== undefined) return { restart: false, reason: `already set: GLIBC_TUNABLES=${f.env.GLIBC_TUNABLES}` };
  const mode = thpMode(f.thp);
  // 'always' gives every large mapping huge pages already; 'never' gives none whatever glibc asks.
  if (mode !== 'madvise') return { restart: false, reason: thpUnused(mode) };
  const args = (f.cmdline ?? '').split('\0');
  if (args.at(-1) === '') args.pop();
  if (args.length === 0) return { restart: false, reason: 'the command line is unreadable' };
  const env = Object.entries(withTunable(f.env))
    .filter((e): e is [string, string] => e[1] !== undefined)
    .map(([k, v]) => `${k}=${v}`);
  // stdio, and the IPC channel of a process forked by Node, stay open across the restart.
  const channel = Number(f.env.NODE_CHANNEL_FD);
  const keepFds = [0, 1, 2, ...(Number.isInteger(channel) && channel > 2 ? [channel] : [])];
  return { restart: true, file: '/proc/self/exe', args, env, keepFds };
}

/**
 * The environment for a child process that runs stages as `kiwi` does (a benchmark's forked engine
 * worker): with the tunable where `kiwi` would restart with it.
 */
export function hugePagesEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return hugePagesRestart({ ...hugePagesFacts(env), cmdline: 'node' }).restart ? withTunable(env) : env;
}

/** The glibc.malloc.hugetlb entry of GLIBC_TUNABLES, if any. */
function hugetlbTunable(env: NodeJS.ProcessEnv): string | undefined {
  return (env.GLIBC_TUNABLES ?? '').split(':').find((t) => t.startsWith('glibc.malloc.hugetlb='));
}

function withTunable(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const tunables = env.GLIBC_TUNABLES ?? '';
  return { ...env, GLIBC_TUNABLES: tunables === '' ? TUNABLE : `${tunables}:${TUNABLE}` };
}

/**
 * Restarts this process with huge pages where that applies (hugePagesRestart): a successful restart
 * never returns. Otherwise returns why not. Call it first, before the process opens anything it
 * must not lose.
 */
export function restartWithHugePages(env: NodeJS.ProcessEnv = process.env): string {
  const plan = hugePagesRestart(hugePagesFacts(env));
  if (!plan.restart) return plan.reason;
  const addon = loadExecAddon(env);
  if (!addon.ok) return addon.reason;
  try {
    return addon.addon.exec(plan.file, plan.args, plan.env, plan.keepFds);
  } catch (err) {
    return `execve failed: ${(err as Error).message}`;
  }
}

/** Whether a process with these facts has its large allocations in huge pages, in words (`kiwi bench`). */
export function hugePagesInWords(f: HugePagesFacts): string {
  if (f.platform !== 'linux') return 'no (huge pages through glibc are Linux only)';
  const mode = thpMode(f.thp);
  if (mode === 'always') return "yes (transparent huge pages are 'always')";
  if (mode !== 'madvise') return `no (${thpUnused(mode)})`;
  const tunable = hugetlbTunable(f.env);
  if (tunable !== undefined && tunable !== 'glibc.malloc.hugetlb=0') return `yes (${tunable})`;
  const plan = hugePagesRestart(f);
  return `no (${plan.restart ? 'kiwi could not restart with them: is native/build/Release/kiwi_exec.node built?' : plan.reason})`;
}

/** The bracketed mode of /sys/kernel/mm/transparent_hugepage/enabled: 'always', 'madvise', 'never' (undefined: unreadable). */
function thpMode(thp: string | undefined): string | undefined {
  return /\[(\w+)\]/.exec(thp ?? '')?.[1];
}

function thpUnused(mode: string | undefined): string {
  return mode === undefined ? 'transparent huge pages are not available' : `transparent huge pages are '${mode}'`;
}

/** This process's facts, with `env`. */
export function hugePagesFacts(env: NodeJS.ProcessEnv = process.env): HugePagesFacts {
  return { platform: process.platform, env, thp: readOrUndefined('/sys/kernel/mm/transparent_hugepage/enabled'), cmdline: readOrUndefined('/proc/self/cmdline') };
}

function readOrUndefined(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}
