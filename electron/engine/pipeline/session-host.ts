// Composition root of `kiwi host --model M`: a session (engine/session) whose admitted members
// become the ring. It gathers members, plans the ring over their reported devices and measured
// links (engine/planner), assigns each member its layer range, streams weights to members that
// lack them, opens the host's own stages (its first blocks and the head), and attaches the ring
// to a RingBackend that the OpenAI server serves through. status() is what a UI reads.
//
// When to plan: with `expect` N, as soon as N members are active; without it, once at least one
// member is active and no other joined for `settleMs` (default 3 s). Members who join after the
// plan wait (they are listed in status()); re-planning when members come and go is not built yet.
import { EventEmitter } from 'node:events';
import { open } from 'node:fs/promises';
import { basename } from 'node:path';
import { isKiwiError, KiwiError } from '../errors.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { createTokenizer } from '../model/tokenizer/tokenizer.js';
import type { DeviceSpec, ModelSizes } from '../planner/fleet.js';
import type { PlanJson } from '../planner/plan-json.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import { KvBlockPool } from '../runtime/kv-pool.js';
import type { ExecutionProvider } from '../runtime/ort-session.js';
import { modelFingerprint, type ShardCache } from '../runtime/shard-cache.js';
import { Stage } from '../runtime/stage.js';
import { attentionHeadDim } from '../runtime/stage-graph.js';
import { createHost, type HostOptions, type HostSession, type SessionStatus } from '../session/host.js';
import type { WireOptions } from '../transport/tensor-frame.js';
import { hashSpans, stageSpans, type HashedSpan } from './member-weights.js';
import { RingBackend } from './ring-backend.js';
import { RingEngine } from './ring-engine.js';
import { RingGenerator } from './ring-generator.js';
import { MemberToHostBody, parsePipelineBody, type Assign, type HostToMemberBody } from './ring-protocol.js';
import { planRing } from './session-fleet.js';

export interface SessionHostOptions {
  modelPath: string;
  /** Where the model file came from: members without a copy fetch their tensors' byte ranges from it. */
  modelUrl?: string;
  /** The model as the planner sizes it (commands/plan.ts: modelSizesFromSummary). */
  modelSizes: ModelSizes;
  session: HostOptions;
  /** Plan once this many members are active. */
  expect?: number;
  settleMs?: number;
  /** This machine as a fleet device; also stands in for members that report no device. */
  hostDevice: Omit<DeviceSpec, 'name'>;
  hostName?: string;
  wire?: WireOptions;
  /** Context per request (positions); default the model's, at most 4096. */
  maxPositions?: number;
  concurrency?: number;
  maxBatch?: number;
  maxInFlight?: number;
  kvBudgetBytes?: number;
  provider?: ExecutionProvider;
  threads?: number;
  cache?: ShardCache;
  /** How long members may take to load (and receive) their weights. Default 10 min. */
  readyTimeoutMs?: number;
}

export type Phase = 'gathering' | 'planning' | 'loading' | 'serving' | 'failed' | 'closed';

export interface StageStatus {
  peer: number;
  name: string;
  start: number;
  end: number;
  head: boolean;
  state: 'assigned' | 'loading' | 'ready' | 'failed';
  source?: 'local' | 'cache' | 'url' | 'host';
  transferredBytes?: number;
  loadMs?: number;
}

export interface SessionHostStatus {
  phase: Phase;
  session: SessionStatus;
  plan: PlanJson | undefined;
  stages: StageStatus[];
  /** Recent ring steps: wall time host to host, and the host's own part (ms). */
  timing: { steps: number; meanRingMs: number | null; meanHostMs: number | null; meanStageMs: Record<string, number>; inFlight: number };
  /** KV blocks of the host's admission pool (each request reserves its whole length around the ring). */
  kv: { freeBlocks: number; totalBlocks: number } | undefined;
  /** Generations so far by how they ended. */
  requests: { completed: number; cancelled: number; failed: number };
  error: { code: string; message: string } | undefined;
}

export interface SessionHostEvents {
  plan: [plan: PlanJson];
  assigned: [stage: StageStatus];
  'weights-progress': [p: { peer: number; name: string; receivedBytes: number; totalBytes: number }];
  ready: [stage: StageStatus];
  serving: [];
  error: [err: KiwiError];
}

const CHUNK_BYTES = 32 * 1024;
const WINDOW_BYTES = 4 * 1024 * 1024;

interface MemberTransfer {
  plan: HashedSpan[];
  acked: number;
  wake: (() => void) | undefined;
}

