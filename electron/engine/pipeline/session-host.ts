// The host's side of a ring (hosting/host-node.ts composes it): a session (engine/session) whose
// admitted members become the ring. It gathers members, plans the ring over their reported devices and measured
// links (engine/planner), assigns each member its layer range, streams weights to members that
// lack them, opens the host's own stages (its first blocks and the head), and attaches the ring
// to a RingBackend that the OpenAI server serves through. status() is what a UI reads.
//
// When to plan: with `expect` N, as soon as N members are active; without it, once at least one
// member is active and no other joined for `settleMs` (default 3 s).
//
// Members come and go (issue 7): a ring member whose links or control connection close, who falls
// silent, asks to leave or sends malformed ring data starts a re-plan (replan-driver.ts); a member
// that joins or returns is planned in at a safe point. Held requests carry on bit for bit on the
// new ring (ring-generator.ts).
//
// This file wires the parts: ring-phase.ts (every phase change, a pure reducer), ring-assignment.ts
// (plan → stages, wires and assign messages, pure), ring-stages.ts (members' reports on their
// stages), ring-gathering.ts and change-waits.ts (waits on the session's state). Over ~400 lines
// because the session's events, the members' messages and the ring's building meet here.
import { EventEmitter } from 'node:events';
import { basename } from 'node:path';
import { isKiwiError, KiwiError } from '../errors.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { createTokenizer } from '../model/tokenizer/tokenizer.js';
import type { PlanJson } from '../planner/plan-json.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import { KvBlockPool } from '../runtime/kv-pool.js';
import { keptRowBytes } from '../runtime/memory-model.js';
import type { ExecutionProvider } from '../ort/session.js';
import { modelFingerprint, type ShardCache } from '../runtime/shard-cache.js';
import type { WeightLayout } from '../runtime/weights/convert.js';
import { Stage } from '../runtime/stage.js';
import { attentionHeadDim, type DecoderShape } from '../runtime/stage-graph.js';
import { speculativeHealth } from '../runtime/speculative.js';
import { type HostSession, type MemberView, type SessionStatus } from '../session/host.js';
import { ChangeWaits } from './change-waits.js';
import { checkStillHere, gatherMembers, ringLinksUp, type GatherView } from './ring-gathering.js';
import { DEFAULT_WIRE_POLICY } from './link-wire.js';
import { SpanHashes, stageSpans } from './member-weights.js';
import { budgetRefusedWarning, MemberBudgets, promptCacheSizes } from './member-budget.js';
import { ReplanDriver, type ReplanHost, type ServedRing } from './replan-driver.js';
import { assignRing, hostBlocks, hostStageReady, isRingPair, peerFaultAccepted, planSessionRing, ringLoad, ringMemberIds } from './ring-assignment.js';
import { RingBackend } from './ring-backend.js';
import { RingEngine, type PeerFault } from './ring-engine.js';
import { RingGenerator } from './ring-generator.js';
import { RingStages } from './ring-stages.js';
import { layersIn, SegmentedStage } from '../runtime/stage-segments.js';
import type { LayerRange } from '../runtime/layer-range.js';
import { DEFAULT_DRIFT_OPTIONS } from './stage-drift.js';
import { DriftMonitor } from './stage-drift-monitor.js';
import { apply as applyPhase, INITIAL_RING_PHASE, type RingPhaseEvent, type RingPhaseState } from './ring-phase.js';
import { MemberToHostBody, parsePipelineBody, type HostToMemberBody } from './ring-protocol.js';
import type { RingStage } from './session-fleet.js';
import { ringTiming, type SessionHostEvents, type SessionHostOptions, type SessionHostStatus } from './session-host-api.js';
import { withPunchFiltering } from './edge-report.js';
import { WeightsSender } from './weights-sender.js';
import { StandbyHost } from './standby-host.js';
import { HostStandbyBuilds } from './host-standby-builds.js';

export type { Phase, RecoveryRecord } from './ring-phase.js';
export type { StageStatus } from './ring-assignment.js';
export type { SessionHostEvents, SessionHostOptions, SessionHostStatus } from './session-host-api.js';

interface LoadedModel {
  file: GgufFile;
  shape: DecoderShape;
  fingerprint: string;
}

