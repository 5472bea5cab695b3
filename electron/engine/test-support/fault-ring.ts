// A ring of real processes to break on purpose: a rendezvous, `kiwi host` and N `kiwi join`
// members (each with a small reported memory so the plan gives every one of them layers), plus the
// means to hurt it at chosen moments: SIGKILL or SIGINT a member, start it again under the same
// identity, read the host's status (phase, epoch, recoveries) and stream a completion over SSE
// while watching every piece as it arrives. Used by ring.faults.process.test.ts, the netns
// partition test and bench/faults.ts. Places each participant through `place` (loopback by
// default; a network namespace prefix for the netns tests).
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { askStatus, kiwiEntry, repoRoot, waitEvent, type Event, type Proc, type ProcessSet } from './processes.js';
import type { RecoveryRecord } from '../pipeline/session-host.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { modelSizesFromGguf } from '../planner/model-sizes.js';

const run = promisify(execFile);

export interface FaultMember {
  name: string;
  /** Memory the member reports to the planner (its `fleet_device.memory_bytes`). */
  memoryBytes: number;
  /** Give the member its own copy of the model (else it receives its layers from the host). */
  ownModel?: boolean;
  /** More `kiwi join` arguments for this member (e.g. --relay-only). */
  args?: readonly string[];
}

export interface Placement {
  /** Command prefix that runs a program where this participant lives (e.g. `ip netns exec NS`). */
  prefix: string[];
  /** Address its direct links listen on. */
  listen: string;
}

export interface FaultRingOptions {
  model: string;
  members: readonly FaultMember[];
  /** Folder for the members' capability files. */
  dir: string;
  /** Host: silence after which a member counts as gone (seconds). */
  heartbeatTimeoutS?: number;
  /** Host: how long requests wait for a ring that can hold the model (seconds). */
  recoveryTimeoutS?: number;
  /** Members: heartbeat interval. */
  heartbeatMs?: number;
  hostArgs?: readonly string[];
  /** Environment variables of the host's process (e.g. KIWI_CUT_MIN_MB). */
  hostEnv?: Readonly<Record<string, string>>;
  memberArgs?: readonly string[];
  /** Where each participant runs ('rendezvous', 'host' or a member's name); loopback when absent. */
  place?: (who: string) => Placement;
  /** How long the ring may take to serve. */
  formTimeoutMs?: number;
  /** The rendezvous URL a member dials (e.g. a delay proxy in front of the real one); default the rendezvous itself. */
  memberRendezvous?: (name: string, rendezvousUrl: string) => string | Promise<string>;
}

/** What `kiwi host` prints for `status` (the lead's SessionHostStatus; recovery fields optional until built). */
export interface HostStatus extends Record<string, unknown> {
  phase: string;
  epoch?: number;
  recoveries?: Recovery[];
  stages: Array<{ peer: number; name: string; start: number; end: number; state: string }>;
  requests: { completed: number; cancelled: number; failed: number };
  /** The host's standby layers (host-standby-builds.ts), with --standby-gb. */
  standby?: { state: string; layers: number[] };
  error?: { code: string; message: string };
}

/**
 * Serving with every stage loaded: a re-plan serves the new ring once members' weights are in, so
 * 'serving' alone may come while a member still opens its sessions (its load not yet reported).
 */
export const servingAllReady = (s: HostStatus): boolean => s.phase === 'serving' && s.stages.every((x) => x.state === 'ready' || x.state === 'kept');

/** A completed re-plan as the host reports it. */
export type Recovery = RecoveryRecord;

/** A member identity that survives restarts (8-64 letters, digits, - or _). */
export const memberIdOf = (name: string): string => `fault-member-${name}`;

export class FaultRing {
  readonly members = new Map<string, Proc>();
  /** Every process a member name has had, oldest first (restarts append). */
  readonly history = new Map<string, Proc[]>();
  private constructor(
    private readonly procs: ProcessSet,
    private readonly opts: FaultRingOptions,
    readonly rendezvous: Proc,
    readonly rendezvousUrl: string,
    readonly host: Proc,
    readonly code: string,
    private readonly memberArgs: string[],
  ) {}