export class SessionHost extends EventEmitter<SessionHostEvents> {
  readonly backend: RingBackend;
  private phase: Phase = 'gathering';
  private plan: PlanJson | undefined;
  private readonly stages = new Map<number, StageStatus>();
  private readonly memberPeers = new Map<string, number>();
  private readonly transfers = new Map<string, MemberTransfer>();
  private engine: RingEngine | undefined;
  private pool: KvBlockPool | undefined;
  private hostStages: Stage[] = [];
  private error: KiwiError | undefined;
  private readonly waiters = new Set<() => void>();

  constructor(
    readonly session: HostSession,
    private readonly opts: SessionHostOptions,
  ) {
    super();
    this.backend = new RingBackend(basename(opts.modelPath).replace(/\.gguf$/i, ''));
    session.on('pipeline', (memberId, body) => this.onPipeline(memberId, body));
    session.on('change', () => this.poke());
    session.on('link', (l) => {
      if (l.state === 'up') for (const peer of [l.a, l.b]) if (peer !== 0) this.engine?.attach(peer);
      this.poke();
    });
  }

  status(): SessionHostStatus {
    const t = this.engine?.timings ?? [];
    const mean = (f: (x: (typeof t)[number]) => number): number | null => (t.length === 0 ? null : t.reduce((a, x) => a + f(x), 0) / t.length);
    return {
      phase: this.phase,
      session: this.session.status(),
      plan: this.plan,
      stages: [...this.stages.values()].map((s) => ({ ...s })),
      timing: { steps: t.length, meanRingMs: mean((x) => x.ringMs), meanHostMs: mean((x) => x.hostMs), meanStageMs: meanByKey(t.map((x) => x.stageMs)), inFlight: this.engine?.inFlight ?? 0 },
      kv: this.pool && { freeBlocks: this.pool.freeBlocks, totalBlocks: this.pool.totalBlocks },
      requests: { ...this.backend.counts },
      error: this.error && { code: this.error.code, message: this.error.message },
    };
  }

  /** Gathers members, plans, loads and attaches the ring; resolves once serving. */
  async form(signal?: AbortSignal): Promise<void> {
    try {
      await this.gather(signal);
      await this.planAndLoad(signal);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.phase = 'failed';
      this.error = err;
      this.emit('error', err);
      throw err;
    }
  }

  async close(): Promise<void> {
    this.phase = 'closed';
    this.poke();
    await this.backend.close();
    for (const s of this.hostStages) await s.dispose();
    this.hostStages = [];
    await this.session.close();
  }

  private poke(): void {
    for (const w of [...this.waiters]) w();
  }