export class SessionHost extends EventEmitter<SessionHostEvents> {
  readonly backend: RingBackend;
  /** Phase, re-plan under way, recoveries, wait deadline, error: changed only by dispatch(). */
  private ringPhase: RingPhaseState = INITIAL_RING_PHASE;
  private plan: PlanJson | undefined;
  private readonly weights: WeightsSender;
  private readonly stages: RingStages;
  /** Members whose --memory-mb budget cannot hold one layer: told at join, never planned. */
  private readonly budgets: MemberBudgets;
  /** Each span of the model hashed once per session, reused by every re-plan. */
  private readonly spanHashes: SpanHashes;
  /** Members' standby layers: what they may fetch beside their range and what they hold on disk (standby-host.ts). */
  private readonly standby: StandbyHost;
  /** The host's own standby layers, built into its shard cache (host-standby-builds.ts). */
  private readonly hostStandby: HostStandbyBuilds | undefined;
  /** When the served ring last completed a step (performance.now()): standby builds wait for quiet. */
  private lastStepAt: number | undefined;
  private readonly waits = new ChangeWaits(() => this.closed);
  private readonly replans: ReplanDriver;
  /** Closed-loop planning: measured stage times against the plan's (stage-drift-monitor.ts). */
  private readonly drift: DriftMonitor;
  private readonly gatherView: GatherView;
  private model: LoadedModel | undefined;
  private ring: ServedRing | undefined;
  /** Members of the latest plan (the ring served, or the one being built): who can break it. */
  private plannedIds: readonly string[] = [];
  private head: Stage | undefined;
  private generator: RingGenerator | undefined;
  private pool: KvBlockPool | undefined;
  /** The latest epoch assigned (a re-plan that failed half-way still used one). */
  private epoch = 0;
  /** Members that asked to leave: planned out, then released. */
  private readonly leaving = new Set<string>();
  /** Members that sent malformed ring data: no plan uses them again (they stay in the session). */
  private readonly offenders = new Set<string>();
  /** Memory members asked to be planned with (short of free memory), by member id. */
  private readonly memoryLimits = new Map<string, number>();