  /** The API base URL once serving (`http://127.0.0.1:P/v1`). */
  url = '';

  static async start(procs: ProcessSet, opts: FaultRingOptions): Promise<FaultRing> {
    const place = opts.place ?? ((): Placement => ({ prefix: [], listen: '127.0.0.1' }));
    const spawnAt = (who: string, args: string[]): Proc => {
      const where = place(who);
      // Each machine has its own shard cache and received weights, as on real PCs (a restarted member keeps its own).
      const env = who === 'host' ? Object.entries(opts.hostEnv ?? {}).map(([k, v]) => `${k}=${v}`) : [];
      const all = [...where.prefix, 'env', `KIWI_CACHE_DIR=${join(opts.dir, `cache-${who}`)}`, ...env, process.execPath, ...kiwiEntry(), ...args];
      return procs.spawn(all[0]!, all.slice(1));
    };
    const rv = spawnAt('rendezvous', ['rendezvous', '--host', place('rendezvous').listen, '--port', '0', '--json']);
    const rendezvousUrl = (await waitEvent(rv, (e) => e.event === 'listening', 'the rendezvous', 30_000)).url as string;
    const hostArgs = ['host', '--model', opts.model, '--port', '0', '--rendezvous', rendezvousUrl, '--auto-approve',
      '--expect', String(opts.members.length), '--listen', place('host').listen, '--json',
      // Fixed figures (its RAM; members' from their capabilities files): the layer ranges tests assert must not follow a noisy bench.
      '--no-bench', ...(opts.hostArgs ?? [])];
    // The recoveries these trials count are the faults they cause, not drift re-plans of a loaded machine.
    if (!hostArgs.includes('--replan-drift')) hostArgs.push('--replan-drift', 'off');
    // Members' memory figures here are whole blocks (perBlock multiples): no prompt-cache share per block unless the test asks for a cache.
    if (!hostArgs.includes('--prompt-cache-mb')) hostArgs.push('--prompt-cache-mb', '0');
    if (opts.heartbeatTimeoutS !== undefined) hostArgs.push('--heartbeat-timeout', String(opts.heartbeatTimeoutS));
    if (opts.recoveryTimeoutS !== undefined) hostArgs.push('--recovery-timeout', String(opts.recoveryTimeoutS));
    const host = spawnAt('host', hostArgs);
    const code = (await waitEvent(host, (e) => e.event === 'session', 'the session code', 30_000)).code as string;
    const memberArgs = [...(opts.memberArgs ?? [])];
    if (opts.heartbeatMs !== undefined) memberArgs.push('--heartbeat-ms', String(opts.heartbeatMs));
    const ring = new FaultRing(procs, opts, rv, rendezvousUrl, host, code, memberArgs);
    ring.spawnAt = spawnAt;
    for (const m of opts.members) await ring.startMember(m.name);
    ring.url = (await waitEvent(host, (e) => e.event === 'serving', 'the ring to serve', opts.formTimeoutMs ?? 90_000)).url as string;
    return ring;
  }

  private spawnAt: (who: string, args: string[]) => Proc = () => {
    throw new Error('not started');
  };

  private spec(name: string): FaultMember {
    const m = this.opts.members.find((x) => x.name === name);
    if (m === undefined) throw new Error(`no member named ${name}`);
    return m;
  }

  /** Starts (or starts again, under the same name and identity) the member `name`. */
  async startMember(name: string): Promise<Proc> {
    const m = this.spec(name);
    const capabilities = join(this.opts.dir, `capabilities-${name}.json`);
    await writeFile(capabilities, JSON.stringify({ fleet_device: { memory_bytes: m.memoryBytes } }));
    const rendezvous = (await this.opts.memberRendezvous?.(name, this.rendezvousUrl)) ?? this.rendezvousUrl;
    const p = this.spawnAt(name, ['join', this.code, '--rendezvous', rendezvous, '--name', name, '--member-id', memberIdOf(name),
      '--capabilities', capabilities, '--listen', (this.opts.place?.(name).listen ?? '127.0.0.1'), '--json',
      ...(m.ownModel === true ? ['--model', this.opts.model] : []), ...this.memberArgs, ...(m.args ?? [])]);
    this.members.set(name, p);
    this.history.set(name, [...(this.history.get(name) ?? []), p]);
    return p;
  }