  /** Waits until `ready()` holds, re-checking on every session change. */
  private until(ready: () => boolean, what: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (this.phase === 'closed') return finish(new KiwiError('SESSION_ENDED', 'The host is closing.'));
        if (signal?.aborted) return finish(signal.reason);
        try {
          if (ready()) finish(undefined);
        } catch (err) {
          finish(err);
        }
      };
      const timer = setTimeout(() => finish(new KiwiError('SESSION_TIMEOUT', `Timed out waiting for ${what}.`)), timeoutMs);
      const tick = setInterval(check, 200);
      const finish = (err: unknown): void => {
        clearTimeout(timer);
        clearInterval(tick);
        this.waiters.delete(check);
        signal?.removeEventListener('abort', check);
        if (err === undefined) resolve();
        else reject(err);
      };
      this.waiters.add(check);
      signal?.addEventListener('abort', check);
      check();
    });
  }

  private activeMembers(): SessionStatus['members'] {
    return this.session.status().members.filter((m) => m.state === 'active' && m.connected);
  }

  private async gather(signal?: AbortSignal): Promise<void> {
    const expect = this.opts.expect;
    if (expect !== undefined) {
      await this.until(() => this.activeMembers().length >= expect, `${expect} members to join`, 24 * 3600_000, signal);
    } else {
      let count = 0;
      let since = Date.now();
      await this.until(
        () => {
          const n = this.activeMembers().length;
          if (n !== count) {
            count = n;
            since = Date.now();
          }
          return n >= 1 && Date.now() - since >= (this.opts.settleMs ?? 3000);
        },
        'members to join',
        24 * 3600_000,
        signal,
      );
    }
    await this.linksUp(signal);
  }

  /** Every ring link of the session is up and measured. */
  private linksUp(signal?: AbortSignal): Promise<void> {
    return this.until(
      () => {
        const s = this.session.status();
        const failed = s.links.find((l) => l.state === 'failed');
        if (failed !== undefined) throw new KiwiError('RING_BROKEN', `The ring link between peers ${failed.a} and ${failed.b} could not be established (neither direct nor relayed).`);
        return s.ring.length >= 2 && s.links.length >= (s.ring.length === 2 ? 1 : s.ring.length) && s.links.every((l) => l.state === 'up' && l.rttMs !== undefined);
      },
      'the ring links to come up',
      60_000,
      signal,
    );
  }

  private async planAndLoad(signal?: AbortSignal): Promise<void> {
    this.phase = 'planning';
    const file = await openGguf(this.opts.modelPath);
    const maxPositions = this.opts.maxPositions;
    const shape = await modelShapeFromGguf(file, maxPositions !== undefined ? { maxPositions } : {});
    const members = this.activeMembers();
    const hostName = this.opts.hostName ?? 'host';
    const { plan, stages: order } = planRing({
      model: this.opts.modelSizes,
      context: shape.maxPositions,
      concurrency: this.opts.concurrency ?? 1,
      devices: [{ peer: 0, name: hostName, capabilities: undefined }, ...members.map((m) => ({ peer: m.peer, name: m.name, capabilities: m.capabilities }))],
      fallback: this.opts.hostDevice,
      links: this.session.status().links,
    });
    this.plan = plan;
    this.emit('plan', plan);
    const memberByPeer = new Map(members.map((m) => [m.peer, m]));
    this.session.setRingOrder(order.slice(1).map((s) => memberByPeer.get(s.peer)!.memberId));
    await this.linksUp(signal);

    this.phase = 'loading';
    const fingerprint = await modelFingerprint(file);
    const wire = this.opts.wire ?? { encoding: 'f32', zstd: false };
    const hostRange = order[0]!;
    const stageOpts = {
      ...(this.opts.cache !== undefined ? { cache: this.opts.cache } : {}),
      ...(this.opts.provider !== undefined ? { provider: this.opts.provider } : {}),
      ...(this.opts.threads !== undefined ? { threads: this.opts.threads } : {}),
    };
    this.stages.set(0, { peer: 0, name: hostName, start: hostRange.start, end: hostRange.end, head: true, state: 'loading' });
    for (const [i, s] of order.entries()) {
      if (i === 0) continue;
      const m = memberByPeer.get(s.peer)!;
      this.memberPeers.set(m.memberId, s.peer);
      const assign: Assign = {
        kind: 'assign', start: s.start, end: s.end,
        prev: order[i - 1]!.peer, next: order[(i + 1) % order.length]!.peer,
        encoding: wire.encoding, zstd: wire.zstd,
        model: { fingerprint, name: basename(this.opts.modelPath), fileBytes: file.fileSize, ...(this.opts.modelUrl !== undefined ? { url: this.opts.modelUrl } : {}) },
        maxPositions: shape.maxPositions,
      };
      const spans = await hashSpans(this.opts.modelPath, stageSpans(file, s));
      this.transfers.set(m.memberId, { plan: spans, acked: 0, wake: undefined });
      const stage: StageStatus = { peer: s.peer, name: m.name, start: s.start, end: s.end, head: false, state: 'assigned' };
      this.stages.set(s.peer, stage);
      this.sendTo(m.memberId, assign);
      this.sendTo(m.memberId, { kind: 'weights-plan', spans });
    }
    // The host's own stages load while the members load theirs.
    const first = hostRange.end > hostRange.start ? await Stage.open(file, shape, { start: 0, end: hostRange.end, head: false }, stageOpts) : undefined;
    const head = await Stage.open(file, shape, { start: shape.blockCount, end: shape.blockCount, head: true }, stageOpts);
    this.hostStages = [...(first ? [first] : []), head];
    const hostStage = this.stages.get(0)!;
    hostStage.state = 'ready';
    hostStage.source = 'local';
    this.emit('ready', { ...hostStage });
    await this.until(
      () => {
        const failed = [...this.stages.values()].find((s) => s.state === 'failed');
        if (failed !== undefined) throw this.error ?? new KiwiError('RING_NOT_READY', `${failed.name} could not load layers ${failed.start}-${failed.end}.`);
        return [...this.stages.values()].every((s) => s.state === 'ready');
      },
      'every member to load its layers',
      this.opts.readyTimeoutMs ?? 600_000,
      signal,
    );

    const engine = new RingEngine({ link: (peer) => this.session.ringLink(peer) }, {
      first, head, firstPeer: order[1]!.peer, lastPeer: order[order.length - 1]!.peer, wire,
      onBroken: (err) => this.stopServing(err),
    });
    this.engine = engine;
    // Per position: K and V of every layer over the ring (f32), for admission.
    const bytesPerToken = 2 * shape.blockCount * shape.kvHeads * attentionHeadDim(shape) * 4;
    const blockTokens = 16;
    const budgetBlocks = Math.floor((this.opts.kvBudgetBytes ?? 1024 ** 3) / (bytesPerToken * blockTokens));
    const pool = new KvBlockPool(Math.max(Math.ceil(shape.maxPositions / blockTokens), budgetBlocks), blockTokens, bytesPerToken);
    this.pool = pool;
    const generator = new RingGenerator(engine, pool, shape.maxPositions, {
      maxBatch: this.opts.maxBatch ?? 8,
      maxInFlight: this.opts.maxInFlight ?? order.length,
    });
    this.backend.attach({ file, tokenizer: createTokenizer(file.metadata), generator, contextTokens: shape.maxPositions });
    this.session.on('change', (c) => {
      if (c.type === 'member-left' && this.memberPeers.has(c.memberId)) {
        this.stopServing(new KiwiError('RING_BROKEN', `${c.name} left the ring (${c.reason}); the ring stopped serving. Restart the host to re-plan.`));
      }
    });
    this.phase = 'serving';
    this.emit('serving');
  }

  /** The ring broke: the API answers 503 from now on (re-planning is not built yet). */
  private stopServing(err: KiwiError): void {
    if (this.phase !== 'serving') return;
    this.phase = 'failed';
    this.error = err;
    this.backend.detach();
    this.emit('error', err);
  }

  private sendTo(memberId: string, body: HostToMemberBody): void {
    if (!this.session.sendPipeline(memberId, body as unknown as Record<string, unknown>)) {
      throw new KiwiError('SESSION_DISCONNECTED', 'A member disconnected while the ring was being set up.');
    }
  }

  private onPipeline(memberId: string, raw: Record<string, unknown>): void {
    const peer = this.memberPeers.get(memberId);
    const stage = peer !== undefined ? this.stages.get(peer) : undefined;
    if (stage === undefined) return;
    let body: MemberToHostBody;
    try {
      body = parsePipelineBody(MemberToHostBody, raw);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.emit('error', err);
      return;
    }
    switch (body.kind) {
      case 'assigned':
        stage.state = 'loading';
        this.emit('assigned', { ...stage });
        break;
      case 'weights-request':
        void this.sendWeights(memberId, body.spans).catch((err: unknown) => {
          if (!isKiwiError(err)) throw err;
          this.emit('error', err);
        });
        break;
      case 'weights-progress': {
        const t = this.transfers.get(memberId);
        if (t !== undefined) {
          t.acked = body.receivedBytes;
          t.wake?.();
        }
        this.emit('weights-progress', { peer: stage.peer, name: stage.name, receivedBytes: body.receivedBytes, totalBytes: body.totalBytes });
        break;
      }
      case 'ready':
        Object.assign(stage, { state: 'ready', source: body.source, transferredBytes: body.transferredBytes, loadMs: body.loadMs });
        this.emit('ready', { ...stage });
        break;
      case 'failed':
        stage.state = 'failed';
        this.error = new KiwiError(body.code, `${stage.name} could not load layers ${stage.start}-${stage.end}: ${body.message}`);
        break;
    }
    this.poke();
  }

  /** Streams the requested spans (each must be one the member was told of) in chunks, at most WINDOW_BYTES ahead of its acknowledgements. */
  private async sendWeights(memberId: string, spans: ReadonlyArray<{ offset: number; bytes: number }>): Promise<void> {
    const t = this.transfers.get(memberId);
    if (t === undefined) return;
    for (const s of spans) {
      if (!t.plan.some((p) => p.offset === s.offset && p.bytes === s.bytes)) {
        throw new KiwiError('RING_PROTOCOL', `A member asked for bytes ${s.offset}+${s.bytes}, which are not among its tensors.`);
      }
    }
    t.acked = 0;
    let sent = 0;
    const fh = await open(this.opts.modelPath, 'r');
    try {
      for (const s of spans) {
        for (let at = 0; at < s.bytes; at += CHUNK_BYTES) {
          while (sent - t.acked > WINDOW_BYTES) {
            await new Promise<void>((resolve) => {
              const timer = setTimeout(resolve, 1000);
              t.wake = () => {
                clearTimeout(timer);
                resolve();
              };
            });
            if (this.phase === 'closed') return;
          }
          const n = Math.min(CHUNK_BYTES, s.bytes - at);
          const buf = Buffer.allocUnsafe(n);
          await fh.read(buf, 0, n, s.offset + at);
          this.sendTo(memberId, { kind: 'weights-chunk', offset: s.offset + at, data: buf.toString('base64') });
          sent += n;
        }
      }
    } finally {
      await fh.close();
    }
  }
}

function meanByKey(records: ReadonlyArray<Record<string, number>>): Record<string, number> {
  const sums = new Map<string, { total: number; n: number }>();
  for (const r of records) {
    for (const [k, v] of Object.entries(r)) {
      const s = sums.get(k) ?? { total: 0, n: 0 };
      s.total += v;
      s.n++;
      sums.set(k, s);
    }
  }
  return Object.fromEntries([...sums].map(([k, s]) => [k, s.total / s.n]));
}

export async function createSessionHost(opts: SessionHostOptions): Promise<SessionHost> {
  const session = await createHost(opts.session);
  return new SessionHost(session, opts);
}