  constructor(
    readonly session: HostSession,
    private readonly opts: SessionHostOptions,
  ) {
    super();
    // Every stage keeps its layers' share of the prompt cache: planned (and budgeted) per block.
    this.opts = { ...opts, modelSizes: promptCacheSizes(opts.modelSizes, opts.promptCacheBytes ?? 0) };
    this.backend = new RingBackend(basename(opts.modelPath).replace(/\.gguf$/i, ''));
    this.spanHashes = new SpanHashes(opts.modelPath);
    this.standby = new StandbyHost({
      file: () => this.model?.file, blockCount: () => this.model?.shape.blockCount ?? 0, hash: (spans) => this.spanHashes.hash(spans), epoch: () => this.epoch,
      serving: () => this.ringPhase.phase === 'serving' && this.generator?.catchingUp !== true, hostEnd: () => this.ring?.order[0]?.end ?? 0, http: () => this.opts.weightsHttp,
      stageOf: (id) => this.stages.list().find((st) => st.peer === this.stages.peerOf(id) && st.peer !== 0), send: (id, body) => void this.session.sendPipeline(id, body as unknown as Record<string, unknown>),
    });
    const { cache, standbyBytes } = this.opts;
    this.hostStandby = cache !== undefined && standbyBytes !== undefined && standbyBytes > 0
      ? new HostStandbyBuilds({ budgetBytes: standbyBytes, cache, ...(opts.provider !== undefined ? { provider: opts.provider } : {}), ...(opts.weightLayout !== undefined ? { weightLayout: opts.weightLayout } : {}) },
        () => ((this.ring?.engine.inFlight ?? 0) > 0 ? performance.now() : this.lastStepAt),
        (err) => void this.emit('warning', new KiwiError('RING_STAGE_FAILED', `The host's standby layers could not be built: ${String(err)}`)))
      : undefined;
    const flushStandby = (): Promise<void> => {
      this.startHostStandby();
      return this.standby.flush().catch((err: unknown) => void this.emit('warning', new KiwiError('WEIGHTS_TRANSFER_FAILED', `Standby layers could not be planned: ${String(err)}`)));
    };
    this.on('serving', () => void flushStandby());
    // After a recovery the resumed streams rebuild their caches first (RingGenerator.catchingUp): the
    // members' standby fetches and builds (CPU, disk, the host's uplink) would slow that replay,
    // which the streams wait for.
    this.on('recovered', () => void (this.generator?.caughtUp() ?? Promise.resolve()).then(flushStandby));
    this.budgets = new MemberBudgets(this.opts.modelSizes, opts.concurrency ?? 1,
      async () => (await modelShapeFromGguf(await openGguf(opts.modelPath), opts.maxPositions !== undefined ? { maxPositions: opts.maxPositions } : {})).maxPositions,
      (m, r) => {
        this.session.sendPipeline(m.memberId, r as unknown as Record<string, unknown>);
        this.emit('warning', budgetRefusedWarning(m.name, r));
      },
      () => this.waits.poke());
    this.weights = new WeightsSender(opts.modelPath, (id, bytes) => session.sendPipelineBytes(id, bytes), () => this.closed);
    this.stages = new RingStages(this.weights, { emit: this.emit.bind(this), loadFailed: (error) => this.stageLoadFailed(error) });
    this.gatherView = { session, waits: this.waits, plannableCount: () => this.activeMembers().filter((m) => this.budgets.verdict(m) === 'ok').length };
    this.replans = new ReplanDriver(this.replanHost());
    this.drift = new DriftMonitor(opts.drift ?? DEFAULT_DRIFT_OPTIONS, {
      served: () => (this.ring !== undefined && this.plan !== undefined ? { ...this.ring, plan: this.plan } : undefined),
      request: (reason) => this.replans.request(reason, false),
    }, this);
    // Requests wait through a re-plan; /health says why the next token is late.
    this.backend.ringHealth = () => {
      const { phase, recovery, waitingUntil } = this.ringPhase;
      return { ring: { phase, epoch: this.ring?.generation ?? 0, ...(recovery ? { reason: recovery.reason } : {}), ...(waitingUntil !== undefined ? { waiting_until: new Date(waitingUntil).toISOString() } : {}) }, ...speculativeHealth(this.generator?.speculation) };
    };
    session.on('pipeline', (memberId, body) => this.onPipeline(memberId, body));
    session.on('change', (c) => {
      this.replans.membershipChanged();
      // A member that went or came back starts with its full memory again.
      if (c.type === 'member-left' || c.type === 'member-joined') {
        this.memoryLimits.delete(c.memberId);
        this.standby.forget(c.memberId);
        this.drift.forget(c.memberId);
      }
      if (c.type === 'member-left') {
        this.budgets.forget(c.memberId);
        void this.opts.weightsHttp?.tokens.revoke(c.memberId);
      }
      const joinedNow = c.type === 'member-joined' || c.type === 'member-recovered' ? this.activeMembers().find((m) => m.memberId === c.memberId) : undefined;
      if (joinedNow !== undefined) this.budgets.verdict(joinedNow);
      const inRing = this.plannedIds.includes(c.memberId);
      if (c.type === 'member-left' && inRing) this.replans.request(`${c.name} ${c.reason === 'left' ? 'left the session' : 'went silent (no heartbeat)'}`, true);
      if ((c.type === 'member-joined' || c.type === 'member-recovered') && !inRing) this.replans.scheduleRejoin(c.name);
      this.waits.poke();
    });
    session.on('disconnected', (memberId) => {
      this.replans.membershipChanged();
      if (this.plannedIds.includes(memberId)) this.replans.request(`${this.memberName(memberId)} disconnected`, true);
      this.waits.poke();
    });
    session.on('link', (l) => {
      const ring = this.ring;
      if (l.state === 'up') {
        for (const peer of [l.a, l.b]) if (peer !== 0) ring?.engine.attach(peer);
      } else if ((l.state === 'closed' || l.state === 'failed') && ring !== undefined && isRingPair(ring.order, l.a, l.b)) {
        for (const peer of [l.a, l.b]) if (peer !== 0) this.replans.suspect(peer);
        this.replans.request(`the ring link between ${this.peerName(l.a)} and ${this.peerName(l.b)} went down`, true);
      }
      this.waits.poke();
    });
  }

