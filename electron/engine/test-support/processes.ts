// Real processes for tests: TypeScript entry points run from source with tsx (so a test never
// runs a stale dist/), JSON-line events read from stdout, and every child killed when the test
// ends, also when it fails.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { afterAll, beforeAll } from 'vitest';

export type Event = Record<string, unknown> & { event?: string };

export interface Proc {
  child: ChildProcess;
  events: Event[];
  stderr: string[];
  exited: Promise<number | null>;
}

export const repoRoot = resolve(import.meta.dirname, '../../..');

/** Node arguments that run a TypeScript entry (path from the repository root) from source. */
export function tsEntry(path: string): string[] {
  return ['--import', 'tsx', join(repoRoot, path)];
}

/** Node arguments that run the `kiwi` command from source: `[...kiwiEntry(), 'serve', ...]`. */
export function kiwiEntry(): string[] {
  return tsEntry('electron/kiwi.ts');
}

export class ProcessSet {
  private readonly procs: Proc[] = [];

  constructor() {
    process.once('exit', () => this.killAll());
  }

  /**
   * Runs `kiwi args...` from source on loopback only (host and join would otherwise listen on
   * every interface and announce the session on the LAN). Host and join skip the device bench
   * (`--no-bench`) unless given `--capabilities`: its figures are noisy on a shared machine and
   * would move the layer ranges tests assert; `kiwiMeasured` runs the default, measuring flow.
   * A host does not re-plan on drift unless given `--replan-drift`: tests' fixed figures are not
   * this machine's, and their epochs and recoveries count the faults they cause.
   */
  kiwi(...args: string[]): Proc {
    const session = args[0] === 'host' || args[0] === 'join';
    const noBench = session && !args.includes('--capabilities') && !args.includes('--no-bench') ? ['--no-bench'] : [];
    const noDrift = args[0] === 'host' && !args.includes('--replan-drift') ? ['--replan-drift', 'off'] : [];
    return this.kiwiMeasured(...args, ...noBench, ...noDrift);
  }

  /** `kiwi args...` on loopback, with host and join measuring the device as a user's would. */
  kiwiMeasured(...args: string[]): Proc {
    const loopback = args[0] === 'host' ? ['--rendezvous-host', '127.0.0.1', '--listen', '127.0.0.1'] : args[0] === 'join' ? ['--listen', '127.0.0.1'] : [];
    return this.spawn(process.execPath, [...kiwiEntry(), ...args, ...loopback]);
  }

  /** Runs `command args...`; use node via `node(...)` or wrap with `ip netns exec NS`. */
  spawn(command: string, args: string[]): Proc {
    const child = spawn(command, args, { cwd: repoRoot, stdio: ['pipe', 'pipe', 'pipe'] });
    // Typing into a process that has exited is a broken pipe: waitEvent reports the exit with its stderr.
    child.stdin?.on('error', () => undefined);
    const events: Event[] = [];
    const stderr: string[] = [];
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      try {
        events.push(JSON.parse(line) as Event);
      } catch {
        events.push({ event: 'text', line });
      }
    });
    createInterface({ input: child.stderr as NodeJS.ReadableStream }).on('line', (line) => stderr.push(line));
    const exited = new Promise<number | null>((res) => child.once('exit', (code) => res(code)));
    const p = { child, events, stderr, exited };
    this.procs.push(p);
    return p;
  }

  killAll(): void {
    for (const p of this.procs.splice(0)) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  }

  dispose(): void {
    this.killAll();
  }
}

export async function waitEvent(p: Proc, match: (e: Event) => boolean, what: string, timeoutMs = 20_000): Promise<Event> {
  const started = Date.now();
  for (;;) {
    const hit = p.events.find(match);
    if (hit !== undefined) return hit;
    if (p.child.exitCode !== null) throw new Error(`process exited (${p.child.exitCode}) before ${what}: ${p.stderr.join('\n')}`);
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}; events: ${JSON.stringify(p.events)}; stderr: ${p.stderr.join('\n')}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Types `status` into a host or member and returns the status it prints. */
export async function askStatus(p: Proc): Promise<Record<string, unknown>> {
  const seen = p.events.length;
  p.child.stdin?.write('status\n');
  return waitEvent(p, (e) => e.event === 'status' && p.events.indexOf(e) >= seen, 'a status listing');
}

export async function until(check: () => Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Gives the test file a temporary folder whose `cache/` is KIWI_CACHE_DIR for every process it
 * starts (shard cache, received weights), restored and removed after the file. Returns the folder.
 */
export function isolatedCacheDir(prefix: string): () => string {
  let dir = '';
  let saved: string | undefined;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), prefix));
    saved = process.env.KIWI_CACHE_DIR;
    process.env.KIWI_CACHE_DIR = join(dir, 'cache');
  });
  afterAll(async () => {
    if (saved === undefined) delete process.env.KIWI_CACHE_DIR;
    else process.env.KIWI_CACHE_DIR = saved;
    await rm(dir, { recursive: true, force: true });
  });
  return () => dir;
}

/** Runs a `kiwi` command to its end with --json and returns its last JSON line. */
export async function kiwiJson(...args: string[]): Promise<Record<string, unknown>> {
  const { stdout } = await promisify(execFile)(process.execPath, [...kiwiEntry(), ...args, '--json'], { cwd: repoRoot, maxBuffer: 1 << 24 });
  return JSON.parse(stdout.trim().split('\n').pop() as string) as Record<string, unknown>;
}
