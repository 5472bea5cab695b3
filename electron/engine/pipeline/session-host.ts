// Composition root of `kiwi host --model M`: a session (engine/session) whose admitted members
// become the ring. It gathers members, plans the ring over their reported devices and measured
// links (engine/planner), assigns each member its layer range, streams weights to members that
// lack them, opens the host's own stages (its first blocks and the head), and attaches the ring
// to a RingBackend that the OpenAI server serves through. status() is what a UI reads.
//
// When to plan: with `expect` N, as soon as N members are active; without it, once at least one
// member is active and no other joined for `settleMs` (default 3 s).
//
// Members come and go (issue 7). A ring member whose links or control connection close, who falls
// silent past the heartbeat timeout, or who asks to leave, starts a re-plan: the generator holds
// its requests (steps in flight fail into the hold), the planner plans the members left (its
// admission check decides whether they can hold the model), members load their new ranges (a
// member whose range did not change keeps its stage), and a new ring epoch starts, on which every
// held request rebuilds its caches (its prompt as a prefill, then one decode step per token it had
// generated, ring-generator.ts) and carries on bit for bit. When the
// members left cannot hold the model the host waits for one to return, up to recoveryTimeoutMs,
// then fails the waiting requests with RING_UNAVAILABLE. A member that returns, or a new one, is
// planned in at a safe point: the generator holds, steps in flight finish, the ring is rebuilt.
import { EventEmitter } from 'node:events';
import { basename } from 'node:path';
import { isKiwiError, KiwiError, knownCodeOr } from '../errors.js';
import { ProgressRate } from '../progress-rate.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { createTokenizer } from '../model/tokenizer/tokenizer.js';
import type { DeviceSpec, ModelSizes } from '../planner/fleet.js';
import type { PlanJson } from '../planner/plan-json.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import { KvBlockPool } from '../runtime/kv-pool.js';
import type { ExecutionProvider } from '../runtime/ort-session.js';
import { modelFingerprint, type ShardCache } from '../runtime/shard-cache.js';
import { Stage } from '../runtime/stage.js';
import { attentionHeadDim, type DecoderShape } from '../runtime/stage-graph.js';
import { createHost, type HostOptions, type HostSession, type MemberView, type SessionStatus } from '../session/host.js';
import type { WireOptions } from '../transport/tensor-frame.js';
import { chooseLinkWire, DEFAULT_WIRE_POLICY, type WirePolicy } from './link-wire.js';
import { SpanHashes, stageSpans } from './member-weights.js';
import { budgetRefusedWarning, MemberBudgets } from './member-budget.js';
import { RingBackend } from './ring-backend.js';
import { RingEngine, type PeerFault } from './ring-engine.js';
import { RingGenerator } from './ring-generator.js';
import { MemberToHostBody, parsePipelineBody, type Assign, type HostToMemberBody } from './ring-protocol.js';
import { planRing, type RingStage } from './session-fleet.js';
import { WeightsSender } from './weights-sender.js';

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
  /** How each ring link's activations are encoded, chosen per link from what is measured of it (link-wire.ts); default exact (f32). */
  wirePolicy?: WirePolicy;
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
  /** How long requests wait for a ring when the members left cannot hold the model. Default 120 s. */
  recoveryTimeoutMs?: number;
  /** After a member joins or returns, wait this long for others before re-planning it in. Default 1 s. */
  rejoinDelayMs?: number;
}

/** recovering: a re-plan is under way (requests are held); waiting: the members left cannot hold the model. */
export type Phase = 'gathering' | 'planning' | 'loading' | 'serving' | 'recovering' | 'waiting' | 'failed' | 'closed';

export interface StageStatus {
  peer: number;
  name: string;
  start: number;
  end: number;
  head: boolean;
  /** kept: ready with the stage it already ran (same layers as before the re-plan). */
  state: 'assigned' | 'loading' | 'ready' | 'kept' | 'failed';
  source?: 'local' | 'cache' | 'url' | 'host' | 'kept';
  /** How this stage encodes the activations it sends on to the next one. */
  wire?: WireOptions;
  transferredBytes?: number;
  loadMs?: number;
}

/** One re-plan that completed: why, how long requests waited, what it moved. */
export interface RecoveryRecord {
  epoch: number;
  reason: string;
  startedAt: number;
  durationMs: number;
  /** Weight bytes members received (from the host or the model's URL) to load their new ranges. */
  bytesMoved: number;
  /** Requests that were live and carried on by recompute. */
  resumedRequests: number;
}