  member(name: string): Proc {
    const p = this.members.get(name);
    if (p === undefined) throw new Error(`no member named ${name}`);
    return p;
  }

  /** Kills a member with `signal` (SIGKILL: a crash; SIGINT: a graceful leave) and waits for it to exit. */
  async stop(name: string, signal: NodeJS.Signals = 'SIGKILL', timeoutMs = 30_000): Promise<number | null> {
    const p = this.member(name);
    if (p.child.exitCode !== null || p.child.signalCode !== null) return p.child.exitCode;
    p.child.kill(signal);
    const timer = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), timeoutMs).unref());
    const code = await Promise.race([p.exited, timer]);
    if (code === 'timeout') throw new Error(`${name} did not exit within ${timeoutMs} ms of ${signal}; its last events: ${JSON.stringify(p.events.slice(-8))}; stderr: ${p.stderr.join('\n')}`);
    return code;
  }

  /** Sends `signal` without waiting (for kills that must land at an exact moment). */
  signal(name: string, signal: NodeJS.Signals = 'SIGKILL'): void {
    this.member(name).child.kill(signal);
  }

  alive(name: string): boolean {
    const p = this.member(name);
    return p.child.exitCode === null && p.child.signalCode === null;
  }

  async status(): Promise<HostStatus> {
    return (await askStatus(this.host)) as unknown as HostStatus;
  }

  /** Polls the host's status until `check` holds; returns that status. */
  async waitStatus(check: (s: HostStatus) => boolean, what: string, timeoutMs = 60_000, everyMs = 100): Promise<HostStatus> {
    const started = Date.now();
    let last: HostStatus | undefined;
    for (;;) {
      last = await this.status();
      if (check(last)) return last;
      if (this.host.child.exitCode !== null) throw new Error(`the host exited (${this.host.child.exitCode}) before ${what}: ${this.host.stderr.join('\n')}`);
      if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}; last status: ${JSON.stringify(summarize(last))}\n${this.logs()}`);
      await new Promise((r) => setTimeout(r, everyMs));
    }
  }

  /** Host events of a kind (e.g. 'error', 'plan'). */
  hostEvents(kind: string): Event[] {
    return this.host.events.filter((e) => e.event === kind);
  }

  /** Everything worth reading when a fault test fails: the host's and members' events and stderr. */
  logs(): string {
    const lines = [`host events: ${JSON.stringify(brief(this.host.events))}`, `host stderr: ${this.host.stderr.join('\n')}`];
    for (const [name, ps] of this.history) {
      ps.forEach((p, i) => {
        lines.push(`${name}#${i} (exit ${p.child.exitCode ?? p.child.signalCode}) events: ${JSON.stringify(brief(p.events))}`);
        if (p.stderr.length > 0) lines.push(`${name}#${i} stderr: ${p.stderr.join('\n')}`);
      });
    }
    return lines.join('\n');
  }
}

/** Events as a failure message shows them: no progress or status listings, plans as their stages. */
function brief(events: readonly Event[]): unknown[] {
  return events
    .filter((e) => e.event !== 'weights-progress' && e.event !== 'status')
    .map((e) => {
      if (e.event !== 'plan') return e;
      const stages = (e.stages as Array<{ device: string; start: number; end: number }> | undefined) ?? [];
      return { event: 'plan', stages: stages.map((s) => `${s.device}:${s.start}-${s.end}`).join(' ') };
    });
}

/** The status without the bulky parts, for messages. */
export function summarize(s: HostStatus | undefined): unknown {
  if (s === undefined) return undefined;
  return { phase: s.phase, epoch: s.epoch, recoveries: s.recoveries, stages: s.stages?.map((x) => `${x.name}:${x.start}-${x.end}:${x.state}`), requests: s.requests, error: s.error };
}

export interface Piece {
  text: string;
  /** Date.now() when it arrived. */
  at: number;
}