  status(): SessionHostStatus {
    const { phase, recovery, recoveries, waitingUntil, error } = this.ringPhase;
    return {
      phase,
      epoch: this.ring?.generation ?? 0,
      recovery: recovery && { ...recovery },
      recoveries: recoveries.map((r) => ({ ...r })),
      waitingUntil,
      session: this.session.status(),
      plan: this.plan,
      stages: this.stages.list(),
      timing: ringTiming(this.ring?.engine.timings ?? [], this.ring?.engine.inFlight ?? 0),
      kv: this.pool && { freeBlocks: this.pool.freeBlocks, totalBlocks: this.pool.totalBlocks, cachedBlocks: this.generator?.promptCacheStats?.blocks ?? 0 },
      promptCache: this.generator?.promptCacheStats,
      speculative: this.generator?.speculation?.stats(),
      requests: { ...this.backend.counts },
      drift: this.drift.status(),
      standby: this.hostStandby?.status(),
      error: error && { code: error.code, message: error.message },
    };
  }

  /** Gathers members, plans, loads and attaches the ring; resolves once serving. */
  async form(signal?: AbortSignal): Promise<void> {
    try {
      await gatherMembers(this.gatherView, this.opts.expect, this.opts.settleMs ?? 3000, signal);
      await this.serveFirstRing(signal);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.dispatch({ type: 'forming-failed', error: err });
      this.emit('error', err);
      throw err;
    }
  }

  async close(): Promise<void> {
    this.dispatch({ type: 'closed' });
    this.replans.stop();
    this.waits.poke();
    await this.hostStandby?.stop();
    this.ring?.engine.retire(new KiwiError('SESSION_ENDED', 'The host is closing.'));
    await this.backend.close();
    await this.replans.settled();
    await this.opts.drafter?.dispose();
    for (const s of [this.ring?.first, this.head]) await s?.dispose();
    this.ring = undefined;
    this.head = undefined;
    await this.session.close();
  }

  /** The one place the ring's phase changes (ring-phase.ts). */
  private dispatch(event: RingPhaseEvent): void {
    this.ringPhase = applyPhase(event, this.ringPhase);
  }

  private get closed(): boolean {
    return this.ringPhase.phase === 'closed';
  }

  /** What the re-plan driver sees of this host and does through it. */
  private replanHost(): ReplanHost {
    return {
      options: this.opts,
      state: () => this.ringPhase,
      dispatch: (event) => this.dispatch(event),
      emit: this.emit.bind(this),
      generator: () => this.generator,
      ring: () => this.ring,
      adopt: (ring) => void (this.ring = ring),
      buildRing: () => this.buildRing(this.eligibleMembers(), this.model!),
      planOrder: () => this.planFor(this.eligibleMembers(), this.model!).order,
      unchanged: (reason) => this.drift.unchanged(reason),
      until: (ready, what, timeoutMs) => this.waits.until(ready, what, timeoutMs),
      poke: () => this.waits.poke(),
      activePeers: () => this.activeMembers().map((m) => m.peer),
      hasUnplannedMember: () => this.hasUnplannedMember(),
      failedMembers: () => this.stages.failedMembers(),
      releaseLeavers: (inRing) => this.releaseLeavers(inRing),
      bytesMoved: () => this.stages.bytesMoved(),
    };
  }

  private activeMembers(): SessionStatus['members'] {
    return this.session.status().members.filter((m) => m.state === 'active' && m.connected);
  }

  /** Members a plan may use: active, connected, not on their way out, not failing to load. */
  private eligibleMembers(): MemberView[] {
    return this.activeMembers().filter((m) => !this.leaving.has(m.memberId) && !this.replans.failedLoads.has(m.memberId) && !this.offenders.has(m.memberId));
  }

  private memberName(memberId: string): string {
    return this.session.status().members.find((m) => m.memberId === memberId)?.name ?? 'a member';
  }

  private peerName(peer: number): string {
    if (peer === 0) return this.opts.hostName ?? 'the host';
    return this.session.status().members.find((m) => m.peer === peer)?.name ?? `peer ${peer}`;
  }