export interface SessionHostStatus {
  phase: Phase;
  /** The ring's generation: 1 for the first plan, one more per re-plan (0 before the first). */
  epoch: number;
  /** The re-plan under way. */
  recovery: { reason: string; startedAt: number } | undefined;
  /** Completed re-plans, newest last (at most 16). */
  recoveries: RecoveryRecord[];
  /** While waiting for members: when held requests fail (epoch ms), or undefined once they have. */
  waitingUntil: number | undefined;
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
  /** At most a few a second per member (engine/progress-rate.ts), always the final one; rate in bytes/s, null until measured. */
  'weights-progress': [p: { peer: number; name: string; receivedBytes: number; totalBytes: number; bytesPerSecond: number | null; etaSeconds: number | null; final: boolean }];
  ready: [stage: StageStatus];
  serving: [];
  recovering: [reason: string];
  waiting: [reason: string];
  recovered: [record: RecoveryRecord];
  /** Something to tell the user that did not stop the ring, e.g. a member that sent malformed ring data (planned out) or NaN activations. */
  warning: [err: KiwiError];
  error: [err: KiwiError];
}

interface LoadedModel {
  file: GgufFile;
  shape: DecoderShape;
  fingerprint: string;
}

/** The ring being served: its epoch, stages in ring order, the members in it and the host's first blocks. */
interface Ring {
  /** The assignments' epoch (every attempt at a ring uses one, so stale messages are told apart). */
  epoch: number;
  /** Rings served so far, this one included: what status() calls the ring's epoch. */
  generation: number;
  order: RingStage[];
  memberIds: string[];
  first: Stage | undefined;
  engine: RingEngine;
}

const MAX_RECOVERIES_SHOWN = 16;
/** After a fault, signals of the same event (a closed link, then the closed control connection) arrive together. */
const FAULT_GRACE_MS = 250;
/**
 * After a ring link went down: how long to wait for one of its ends to show as gone (a killed
 * member's control connection closes a moment after its links) before planning as if both live
 * (a partition between them). Planning too early plans in the dead member, and the re-plan retries.
 */
const SUSPECT_WAIT_MS = 1500;

export class SessionHost extends EventEmitter<SessionHostEvents> {
  readonly backend: RingBackend;
  private phase: Phase = 'gathering';
  private plan: PlanJson | undefined;
  private stages = new Map<number, StageStatus>();
  private memberPeers = new Map<string, number>();
  private readonly weights: WeightsSender;
  /** Members whose --memory-mb budget cannot hold one layer: told at join, never planned. */
  private readonly budgets: MemberBudgets;
  /** Each span of the model hashed once per session, reused by every re-plan. */
  private readonly spanHashes: SpanHashes;
  /** Each member's weights transfer, sampled for the weights-progress event (its messages come per MiB). */
  private readonly weightsRates = new Map<string, ProgressRate>();
  private model: LoadedModel | undefined;
  private ring: Ring | undefined;
  /** Members of the latest plan (the ring served, or the one being built): who can break it. */
  private plannedIds: readonly string[] = [];
  private head: Stage | undefined;
  private generator: RingGenerator | undefined;
  private pool: KvBlockPool | undefined;
  private error: KiwiError | undefined;
  private readonly waiters = new Set<() => void>();
  /** The latest epoch assigned (a re-plan that failed half-way still used one). */
  private epoch = 0;
  private recovery: { reason: string; startedAt: number } | undefined;
  private readonly recoveries: RecoveryRecord[] = [];
  private waitingUntil: number | undefined;
  /** Why the next re-plan is needed, while one is pending. */
  private replanReason: string | undefined;
  private replanning: Promise<void> | undefined;
  private rejoinTimer: NodeJS.Timeout | undefined;
  /** Members that asked to leave: planned out, then released. */
  private readonly leaving = new Set<string>();
  /** Members whose load failed during the re-plan under way: the next attempt plans without them. */
  private readonly failedLoads = new Set<string>();
  /** Members that sent malformed ring data: no plan uses them again (they stay in the session). */
  private readonly offenders = new Set<string>();
  /** Memory members asked to be planned with (short of free memory), by member id. */
  private readonly memoryLimits = new Map<string, number>();
  /** Peers at the ends of ring links that went down, until the re-plan: maybe gone, maybe partitioned. */
  private readonly suspects = new Set<number>();
  /** Bumped on every membership change, so waits for "someone came back" notice it. */
  private membershipVersion = 0;