export interface StreamResult {
  /** HTTP status of the response. */
  status: number;
  text: string;
  pieces: Piece[];
  finishReason: string | null;
  /** The error event of the stream, or the error body of a refused request. */
  error: { message: string; type?: string; code?: string | null } | undefined;
  /** Whether the stream ended with `data: [DONE]`. */
  done: boolean;
  startedAt: number;
  endedAt: number;
}

export interface CompletionRequest {
  model: string;
  prompt: string | number[];
  maxTokens: number;
}

/**
 * Streams a greedy completion over SSE with plain fetch and calls `onPiece(index, piece)` as each
 * text piece arrives (await-able, so a test can kill a member at exactly the k-th token before
 * reading on). Never throws for an HTTP or stream error: they are returned in `error`.
 */
export async function streamCompletion(url: string, req: CompletionRequest, onPiece?: (index: number, piece: Piece) => void | Promise<void>, opts: { stallMs?: number } = {}): Promise<StreamResult> {
  const startedAt = Date.now();
  const result: StreamResult = { status: 0, text: '', pieces: [], finishReason: null, error: undefined, done: false, startedAt, endedAt: startedAt };
  // A stream that stops without an error (a ring that broke under it) must fail the trial, not hang it.
  const stallMs = opts.stallMs ?? 120_000;
  const abort = new AbortController();
  let stalled = false;
  let watchdog = setTimeout(() => ((stalled = true), abort.abort()), stallMs);
  const alive = (): void => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => ((stalled = true), abort.abort()), stallMs);
  };
  try {
    return await readStream(url, req, result, alive, abort.signal, onPiece);
  } catch (err) {
    result.error = stalled
      ? { message: `no token and no error for ${stallMs} ms: the stream stalled`, type: 'stream_stalled' }
      : { message: `the stream broke: ${(err as Error).message}`, type: 'stream_broken' };
    result.endedAt = Date.now();
    return result;
  } finally {
    clearTimeout(watchdog);
  }
}

