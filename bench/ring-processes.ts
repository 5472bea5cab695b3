// What bench/ring.ts and bench/ring-overhead.ts share: real processes (`kiwi` from source through
// tsx) whose JSON event lines are collected, a member mode (`kiwi join` without ICE that
// advertises the parent's delay proxy in front of its own listener, so every ring link to it goes
// through the proxy), and one greedy SSE stream through the OpenAI API.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { hugePagesEnv } from '../electron/engine/device/huge-pages.js';
import { kiwiCacheDir } from '../electron/engine/paths.js';
import { RingMember } from '../electron/engine/pipeline/ring-member.js';
import { ShardCache } from '../electron/engine/runtime/shard-cache.js';
import { MemberSession } from '../electron/engine/session/member.js';
import type { DelayProxy } from '../electron/engine/test-support/delay-proxy.js';

export interface MemberConfig {
  code: string;
  rendezvous: string;
  name: string;
  model: string;
  threads: number;
  advertise: string;
}

/** Member mode: `kiwi join --no-ice` with an advertised address (the parent's delay proxy). Prints ready, link and joined events. */
export async function runProxiedMember(cfg: MemberConfig): Promise<void> {
  const say = (event: string, fields: Record<string, unknown> = {}): void => console.log(JSON.stringify({ event, ...fields }));
  const member = new MemberSession({ code: cfg.code, rendezvousUrl: cfg.rendezvous, name: cfg.name, listenHost: '127.0.0.1', advertise: [cfg.advertise], ice: false });
  const ring = new RingMember(member, {
    modelPath: cfg.model, weightsDir: join(kiwiCacheDir(), 'weights'), threads: cfg.threads, cache: new ShardCache(join(kiwiCacheDir(), 'shards')),
  });
  ring.on('ready', (r) => say('ready', { source: r.source }));
  ring.on('error', (err) => say('error', { code: err.code, message: err.message }));
  member.on('link', (s) => say('link', { peer: s.peer, state: s.state, kind: s.kind ?? null, rtt_ms: s.rttMs ?? null }));
  await member.connect();
  say('joined', { pid: process.pid });
  await new Promise<void>((resolve) => process.once('SIGTERM', () => resolve()));
  await member.stop('benchmark over');
  await ring.close();
  process.exit(0);
}

export interface Spawned {
  child: ChildProcess;
  /** The first event `name` (matching `match`) printed so far or later; rejects once the process exits without it. */
  event: (name: string, match?: (e: Record<string, unknown>) => boolean) => Promise<Record<string, unknown>>;
  events: Array<Record<string, unknown>>;
}

export interface ProcessSet {
  children: ChildProcess[];
  proxies: DelayProxy[];
  /** node --import tsx ARGS in `root` (stdin piped: `kiwi host` reads `status` requests there). */
  spawnNode: (args: string[]) => Spawned;
  /** `kiwi ARGS --json` from source. */
  kiwi: (args: string[]) => Spawned;
  /** SIGTERM to every child (awaiting its exit), then every proxy closed. */
  stopAll: () => Promise<void>;
}

export function processSet(root: string, env: NodeJS.ProcessEnv): ProcessSet {
  // KIWI_BENCH_NODE_ARGS: extra node flags for every process, e.g. `--cpu-prof --cpu-prof-dir=DIR` (not allowed in NODE_OPTIONS).
  const nodeArgs = (env.KIWI_BENCH_NODE_ARGS ?? '').split(' ').filter((a) => a !== '');
  const children: ChildProcess[] = [];
  const proxies: DelayProxy[] = [];
  const spawnNode = (args: string[]): Spawned => {
    // Processes that run stages without the `kiwi` command get the huge pages it would restart with.
    const child = spawn(process.execPath, [...nodeArgs, '--import', 'tsx', ...args], { cwd: root, env: hugePagesEnv(env), stdio: ['pipe', 'pipe', 'pipe'] });
    children.push(child);
    const events: Array<Record<string, unknown>> = [];
    const waiters: Array<() => void> = [];
    createInterface({ input: child.stdout! }).on('line', (line) => {
      try {
        events.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        return; // not an event line
      }
      for (const w of waiters.splice(0)) w();
    });
    const stderr: string[] = [];
    createInterface({ input: child.stderr! }).on('line', (l) => stderr.push(l));
    const event = async (name: string, match: (e: Record<string, unknown>) => boolean = () => true): Promise<Record<string, unknown>> => {
      for (;;) {
        const hit = events.find((e) => e.event === name && match(e));
        if (hit !== undefined) return hit;
        if (child.exitCode !== null) throw new Error(`${args.join(' ')} exited: ${stderr.slice(-20).join('\n')}`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 200);
        });
      }
    };
    return { child, event, events };
  };
  const stopAll = async (): Promise<void> => {
    for (const c of children.splice(0)) {
      if (c.exitCode === null && c.signalCode === null) {
        c.kill('SIGTERM');
        await new Promise((r) => c.once('exit', r));
      }
    }
    for (const p of proxies.splice(0)) await p.close();
  };
  return { children, proxies, spawnNode, kiwi: (args) => spawnNode(['electron/kiwi.ts', ...args, '--json']), stopAll };
}

export interface Stream {
  ttftMs: number;
  tokens: number;
  /** Wall time after the first token until the end. */
  decodeMs: number;
}

/** One greedy SSE completion stream; counts content chunks as tokens (one per token). */
export async function sseStream(url: string, modelId: string, prompt: string, maxTokens: number): Promise<Stream> {
  const t0 = performance.now();
  const res = await fetch(`${url}/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: modelId, prompt, max_tokens: maxTokens, temperature: 0, stream: true }),
  });
  if (!res.ok || res.body === null) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let first = 0;
  let tokens = 0;
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    const n = decoder.decode(chunk, { stream: true }).split('\n').filter((l) => l.startsWith('data: {')).length;
    if (n > 0 && first === 0) first = performance.now();
    tokens += n;
  }
  return { ttftMs: first - t0, tokens, decodeMs: performance.now() - first };
}