  private planFor(members: readonly MemberView[], model: LoadedModel): { plan: PlanJson; order: RingStage[] } {
    // A member short of memory is planned with what it can give; one that cannot hold a block sits out.
    const usable = members.filter((m) => (this.memoryLimits.get(m.memberId) ?? Number.POSITIVE_INFINITY) >= this.opts.modelSizes.blockBytes && this.budgets.verdict(m, model.shape.maxPositions) !== 'refused')
      // Filtering the last ring's punches showed (edge-report.ts) and the addresses predict each link's kind.
      .map((m) => ({ ...m, capabilities: withPunchFiltering(m.capabilities, m.peer, this.session.status()) }));
    return planSessionRing({
      members: usable, memoryLimits: this.memoryLimits, measuredBlockMs: this.drift.blockMs, measuredHopMs: this.drift.hopMs, moveMargin: this.drift.moveMargin, growInPlace: this.drift.growInPlace, serving: this.ring, standbyHolds: this.standby.holds, model: this.opts.modelSizes, context: model.shape.maxPositions,
      concurrency: this.opts.concurrency ?? 1, hostName: this.opts.hostName ?? 'host', hostDevice: this.hostDeviceLeft(), links: this.session.status().links,
      hostCapabilities: this.session.natCapabilities, ...(this.opts.cutMinBytes !== undefined ? { cutMinBytes: this.opts.cutMinBytes } : {}),
    });
  }

  /** The host's device less what the draft model holds (the planner gives the host's stage the rest). */
  private hostDeviceLeft(): SessionHostOptions['hostDevice'] {
    const device = this.opts.hostDevice;
    const drafter = this.opts.drafter;
    if (device === undefined || drafter === undefined) return device;
    return { ...device, memoryBytes: Math.max(0, device.memoryBytes - drafter.residentBytes) };
  }

  /** Once the ring serves with every resumed stream caught up: the host's standby layers, after its blocks. */
  private startHostStandby(): void {
    const model = this.model;
    const hostEnd = this.ring?.order[0]?.end;
    if (this.hostStandby === undefined || model === undefined || hostEnd === undefined) return;
    if (this.ringPhase.phase !== 'serving' || this.generator?.catchingUp === true) return;
    this.hostStandby.start(model.file, model.shape, hostEnd);
  }

  private stageOptions(): { cache?: ShardCache; provider?: ExecutionProvider; threads?: number; weightLayout?: WeightLayout } {
    const { cache, provider, threads, weightLayout } = this.opts;
    return {
      ...(cache !== undefined ? { cache } : {}),
      ...(provider !== undefined ? { provider } : {}),
      ...(threads !== undefined ? { threads } : {}),
      ...(weightLayout !== undefined ? { weightLayout } : {}),
    };
  }