  constructor(
    readonly session: HostSession,
    private readonly opts: SessionHostOptions,
  ) {
    super();
    this.backend = new RingBackend(basename(opts.modelPath).replace(/\.gguf$/i, ''));
    this.spanHashes = new SpanHashes(opts.modelPath);
    this.budgets = new MemberBudgets(opts.modelSizes, opts.concurrency ?? 1,
      async () => (await modelShapeFromGguf(await openGguf(opts.modelPath), opts.maxPositions !== undefined ? { maxPositions: opts.maxPositions } : {})).maxPositions,
      (m, r) => {
        this.session.sendPipeline(m.memberId, r as unknown as Record<string, unknown>);
        this.emit('warning', budgetRefusedWarning(m.name, r));
      },
      () => this.poke());
    this.weights = new WeightsSender(opts.modelPath, (id, bytes) => session.sendPipelineBytes(id, bytes), () => this.closed);
    // Requests wait through a re-plan; /health says why the next token is late.
    this.backend.ringHealth = () => ({
      ring: { phase: this.phase, epoch: this.ring?.generation ?? 0, ...(this.recovery ? { reason: this.recovery.reason } : {}), ...(this.waitingUntil !== undefined ? { waiting_until: new Date(this.waitingUntil).toISOString() } : {}) },
    });
    session.on('pipeline', (memberId, body) => this.onPipeline(memberId, body));
    session.on('change', (c) => {
      this.membershipVersion++;
      // A member that went or came back starts with its full memory again.
      if (c.type === 'member-left' || c.type === 'member-joined') this.memoryLimits.delete(c.memberId);
      if (c.type === 'member-left') this.budgets.forget(c.memberId);
      const joinedNow = c.type === 'member-joined' || c.type === 'member-recovered' ? this.activeMembers().find((m) => m.memberId === c.memberId) : undefined;
      if (joinedNow !== undefined) this.budgets.verdict(joinedNow);
      const inRing = this.plannedIds.includes(c.memberId);
      if (c.type === 'member-left' && inRing) this.requestReplan(`${c.name} ${c.reason === 'left' ? 'left the session' : 'went silent (no heartbeat)'}`, true);
      if ((c.type === 'member-joined' || c.type === 'member-recovered') && !inRing) this.scheduleRejoin(c.name);
      this.poke();
    });
    session.on('disconnected', (memberId) => {
      this.membershipVersion++;
      const name = this.session.status().members.find((m) => m.memberId === memberId)?.name ?? 'a member';
      if (this.plannedIds.includes(memberId)) this.requestReplan(`${name} disconnected`, true);
      this.poke();
    });
    session.on('link', (l) => {
      const ring = this.ring;
      if (l.state === 'up') {
        for (const peer of [l.a, l.b]) if (peer !== 0) ring?.engine.attach(peer);
      } else if ((l.state === 'closed' || l.state === 'failed') && ring !== undefined && this.isRingPair(ring, l.a, l.b)) {
        for (const peer of [l.a, l.b]) if (peer !== 0) this.suspects.add(peer);
        this.requestReplan(`the ring link between ${this.peerName(l.a)} and ${this.peerName(l.b)} went down`, true);
      }
      this.poke();
    });
  }

  status(): SessionHostStatus {
    const t = this.ring?.engine.timings ?? [];
    const mean = (f: (x: (typeof t)[number]) => number): number | null => (t.length === 0 ? null : t.reduce((a, x) => a + f(x), 0) / t.length);
    return {
      phase: this.phase,
      epoch: this.ring?.generation ?? 0,
      recovery: this.recovery && { ...this.recovery },
      recoveries: this.recoveries.map((r) => ({ ...r })),
      waitingUntil: this.waitingUntil,
      session: this.session.status(),
      plan: this.plan,
      stages: [...this.stages.values()].map((s) => ({ ...s })),
      timing: { steps: t.length, meanRingMs: mean((x) => x.ringMs), meanHostMs: mean((x) => x.hostMs), meanStageMs: meanByKey(t.map((x) => x.stageMs)), inFlight: this.ring?.engine.inFlight ?? 0 },
      kv: this.pool && { freeBlocks: this.pool.freeBlocks, totalBlocks: this.pool.totalBlocks },
      requests: { ...this.backend.counts },
      error: this.error && { code: this.error.code, message: this.error.message },
    };
  }

  /** Gathers members, plans, loads and attaches the ring; resolves once serving. */
  async form(signal?: AbortSignal): Promise<void> {
    try {
      await this.gather(signal);
      await this.serveFirstRing(signal);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.setPhase('failed');
      this.error = err;
      this.emit('error', err);
      throw err;
    }
  }

  async close(): Promise<void> {
    this.phase = 'closed';
    clearTimeout(this.rejoinTimer);
    this.poke();
    this.ring?.engine.retire(new KiwiError('SESSION_ENDED', 'The host is closing.'));
    await this.backend.close();
    await this.replanning?.catch(() => undefined);
    for (const s of [this.ring?.first, this.head]) await s?.dispose();
    this.ring = undefined;
    this.head = undefined;
    await this.session.close();
  }

  /** Every phase but `closed` is left behind by closing. */
  private setPhase(phase: Exclude<Phase, 'closed'>): void {
    if (this.phase !== 'closed') this.phase = phase;
  }