async function readStream(url: string, req: CompletionRequest, result: StreamResult, alive: () => void, signal: AbortSignal, onPiece?: (index: number, piece: Piece) => void | Promise<void>): Promise<StreamResult> {
  const res = await fetch(`${url}/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: req.model, prompt: req.prompt, max_tokens: req.maxTokens, temperature: 0, stream: true }),
    signal,
  });
  result.status = res.status;
  if (!res.ok || res.body === null) {
    const body = await res.text();
    try {
      result.error = (JSON.parse(body) as { error: StreamResult['error'] }).error;
    } catch {
      result.error = { message: body };
    }
    result.endedAt = Date.now();
    return result;
  }
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    alive();
    buffer += decoder.decode(chunk, { stream: true });
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') {
          result.done = true;
          continue;
        }
        const value = JSON.parse(data) as { error?: StreamResult['error']; choices?: Array<{ text?: string; finish_reason?: string | null }> };
        if (value.error !== undefined) {
          result.error = value.error;
          continue;
        }
        const choice = value.choices?.[0];
        if (choice?.finish_reason != null) result.finishReason = choice.finish_reason;
        if (choice?.text !== undefined && choice.text !== '') {
          const piece = { text: choice.text, at: Date.now() };
          result.pieces.push(piece);
          result.text += piece.text;
          await onPiece?.(result.pieces.length - 1, piece);
        }
      }
    }
  }
  result.endedAt = Date.now();
  return result;
}

/** Where two texts first differ, as the piece of `got` that holds that character (for failure messages). */
export function firstDifference(got: StreamResult, want: string): { char: number; piece: number; got: string; want: string } | undefined {
  let char = 0;
  while (char < got.text.length && char < want.length && got.text[char] === want[char]) char++;
  if (char === got.text.length && char === want.length) return undefined;
  let piece = 0;
  for (let seen = 0; piece < got.pieces.length; piece++) {
    seen += got.pieces[piece]!.text.length;
    if (seen > char) break;
  }
  return { char, piece, got: JSON.stringify(got.text.slice(Math.max(0, char - 10), char + 10)), want: JSON.stringify(want.slice(Math.max(0, char - 10), char + 10)) };
}

/**
 * The stall the client saw after a failure at `at`: the longest wait for a piece from `at` on
 * (from `at` to the first piece after it, or between two later pieces), in ms; undefined when no
 * piece came after `at`. Pieces already on their way when the member died arrive at once, so the
 * longest gap, not the first one, is the wait for the recovered ring's first token.
 */
export function stallAfter(pieces: readonly Piece[], at: number): number | undefined {
  let prev = at;
  let longest: number | undefined;
  for (const p of pieces) {
    if (p.at < at) continue;
    longest = Math.max(longest ?? 0, p.at - prev);
    prev = p.at;
  }
  return longest;
}

/** `kiwi generate`'s greedy text (the one-machine reference). */
export async function generateReference(model: string, prompt: string, maxTokens: number): Promise<{ text: string; ids: number[]; promptIds: number[] }> {
  const { stdout } = await run(process.execPath, [...kiwiEntry(), 'generate', '--model', model, '--prompt', prompt, '--max-tokens', String(maxTokens), '--json'], { cwd: repoRoot, maxBuffer: 1 << 26 });
  const out = JSON.parse(stdout.trim().split('\n').pop() as string) as { text: string; ids: number[]; prompt_ids: number[] };
  return { text: out.text, ids: out.ids, promptIds: out.prompt_ids };
}

/** `kiwi synth` of a small Llama-family model with `blocks` layers (random weights, real shapes). */
export async function synthModel(path: string, blocks: number, quant: 'f32' | 'q8_0' | 'q4_0' = 'q8_0', seed = 7): Promise<string> {
  const shape = { name: 'faults', architecture: 'llama', blockCount: blocks, embeddingLength: 64, headCount: 4, headCountKv: 2, feedForwardLength: 160, vocabSize: 320, contextLength: 1024 };
  await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', JSON.stringify(shape), '--quant', quant, '--out', path, '--seed', String(seed), '--json'], { cwd: repoRoot });
  return path;
}

/**
 * A ring over a 12-block model (synthModel, `model`) whose ranges must move when a member dies:
 * sized as the host's planner sizes them, the host holds 2 blocks and the head, each of the three
 * members m1-m3 at most 6, so the members share 10 blocks and two survivors must take more each.
 */
export async function crampedRing(procs: ProcessSet, model: string, dir: string, opts: Pick<FaultRingOptions, 'hostEnv'> = {}): Promise<FaultRing> {
  const sizes = modelSizesFromGguf(await openGguf(model));
  const perBlock = sizes.blockResidentBytes! + sizes.kvBytesPerTokenPerLayer * 1024;
  const hostCaps = join(dir, 'capabilities-host.json');
  await writeFile(hostCaps, JSON.stringify({ fleet_device: { memory_bytes: sizes.headResidentBytes + 2 * perBlock + perBlock / 2 } }));
  const members = ['m1', 'm2', 'm3'].map((name) => ({ name, memoryBytes: 6 * perBlock + perBlock / 2 }));
  return FaultRing.start(procs, { model, members, dir, heartbeatMs: 500, heartbeatTimeoutS: 10, recoveryTimeoutS: 30, hostArgs: ['--capabilities', hostCaps], ...opts });
}

/** A member's load as its events tell it: the range assigned, and the `ready` that followed. */
export interface MemberLoad {
  start: number;
  end: number;
  source: string;
  transferred: number;
  segments: number;
  opened: number;
}

/** The ranges a member loaded, in order: each `ready` paired with the `assigned` before it. */
export function memberLoads(events: readonly Event[]): MemberLoad[] {
  const out: MemberLoad[] = [];
  let last: { start: number; end: number } | undefined;
  for (const e of events) {
    if (e.event === 'assigned') last = { start: e.start as number, end: e.end as number };
    if (e.event === 'ready' && last !== undefined) {
      out.push({ ...last, source: e.source as string, transferred: e.transferred_bytes as number, segments: e.segments as number, opened: e.opened_layers as number });
    }
  }
  return out;
}