  private async serveFirstRing(signal?: AbortSignal): Promise<void> {
    this.dispatch({ type: 'planning-started' });
    const file = await openGguf(this.opts.modelPath);
    const maxPositions = this.opts.maxPositions;
    const shape = await modelShapeFromGguf(file, maxPositions !== undefined ? { maxPositions } : {});
    const model: LoadedModel = { file, shape, fingerprint: await modelFingerprint(file) };
    this.model = model;
    const tokenizer = createTokenizer(file.metadata);
    const ring = await this.buildRing(this.activeMembers(), model, signal);
    this.ring = ring;
    // Per position: K and V of every layer over the ring (f32) and the rows each stage keeps (stage-keep.ts), for admission.
    const bytesPerToken = 2 * shape.blockCount * shape.kvHeads * attentionHeadDim(shape) * 4 + ring.order.length * keptRowBytes(shape.hidden);
    const blockTokens = 16;
    const budgetBlocks = Math.floor((this.opts.kvBudgetBytes ?? 1024 ** 3) / (bytesPerToken * blockTokens));
    const pool = new KvBlockPool(Math.max(Math.ceil(shape.maxPositions / blockTokens), budgetBlocks), blockTokens, bytesPerToken);
    this.pool = pool;
    this.generator = new RingGenerator(ring.engine, pool, shape.maxPositions, {
      maxBatch: this.opts.maxBatch ?? 8,
      maxInFlight: this.opts.maxInFlight ?? ring.order.length,
      promptCacheBytes: this.opts.promptCacheBytes ?? 0,
      ...(this.opts.speculative !== undefined ? { speculative: this.opts.speculative } : {}),
      ...(this.opts.drafter !== undefined ? { drafter: this.opts.drafter } : {}),
      ...(this.opts.keepCaches === false ? { keepCaches: false } : {}),
      onRingFault: (err) => this.replans.request(err.message, true),
    });
    this.backend.attach({ file, tokenizer, generator: this.generator, contextTokens: shape.maxPositions });
    this.dispatch({ type: 'first-ring-served' });
    this.emit('serving');
    // Members that joined, or ran short of memory, while the first ring formed are planned now.
    if (this.memoryLimits.size > 0) this.replans.scheduleRejoin('a member', true);
    else if (this.hasUnplannedMember()) this.replans.scheduleRejoin('a member');
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
  private async buildRing(members: MemberView[], model: LoadedModel, signal?: AbortSignal): Promise<ServedRing> {
    // The disk and a core go to this re-plan's loads: a standby build under way finishes its layer (at most one).
    await this.hostStandby?.stop();
    const { plan, order } = this.planFor(members, model);
    // The host serves the head; the blocks run on members, so a ring needs at least one.
    if (order.length < 2) throw new KiwiError('PLAN_INSUFFICIENT_MEMORY', 'No member is left to run the model\'s blocks.');
    const epoch = ++this.epoch;
    this.plan = plan;
    this.emit('plan', plan);
    const memberIds = ringMemberIds(order, members);
    this.plannedIds = memberIds;
    // A member planned out reads none of the model's bytes any more.
    await this.opts.weightsHttp?.tokens.retain(memberIds);
    this.session.setRingOrder(memberIds);
    await ringLinksUp(this.gatherView, members, signal);

    if (this.ring === undefined) this.dispatch({ type: 'loading-started' });
    const { file, shape, fingerprint } = model;
    const assignment = assignRing({
      epoch, order, members, links: this.session.status().links, hidden: shape.hidden, wirePolicy: this.opts.wirePolicy ?? DEFAULT_WIRE_POLICY, hostName: this.opts.hostName ?? 'host',
      model: { fingerprint, name: basename(this.opts.modelPath), fileBytes: file.fileSize, ...(this.opts.modelUrl !== undefined ? { url: this.opts.modelUrl } : {}) },
      maxPositions: shape.maxPositions,
      ...(this.opts.weightLayout !== undefined ? { layout: this.opts.weightLayout } : {}),
    });
    const stages = this.stages.assign(assignment);
    for (const { memberId, stage, message } of assignment.assigns) {
      const spans = await this.spanHashes.hash(stageSpans(file, stage));
      this.weights.plan(memberId, spans);
      this.sendTo(memberId, message);
      // Its own token for the host's range server, good for exactly these spans (weights-http.ts).
      const served = this.opts.weightsHttp;
      const http = served && { urls: served.urls, token: await served.tokens.grant(memberId, spans) };
      this.sendTo(memberId, { kind: 'weights-plan', epoch, spans, ...(http !== undefined ? { http } : {}) });
    }
    // The host's own stages load while the members load theirs; unchanged ones are kept.
    const old = this.ring?.first;
    const hostLoadAt = performance.now();
    const blocks = hostBlocks(order[0]!.end, old?.ranges, order[0]!.cuts);
    // The first stage replays generated tokens in one pass after a re-plan, as members do (replay.ts).
    const openAll = async (ranges: ReadonlyArray<LayerRange | undefined>): Promise<Array<Stage | undefined>> => {
      const opened: Array<Stage | undefined> = [];
      try {
        for (const r of ranges) opened.push(r && (await Stage.open(file, shape, { start: r.start, end: r.end, head: false }, { ...this.stageOptions(), replayInputs: true })));
      } catch (err) {
        for (const o of opened) await o?.dispose();
        throw err;
      }
      return opened;
    };
    // A reshaped stage keeps the running sessions (their prepacked weights) inside its new range and
    // opens the added blocks beside them; the old stage stays whole until the ring is ready.
    let first: SegmentedStage | undefined;
    if (blocks.kind === 'keep') first = old;
    else if (blocks.kind === 'reshape') {
      const [before, after] = await openAll([blocks.reshape.before, blocks.reshape.after]);
      first = old!.reshaped(blocks.reshape.keep, before, after);
    } else if (blocks.kind === 'open') first = new SegmentedStage((await openAll(blocks.ranges)) as Stage[]);
    this.head ??= await Stage.open(file, shape, { start: shape.blockCount, end: shape.blockCount, head: true }, this.stageOptions());
    const openedLayers = blocks.kind === 'open' ? layersIn(blocks.ranges) : blocks.kind === 'reshape' ? layersIn([blocks.reshape.before, blocks.reshape.after]) : 0;
    const hostStage = hostStageReady(stages.get(0)!, blocks.kind === 'keep', { loadMs: performance.now() - hostLoadAt, segments: first?.segments.length ?? 0, openedLayers });
    stages.set(0, hostStage);
    this.emit('ready', { ...hostStage });
    // A re-plan serves the new ring once every member's weights are in: a member still opening its
    // sessions queues the steps sent to it, so the stages before it rebuild their requests meanwhile
    // (a load that fails later is a fault of the served ring: stageLoadFailed). The first ring waits
    // for every stage to be ready.
    const pipelined = this.ring !== undefined && this.opts.pipelinedRecovery !== false;
    try {
      await this.waits.until(
        () => {
          checkStillHere(this.session, members);
          const { failed, ready, accepting } = ringLoad(stages);
          if (failed !== undefined) throw this.ringPhase.error ?? new KiwiError('RING_NOT_READY', `${failed.name} could not load layers ${failed.start}-${failed.end}.`);
          return pipelined ? accepting : ready;
        },
        pipelined ? 'every member to receive its layers' : 'every member to load its layers',
        this.opts.readyTimeoutMs ?? 600_000,
        signal,
      );
    } catch (err) {
      // The running stage stays as it was: a reshaped one gives back only the added segments.
      await first?.disposeExcept(old);
      throw err;
    }
    await old?.disposeExcept(first);
    const engine = new RingEngine({ link: (peer) => this.session.ringLink(peer) }, {
      epoch, first, head: this.head, ...assignment.engine,
      // Requests rebuilt on this ring skip the blocks the host's stage kept of them (stage-keep.ts).
      kept: this.ring?.engine.handOver(),
      maxRows: this.opts.maxBatch ?? 8,
      onBroken: (err) => this.replans.request(err.message, true),
      onPeerFault: (peer, fault, err) => this.onPeerFault(peer, fault, err),
      onTiming: (t) => {
        this.lastStepAt = performance.now();
        this.drift.onStep(t);
      },
    });
    return { epoch, generation: (this.ring?.generation ?? 0) + 1, order, memberIds, first, engine };
  }

  /**
   * A member could not load its stage. While the ring is being built, its wait throws the error; once
   * served (a pipelined re-plan adopts it while stages still open) it is a fault: the ring is
   * re-planned without that member.
   */
  private stageLoadFailed(error: KiwiError): void {
    this.dispatch({ type: 'stage-load-failed', error });
    if (this.ring?.epoch !== this.epoch) return;
    for (const id of this.stages.failedMembers()) this.replans.failedLoads.add(id);
    this.replans.request(error.message, true);
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
    this.replans.request(`${name} sent malformed ring data`, true);
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
      if (this.plannedIds.includes(memberId) || this.ringPhase.phase === 'recovering' || this.ringPhase.phase === 'waiting') {
        this.replans.request(`${this.memberName(memberId)} is leaving`, false);
      } else {
        this.leaving.delete(memberId);
        this.session.sendPipeline(memberId, { kind: 'released' });
      }
      return;
    }
    if (body.kind === 'memory') {
      const name = this.memberName(memberId);
      if (body.memoryBytes === null) this.memoryLimits.delete(memberId);
      else this.memoryLimits.set(memberId, body.memoryBytes);
      this.replans.request(body.memoryBytes === null ? `${name} has memory to spare again` : `${name} is short of memory`, false);
      return;
    }
    if (body.kind === 'peer-fault') {
      if (peerFaultAccepted(this.ring, this.stages.peerOf(memberId), body)) {
        this.onPeerFault(body.peer, body.fault, new KiwiError(body.fault === 'malformed' ? 'RING_PEER_MALFORMED' : 'RING_PEER_NUMERIC', `${body.code}: ${body.message}`));
      }
      return;
    }
    if (body.kind === 'standby-request' || body.kind === 'holds') {
      void this.standby.onMessage(memberId, body).catch((err: unknown) => this.emit('warning', new KiwiError('WEIGHTS_TRANSFER_FAILED', `Standby layers could not be planned: ${String(err)}`)));
      return;
    }
    if (this.stages.report(memberId, body, this.epoch)) this.waits.poke();
  }
}