  private get closed(): boolean {
    return this.phase === 'closed';
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

  /** Members a plan may use: active, connected, not on their way out, not failing to load. */
  private eligibleMembers(): MemberView[] {
    return this.activeMembers().filter((m) => !this.leaving.has(m.memberId) && !this.failedLoads.has(m.memberId) && !this.offenders.has(m.memberId));
  }

  private peerName(peer: number): string {
    if (peer === 0) return this.opts.hostName ?? 'the host';
    return this.session.status().members.find((m) => m.peer === peer)?.name ?? `peer ${peer}`;
  }

  private isRingPair(ring: Ring, a: number, b: number): boolean {
    const peers = ring.order.map((s) => s.peer);
    return peers.some((p, i) => {
      const q = peers[(i + 1) % peers.length]!;
      return (p === a && q === b) || (p === b && q === a);
    });
  }

  private async gather(signal?: AbortSignal): Promise<void> {
    const expect = this.opts.expect;
    if (expect !== undefined) {
      await this.until(() => this.plannableCount() >= expect, `${expect} members to join`, 24 * 3600_000, signal);
    } else {
      let count = 0;
      let since = Date.now();
      await this.until(
        () => {
          const n = this.plannableCount();
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
    await this.linksUp(undefined, signal);
    // Capabilities (a --memory-mb budget) may arrive after the join: a member refused meanwhile does not count.
    if (this.plannableCount() < (expect ?? 1)) return this.gather(signal);
  }

  /** Active members whose memory budget (if any) was checked and holds a layer. */
  private plannableCount(): number {
    return this.activeMembers().filter((m) => this.budgets.verdict(m) === 'ok').length;
  }

  /** Every ring link of the session is up and measured; `members`, when given, must stay in the session meanwhile. */
  private linksUp(members: readonly MemberView[] | undefined, signal?: AbortSignal): Promise<void> {
    return this.until(
      () => {
        if (members !== undefined) this.checkStillHere(members);
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

  /** Throws RING_REPLAN when a member of the ring being built dropped out. */
  private checkStillHere(members: readonly MemberView[]): void {
    const now = new Map(this.session.status().members.map((m) => [m.memberId, m]));
    for (const m of members) {
      const cur = now.get(m.memberId);
      if (cur === undefined || cur.state !== 'active' || !cur.connected || cur.peer !== m.peer) {
        throw new KiwiError('RING_REPLAN', `${m.name} dropped out while the ring was being built.`);
      }
    }
  }

  private planFor(members: readonly MemberView[], model: LoadedModel): { plan: PlanJson; order: RingStage[] } {
    // A member short of memory is planned with what it can give; one that cannot hold a block sits out.
    const limit = (m: MemberView): number | undefined => this.memoryLimits.get(m.memberId);
    const usable = members.filter((m) => (limit(m) ?? Number.POSITIVE_INFINITY) >= this.opts.modelSizes.blockBytes && this.budgets.verdict(m, model.shape.maxPositions) !== 'refused');
    // What each device holds now (its stage in the ring being served): a re-plan keeps it where
    // the bottleneck stays within the planner's margin (planner/moves.ts), so less moves.
    const held = new Map<string, { start: number; end: number }>();
    const ring = this.ring;
    if (ring !== undefined) {
      ring.memberIds.forEach((id, i) => {
        const s = ring.order[i + 1];
        if (s !== undefined && s.end > s.start) held.set(id, { start: s.start, end: s.end });
      });
    }
    const hostHeld = ring !== undefined && ring.order[0] !== undefined && ring.order[0].end > ring.order[0].start ? [{ start: ring.order[0].start, end: ring.order[0].end }] : undefined;
    const holdsOf = (m: MemberView): { holds?: Array<{ start: number; end: number }> } => {
      const h = held.get(m.memberId);
      return h !== undefined ? { holds: [h] } : {};
    };
    const { plan, stages } = planRing({
      model: this.opts.modelSizes,
      context: model.shape.maxPositions,
      concurrency: this.opts.concurrency ?? 1,
      devices: [
        { peer: 0, name: this.opts.hostName ?? 'host', capabilities: undefined, ...(hostHeld !== undefined ? { holds: hostHeld } : {}) },
        ...usable.map((m) => ({ peer: m.peer, name: m.name, capabilities: m.capabilities, ...(limit(m) !== undefined ? { memoryBytes: limit(m) } : {}), ...holdsOf(m) })),
      ],
      fallback: this.opts.hostDevice,
      links: this.session.status().links,
    });
    return { plan, order: stages };
  }

  private stageOptions(): { cache?: ShardCache; provider?: ExecutionProvider; threads?: number } {
    return {
      ...(this.opts.cache !== undefined ? { cache: this.opts.cache } : {}),
      ...(this.opts.provider !== undefined ? { provider: this.opts.provider } : {}),
      ...(this.opts.threads !== undefined ? { threads: this.opts.threads } : {}),
    };
  }

  private async serveFirstRing(signal?: AbortSignal): Promise<void> {
    this.setPhase('planning');
    const file = await openGguf(this.opts.modelPath);
    const maxPositions = this.opts.maxPositions;
    const shape = await modelShapeFromGguf(file, maxPositions !== undefined ? { maxPositions } : {});
    const model: LoadedModel = { file, shape, fingerprint: await modelFingerprint(file) };
    this.model = model;
    const ring = await this.buildRing(this.activeMembers(), model, signal);
    this.ring = ring;
    // Per position: K and V of every layer over the ring (f32), for admission.
    const bytesPerToken = 2 * shape.blockCount * shape.kvHeads * attentionHeadDim(shape) * 4;
    const blockTokens = 16;
    const budgetBlocks = Math.floor((this.opts.kvBudgetBytes ?? 1024 ** 3) / (bytesPerToken * blockTokens));
    const pool = new KvBlockPool(Math.max(Math.ceil(shape.maxPositions / blockTokens), budgetBlocks), blockTokens, bytesPerToken);
    this.pool = pool;
    this.generator = new RingGenerator(ring.engine, pool, shape.maxPositions, {
      maxBatch: this.opts.maxBatch ?? 8,
      maxInFlight: this.opts.maxInFlight ?? ring.order.length,
      onRingFault: (err) => this.requestReplan(err.message, true),
    });
    this.backend.attach({ file, tokenizer: createTokenizer(file.metadata), generator: this.generator, contextTokens: shape.maxPositions });
    this.setPhase('serving');
    this.emit('serving');
    // Members that joined, or ran short of memory, while the first ring formed are planned now.
    if (this.memoryLimits.size > 0) this.scheduleRejoin('a member', true);
    else if (this.hasUnplannedMember()) this.scheduleRejoin('a member');
  }

  /** An eligible member that the latest plan does not include (it joined or came back since). */
  private hasUnplannedMember(): boolean {
    return this.eligibleMembers().some((m) => !this.plannedIds.includes(m.memberId));
  }

  /**
   * Plans `members`, assigns their ranges under a new epoch, opens the host's stages and waits
   * until every member is ready. Throws PLAN_INSUFFICIENT_MEMORY when they cannot hold the model,
   * RING_REPLAN when one drops out meanwhile, or the member's error when its load fails.
   */
  private async buildRing(members: MemberView[], model: LoadedModel, signal?: AbortSignal): Promise<Ring> {
    const { plan, order } = this.planFor(members, model);
    // The host serves the head; the blocks run on members, so a ring needs at least one.
    if (order.length < 2) throw new KiwiError('PLAN_INSUFFICIENT_MEMORY', 'No member is left to run the model\'s blocks.');
    const epoch = ++this.epoch;
    this.plan = plan;
    this.emit('plan', plan);
    const memberByPeer = new Map(members.map((m) => [m.peer, m]));
    const memberIds = order.slice(1).map((s) => memberByPeer.get(s.peer)!.memberId);
    this.plannedIds = memberIds;
    this.session.setRingOrder(memberIds);
    await this.linksUp(members, signal);

    if (this.ring === undefined) this.setPhase('loading');
    const { file, shape, fingerprint } = model;
    // Each stage's outgoing link gets its own encoding, from that link's kind and measured throughput.
    const links = this.session.status().links;
    const frame = { hidden: shape.hidden, decodeBatch: 1, prefillTokens: 128 };
    const wireOut = (i: number): WireOptions => {
      const [a, b] = [order[i]!.peer, order[(i + 1) % order.length]!.peer];
      const l = links.find((x) => (x.a === a && x.b === b) || (x.a === b && x.b === a));
      return chooseLinkWire({ kind: l?.kind, rttMs: l?.rttMs, ...(l?.throughputMBps !== undefined ? { throughputMBps: l.throughputMBps } : {}) }, frame, this.opts.wirePolicy ?? DEFAULT_WIRE_POLICY);
    };
    const hostRange = order[0]!;
    const hostName = this.opts.hostName ?? 'host';
    const stages = new Map<number, StageStatus>();
    const memberPeers = new Map<string, number>();
    stages.set(0, { peer: 0, name: hostName, start: hostRange.start, end: hostRange.end, head: true, state: 'loading', wire: wireOut(0) });
    for (const [i, s] of order.entries()) {
      if (i === 0) continue;
      const m = memberByPeer.get(s.peer)!;
      memberPeers.set(m.memberId, s.peer);
      stages.set(s.peer, { peer: s.peer, name: m.name, start: s.start, end: s.end, head: false, state: 'assigned', wire: wireOut(i) });
    }
    this.stages = stages;
    this.memberPeers = memberPeers;
    for (const [i, s] of order.entries()) {
      if (i === 0) continue;
      const m = memberByPeer.get(s.peer)!;
      const assign: Assign = {
        kind: 'assign', epoch, start: s.start, end: s.end,
        prev: order[i - 1]!.peer, next: order[(i + 1) % order.length]!.peer,
        ...stages.get(s.peer)!.wire!,
        // The first member embeds when the host runs no blocks: it receives token ids.
        receive: i === 1 && hostRange.end === 0 ? { tensor: 'ids', zstd: stages.get(0)!.wire!.zstd } : { tensor: stages.get(order[i - 1]!.peer)!.wire!.encoding, zstd: stages.get(order[i - 1]!.peer)!.wire!.zstd },
        model: { fingerprint, name: basename(this.opts.modelPath), fileBytes: file.fileSize, ...(this.opts.modelUrl !== undefined ? { url: this.opts.modelUrl } : {}) },
        maxPositions: shape.maxPositions,
      };
      const spans = await this.spanHashes.hash(stageSpans(file, s));
      this.weights.plan(m.memberId, spans);
      this.sendTo(m.memberId, assign);
      this.sendTo(m.memberId, { kind: 'weights-plan', epoch, spans });
    }
    // The host's own stages load while the members load theirs; unchanged ones are kept.
    const old = this.ring?.first;
    const first = hostRange.end === 0
      ? undefined
      : old !== undefined && old.plan.end === hostRange.end ? old : await Stage.open(file, shape, { start: 0, end: hostRange.end, head: false }, this.stageOptions());
    this.head ??= await Stage.open(file, shape, { start: shape.blockCount, end: shape.blockCount, head: true }, this.stageOptions());
    const hostStage = stages.get(0)!;
    Object.assign(hostStage, { state: first !== undefined && first === old ? 'kept' : 'ready', source: first !== undefined && first === old ? 'kept' : 'local' });
    this.emit('ready', { ...hostStage });
    try {
      await this.until(
        () => {
          this.checkStillHere(members);
          const failed = [...stages.values()].find((s) => s.state === 'failed');
          if (failed !== undefined) throw this.error ?? new KiwiError('RING_NOT_READY', `${failed.name} could not load layers ${failed.start}-${failed.end}.`);
          return [...stages.values()].every((s) => s.state === 'ready' || s.state === 'kept');
        },
        'every member to load its layers',
        this.opts.readyTimeoutMs ?? 600_000,
        signal,
      );
    } catch (err) {
      if (first !== old) await first?.dispose();
      throw err;
    }
    if (old !== undefined && old !== first) await old.dispose();
    const engine = new RingEngine({ link: (peer) => this.session.ringLink(peer) }, {
      epoch, first, head: this.head, firstPeer: order[1]!.peer, lastPeer: order[order.length - 1]!.peer, wire: hostStage.wire!,
      receive: { tensor: stages.get(order[order.length - 1]!.peer)!.wire!.encoding, zstd: stages.get(order[order.length - 1]!.peer)!.wire!.zstd },
      maxRows: this.opts.maxBatch ?? 8,
      onBroken: (err) => this.requestReplan(err.message, true),
      onPeerFault: (peer, fault, err) => this.onPeerFault(peer, fault, err),
    });
    return { epoch, generation: (this.ring?.generation ?? 0) + 1, order, memberIds, first, engine };
  }

  /**
   * A member joined or came back: plan it in shortly (others may follow), at a safe point. When the
   * timer fires the member may already be in a plan (it joined while the first ring formed and the
   * planner took it): then nothing is re-planned, unless `always` (a member's memory changed).
   */
  private scheduleRejoin(name: string, always = false): void {
    if (this.phase === 'waiting') return; // the wait notices the change itself
    clearTimeout(this.rejoinTimer);
    this.rejoinTimer = setTimeout(() => {
      if (always || this.hasUnplannedMember()) this.requestReplan(`${name} joined`, false);
    }, this.opts.rejoinDelayMs ?? 1000);
  }

  /**
   * Starts a re-plan, or makes the running one go round again. A fault retires the ring at once
   * (its steps in flight are held for recompute); otherwise steps in flight finish first.
   */
  private requestReplan(reason: string, fault: boolean): void {
    if (this.generator === undefined || this.phase === 'closed' || this.phase === 'failed') return;
    if (fault) this.ring?.engine.retire(new KiwiError('RING_REPLAN', reason));
    this.replanReason ??= reason;
    this.poke();
    this.replanning ??= this.replanLoop().finally(() => {
      this.replanning = undefined;
    });
  }

  private async replanLoop(): Promise<void> {
    const generator = this.generator!;
    const model = this.model!;
    while (this.replanReason !== undefined && this.phase !== 'closed') {
      const reason = this.replanReason;
      const fault = this.ring?.engine.isRetired !== false;
      const startedAt = Date.now();
      if (!fault && !this.worthReplanning(model)) {
        this.replanReason = undefined;
        break;
      }
      this.setPhase('recovering');
      this.recovery = { reason, startedAt };
      this.emit('recovering', reason);
      await generator.hold();
      this.ring?.engine.retire(new KiwiError('RING_REPLAN', reason));
      if (fault) await this.settleSuspects();
      this.replanReason = undefined;
      const ring = await this.nextRing(model, reason, startedAt);
      if (ring === undefined) return; // closed
      if (this.closed) {
        ring.engine.retire(new KiwiError('SESSION_ENDED', 'The host is closing.'));
        if (ring.first !== this.ring?.first) await ring.first?.dispose();
        return;
      }
      this.ring = ring;
      const resumedRequests = generator.resume(ring.engine, { maxInFlight: this.opts.maxInFlight ?? ring.order.length });
      const bytesMoved = [...this.stages.values()].reduce((n, s) => n + (s.source === 'host' || s.source === 'url' ? (s.transferredBytes ?? 0) : 0), 0);
      const record: RecoveryRecord = { epoch: ring.generation, reason, startedAt, durationMs: Date.now() - startedAt, bytesMoved, resumedRequests };
      this.recoveries.push(record);
      if (this.recoveries.length > MAX_RECOVERIES_SHOWN) this.recoveries.shift();
      this.recovery = undefined;
      this.waitingUntil = undefined;
      this.failedLoads.clear();
      this.setPhase('serving');
      this.error = undefined;
      this.releaseLeavers(ring.memberIds);
      this.emit('recovered', record);
    }
  }

  /** Waits until a suspect member shows as gone, or briefly when there is none (see SUSPECT_WAIT_MS). */
  private async settleSuspects(): Promise<void> {
    const suspects = [...this.suspects];
    this.suspects.clear();
    if (suspects.length === 0) return sleep(FAULT_GRACE_MS);
    const gone = (): boolean => {
      const here = new Set(this.activeMembers().map((m) => m.peer));
      return suspects.some((p) => !here.has(p));
    };
    await this.until(gone, 'a member at the end of the broken link to go', SUSPECT_WAIT_MS).catch((err: unknown) => {
      if (!isKiwiError(err, 'SESSION_TIMEOUT')) throw err;
    });
  }

  /** A join re-plans only when the plan would change (a member the planner leaves out costs nothing). */
  private worthReplanning(model: LoadedModel): boolean {
    const ring = this.ring;
    if (ring === undefined) return true;
    try {
      const { order } = this.planFor(this.eligibleMembers(), model);
      return JSON.stringify(order) !== JSON.stringify(ring.order);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      return false;
    }
  }

  /**
   * Builds the next ring from whoever is eligible, retrying when someone drops out meanwhile; when
   * the members cannot hold the model, waits for a change in membership, failing the held requests
   * once recoveryTimeoutMs has passed. Undefined when the host closed.
   */
  private async nextRing(model: LoadedModel, reason: string, startedAt: number): Promise<Ring | undefined> {
    const generator = this.generator!;
    const deadline = startedAt + (this.opts.recoveryTimeoutMs ?? 120_000);
    let failedWaiting = false;
    for (;;) {
      if (this.closed) return undefined;
      const version = this.membershipVersion;
      try {
        return await this.buildRing(this.eligibleMembers(), model);
      } catch (err) {
        if (!isKiwiError(err) || this.closed) return undefined;
        if (err.code !== 'PLAN_INSUFFICIENT_MEMORY') {
          // Someone dropped out or failed to load during the re-plan: plan again over who is left.
          for (const [id, peer] of this.memberPeers) if (this.stages.get(peer)?.state === 'failed') this.failedLoads.add(id);
          this.emit('error', err);
          await sleep(FAULT_GRACE_MS);
          continue;
        }
        this.setPhase('waiting');
        // Members that asked to leave need not wait for a ring that may never come.
        this.releaseLeavers([]);
        this.error = new KiwiError('RING_UNAVAILABLE', `The members left cannot hold the model (${err.message}) after ${reason}; waiting for a member to return or join.`);
        this.waitingUntil = failedWaiting ? undefined : deadline;
        this.emit('waiting', this.error.message);
        try {
          await this.until(() => this.membershipVersion !== version, 'a member to return', failedWaiting ? 24 * 3600_000 : Math.max(1, deadline - Date.now()));
        } catch (waitErr) {
          if (!isKiwiError(waitErr, 'SESSION_TIMEOUT')) return undefined;
          failedWaiting = true;
          this.waitingUntil = undefined;
          generator.failWaiting(new KiwiError('RING_UNAVAILABLE', `The ring lost members (${reason}) and the rest cannot hold the model; none returned within ${Math.round((this.opts.recoveryTimeoutMs ?? 120_000) / 1000)} s. Retry once a member rejoins.`));
          continue;
        }
        // Let a returning member settle (its links, its capabilities) before planning.
        await sleep(this.opts.rejoinDelayMs ?? 1000);
        if (this.closed) return undefined;
        this.setPhase('recovering');
      }
    }
  }

  /** Members that asked to leave and are not among `inRing` may go. */
  private releaseLeavers(inRing: readonly string[]): void {
    for (const id of [...this.leaving]) {
      if (inRing.includes(id)) continue;
      this.leaving.delete(id);
      this.session.sendPipeline(id, { kind: 'released' });
    }
  }

  private sendTo(memberId: string, body: HostToMemberBody): void {
    if (!this.session.sendPipeline(memberId, body as unknown as Record<string, unknown>)) {
      throw new KiwiError('RING_REPLAN', 'A member disconnected while the ring was being set up.');
    }
  }

  /**
   * Ring data from member `peer` was wrong (the host's engine saw it, or the next member reported
   * it). Malformed: planned out for good and the ring re-planned. Numeric (NaN/Inf of the right
   * shape): a precision problem to report, the member stays.
   */
  private onPeerFault(peer: number, fault: PeerFault, err: KiwiError): void {
    const member = this.session.status().members.find((m) => m.peer === peer);
    const name = member?.name ?? `peer ${peer}`;
    if (fault === 'numeric') {
      this.emit('warning', new KiwiError('RING_PEER_NUMERIC', `${name}'s activations overflowed (NaN or infinity; a precision problem, e.g. an fp16 stage): the request failed, the member stays. ${err.message}`, { peer, member: name }));
      return;
    }
    if (member === undefined || this.offenders.has(member.memberId)) return;
    this.offenders.add(member.memberId);
    this.emit('warning', new KiwiError('RING_PEER_MALFORMED', `${name} sent malformed ring data; the ring is re-planned without it. ${err.message}`, { peer, member: name }));
    this.requestReplan(`${name} sent malformed ring data`, true);
  }

  private onPipeline(memberId: string, raw: Record<string, unknown>): void {
    let body: MemberToHostBody;
    try {
      body = parsePipelineBody(MemberToHostBody, raw);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.emit('error', err);
      return;
    }
    if (body.kind === 'leaving') {
      this.leaving.add(memberId);
      if (this.plannedIds.includes(memberId) || this.phase === 'recovering' || this.phase === 'waiting') {
        const name = this.session.status().members.find((m) => m.memberId === memberId)?.name ?? 'a member';
        this.requestReplan(`${name} is leaving`, false);
      } else {
        this.leaving.delete(memberId);
        this.session.sendPipeline(memberId, { kind: 'released' });
      }
      return;
    }
    if (body.kind === 'memory') {
      const name = this.session.status().members.find((m) => m.memberId === memberId)?.name ?? 'a member';
      if (body.memoryBytes === null) this.memoryLimits.delete(memberId);
      else this.memoryLimits.set(memberId, body.memoryBytes);
      this.requestReplan(body.memoryBytes === null ? `${name} has memory to spare again` : `${name} is short of memory`, false);
      return;
    }
    const peer = this.memberPeers.get(memberId);
    if (body.kind === 'peer-fault') {
      // A member may report only its own previous stage (or itself, for NaN it produced).
      const order = this.ring?.order.map((s) => s.peer) ?? [];
      const at = peer === undefined ? -1 : order.indexOf(peer);
      const prev = at > 0 ? order[at - 1] : undefined;
      if (body.epoch === this.ring?.epoch && (body.peer === prev || (body.fault === 'numeric' && body.peer === peer)) && body.peer !== 0) {
        this.onPeerFault(body.peer, body.fault, new KiwiError(body.fault === 'malformed' ? 'RING_PEER_MALFORMED' : 'RING_PEER_NUMERIC', `${body.code}: ${body.message}`));
      }
      return;
    }
    const stage = peer !== undefined ? this.stages.get(peer) : undefined;
    if (stage === undefined) return;
    // Answers about an earlier assignment are stale.
    if ((body.kind === 'assigned' || body.kind === 'ready' || body.kind === 'failed') && body.epoch !== undefined && body.epoch !== this.epoch) return;
    switch (body.kind) {
      case 'assigned':
        stage.state = 'loading';
        this.emit('assigned', { ...stage });
        break;
      case 'weights-request':
        void this.weights.send(memberId, body.spans).catch((err: unknown) => {
          if (!isKiwiError(err)) throw err;
          this.emit('error', err);
        });
        break;
      case 'weights-progress': {
        this.weights.acknowledge(memberId, body.receivedBytes);
        let rate = this.weightsRates.get(memberId);
        if (rate === undefined) this.weightsRates.set(memberId, (rate = new ProgressRate()));
        const p = rate.update(body.receivedBytes, body.totalBytes);
        if (p !== null) {
          this.emit('weights-progress', {
            peer: stage.peer, name: stage.name, receivedBytes: body.receivedBytes, totalBytes: body.totalBytes, bytesPerSecond: p.rate, etaSeconds: p.etaSeconds, final: p.final,
          });
        }
        break;
      }
      case 'ready':
        Object.assign(stage, { state: body.source === 'kept' ? 'kept' : 'ready', source: body.source, transferredBytes: body.transferredBytes, loadMs: body.loadMs });
        this.emit('ready', { ...stage });
        break;
      case 'failed':
        stage.state = 'failed';
        this.error = new KiwiError(knownCodeOr(body.code, 'RING_STAGE_FAILED'), `${stage.name} could not load layers ${stage.start}-${stage.end}: ${body.message}`);
        break;
    }
    this.poke();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
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

