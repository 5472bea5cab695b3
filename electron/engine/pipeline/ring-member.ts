// A member's part of the ring: takes its assignment from the host, obtains its weights
// (weights-receipt.ts: its own copy of the model, an earlier transfer, HTTP range requests to the
// model's URL when the host names one, or streamed from the host now), opens its Stage, and then
// runs every step that arrives from its ring neighbour, sending the result to the next one. Steps
// run one at a time in arrival order, so each request's KV cache grows in order; per-request caches
// live here until a `free` event (request ended or cancelled) passes through.
// A re-plan sends a new assignment (a new ring epoch): the member drops the old epoch's caches and
// any of its steps still arriving, keeps its stage when the layers did not change, and otherwise
// loads the new range (the layers it holds stay on disk, each once: built, or received until built). handBack() leaves gracefully:
// the host re-plans without this member before it goes.
// What arrives from the previous stage is checked before it runs (ring-step-input.ts: tensor-frame.ts
// limits, the wire the link agreed, rows that fit their caches). Malformed data ends that link with an error frame,
// a `warning`, and a `peer-fault` report so the host plans without the sender; NaN or infinite
// activations are reported as a precision problem. Nothing a peer sends throws out of a handler.
// With --standby-gb, standby-member.ts keeps the layers beside its range on disk after each load.
// Over ~400 lines: the assignment, the weights, standby and the ring steps of one stage meet here.
import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { freeMemoryReader, watchFreeMemory, type MemoryWatch } from '../device/memory-watch.js';
import { isKiwiError, KiwiError } from '../errors.js';
import { ProgressRate } from '../progress-rate.js';
import type { ExecutionProvider } from '../ort/session.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import { PrefixKvStore } from '../runtime/prefix-cache-kv.js';
import { forwardKeeping, KeptStage, outputsFor, StageOutputs } from '../runtime/stage-keep.js';
import type { ShardCache } from '../runtime/shard-cache.js';
import { Stage, type StageInput } from '../runtime/stage.js';
import { layersIn, SegmentedStage, stageChange, type SegmentCaches } from '../runtime/stage-segments.js';
import { freeCache } from '../runtime/kv-store.js';
import type { LayerRange } from '../runtime/layer-range.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { MemberSession } from '../session/member.js';
import { encodeStepFrame, firstNonFinite, type WireOptions } from '../transport/tensor-frame.js';
import type { SecureLink } from '../transport/secure-link.js';
import { budgetTooSmallError } from './member-budget.js';
import {
  Assign, decodeWeightsChunk, encodeRingEvent, encodeRingStep, HostToMemberBody, parsePipelineBody,
  type MemberToHostBody,
} from './ring-protocol.js';
import { checkStepInput, malformedFault, StepError, stepFailed, type StepInput } from './ring-step-input.js';
import { StandbyKeeper, type StandbyOptions, type StandbyStatus } from './standby-member.js';
import { layerRanges } from './standby.js';
import { OpeningGate } from './opening-gate.js';
import { planBytes, WeightsPlans, WeightsReceipt, type WeightsSource } from './weights-receipt.js';
import type { WeightsPlan } from './ring-protocol.js';

/**
 * How long a stage must have been quiet before a standby layer is built: a build takes a core for
 * about a second a layer at 8B, which a recovery's replays and the streams after it should not share.
 */
const STANDBY_IDLE_MS = 2000;

export interface RingMemberOptions {
  /** This member's own copy of the model, if it has one (used when its fingerprint matches). */
  modelPath?: string;
  /** Where partial models received from the host are kept. */
  weightsDir: string;
  cache?: ShardCache;
  provider?: ExecutionProvider;
  threads?: number;
  /** Largest step frame accepted (decoded). Default: what the stage's shape allows (a prefill of its context, or 64 rows). */
  maxFrameBytes?: number;
  /**
   * Free memory to leave to this machine's other programs: when less is free, the member asks the
   * host for fewer layers (and for its full share again once memory is back).
   */
  keepFreeBytes?: number;
  /** How free memory is read (default: the provider's device) and how often. */
  readFreeBytes?: () => Promise<number>;
  memoryCheckMs?: number;
  /** Standby layers beside its range, kept on disk within a budget (standby-member.ts; --standby-gb). */
  standby?: StandbyOptions;
  /**
   * A stage runs in the segments the plan cuts it into, reshaped rather than reopened where that
   * gives them (stage-segments.ts). Default yes; off under a memory budget (--memory-mb), which
   * admits one session's scratch: the stage then runs in one session.
   */
  growInPlace?: boolean;
}

export interface RingMemberEvents {
  assigned: [a: { start: number; end: number; head: boolean }];
  /** At most a few a second (engine/progress-rate.ts), always the final one; rate in bytes/s, null until measured. */
  'weights-progress': [p: { receivedBytes: number; totalBytes: number; bytesPerSecond: number | null; etaSeconds: number | null; final: boolean }];
  /**
   * transferMs: obtaining the weights (first byte asked for to the last one hashed and on disk), within loadMs;
   * segments: the sessions the stage runs in (more than one once reshaped or opened split, stage-segments.ts);
   * openedLayers: the layers it opened anew (a reshaped stage opens only those it added).
   */
  ready: [r: { epoch: number; source: WeightsSource; transferredBytes: number; loadMs: number; transferMs?: number; segments: number; openedLayers: number }];
  /** Free memory fell below the reserve (low) or came back; memoryBytes: what this member asked to be planned with. */
  memory: [m: { low: boolean; freeBytes: number; memoryBytes: number | null }];
  /** The host will not plan this member (its --memory-mb cannot hold one layer): the member should stop. */
  refused: [err: KiwiError];
  /** The standby layers of the current range are on disk (or their fetch stopped on a failure: a warning came first). */
  standby: [s: StandbyStatus];
  /** Something that did not stop the member, e.g. the model's URL failed and the host streams the weights instead. */
  warning: [err: KiwiError];
  error: [err: KiwiError];
}

export class RingMember extends EventEmitter<RingMemberEvents> {
  private stage: SegmentedStage | undefined;
  /** What the open stage runs: the model, context and layout (a re-plan that keeps them and the layers keeps the stage, one that grows its layers grows it). */
  private stageModel = '';
  private assignment: Assign | undefined;
  private released: (() => void) | undefined;
  private memoryWatch: MemoryWatch | undefined;
  /** Bytes of the weights this member's current range reads (its memory need, with the KV cache on top). */
  private rangeBytes = 0;
  private readonly caches = new Map<number, SegmentCaches>();
  /** The rows this stage sent on, per request; and the previous stage's requests until rebuilt here (stage-keep.ts). */
  private outputs: StageOutputs | undefined;
  private keptRequests: KeptStage | undefined;
  /** This stage's part of the prompt cache (runtime/prefix-cache.ts); a new epoch starts without entries. */
  private prefixes: PrefixKvStore | undefined;
  private queue: Promise<void> = Promise.resolve();
  /** The assignment whose weights are in while its sessions open: its steps wait for them. */
  private readonly opening = new OpeningGate<Assign>();
  /** The assignments being loaded (close() waits for them: a load holds sessions until it ends). */
  private readonly loading = new Set<Promise<void>>();
  private readonly weights: WeightsReceipt;
  private readonly standby: StandbyKeeper | undefined;
  /** Whether the open stage was loaded from this member's own copy of the model (it holds every layer). */
  private stageLocal = false;
  /** The ready assignment whose holds the host hears, and the reports in flight (in order). */
  private held: { a: Assign; blockCount: number; local: boolean } | undefined;
  private holdsReports: Promise<void> = Promise.resolve();
  private readonly plans = new WeightsPlans();
  private readonly attached = new WeakSet<SecureLink>();
  private closed = false;
  /** 0..1 while the weights arrive and the stage opens; 1 once ready. */
  private loadFraction = 0;
  private readonly weightsRate = new ProgressRate();
  /** Compute times (ms) of the recent steps of this stage, for status displays. */
  private readonly recentStepMs: number[] = [];
  /** When the stage last ran a step (performance.now()): standby builds wait for a quiet stage. */
  private lastStepAt = 0;

  constructor(
    private readonly session: MemberSession,
    private readonly opts: RingMemberOptions,
  ) {
    super();
    const cache = opts.cache;
    this.weights = new WeightsReceipt({ ...opts, ...(cache !== undefined ? { built: (fp: string) => cache.builtLayerTags(fp) } : {}) }, {
      send: (body) => this.send(body),
      progress: (receivedBytes, totalBytes) => {
        // The transfer is most of the loading; opening the stage is the rest.
        this.loadFraction = totalBytes > 0 ? 0.9 * Math.min(1, receivedBytes / totalBytes) : 0.9;
        this.send({ kind: 'weights-progress', receivedBytes, totalBytes });
        this.emitProgress(receivedBytes, totalBytes);
      },
      warning: (err) => this.emit('warning', err),
    });
    this.standby = opts.standby && new StandbyKeeper({ ...opts.standby, weightsDir: opts.weightsDir, ...(cache !== undefined ? { cache } : {}), ...(opts.provider !== undefined ? { provider: opts.provider } : {}) }, {
      send: (body) => this.send(body), heldChanged: () => this.reportHolds(), idle: (signal) => this.whenIdle(signal),
      done: (s) => this.emit('standby', s), warning: (err) => this.emit('warning', err),
    });
    session.on('pipeline', (body) => this.onControl(body));
    session.on('pipeline-bytes', (bytes) => {
      try {
        const chunk = decodeWeightsChunk(bytes);
        this.weights.chunk(chunk.offset, chunk.data);
      } catch (err) {
        if (!isKiwiError(err)) throw err;
        this.emit('error', err);
      }
    });
    session.on('link', (s) => {
      if (s.state === 'up') this.attach(s.peer);
    });
  }

  /** Statistics for status displays. */
  status(): { epoch: number | undefined; start: number | undefined; end: number | undefined; ready: boolean; requests: number; loadFraction: number; stageMs: number | null; standby?: StandbyStatus } {
    const n = this.recentStepMs.length;
    return {
      epoch: this.assignment?.epoch, start: this.assignment?.start, end: this.assignment?.end, ready: this.stage !== undefined, requests: this.caches.size,
      loadFraction: this.stage !== undefined ? 1 : this.loadFraction,
      stageMs: n === 0 ? null : this.recentStepMs.reduce((a, x) => a + x, 0) / n,
      ...(this.standby !== undefined ? { standby: this.standby.status() } : {}),
    };
  }

  /**
   * Stops contributing gracefully: asks the host to re-plan without this member and resolves once
   * the host released it (or after `timeoutMs`, or at once when it holds no layers).
   */
  async handBack(timeoutMs = 15_000): Promise<void> {
    if (this.assignment === undefined || this.closed) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, timeoutMs);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.released = done;
      try {
        this.send({ kind: 'leaving' });
      } catch (err) {
        if (!isKiwiError(err)) throw err;
        done();
      }
    });
    this.released = undefined;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.memoryWatch?.stop();
    // A load in progress ends now: nothing will answer its transfer or its plan once this member
    // has left, and the sessions it holds (a reshaped stage's kept segments) go with it.
    const leaving = new KiwiError('SESSION_ENDED', 'This member left the session.');
    this.weights.close(leaving);
    this.plans.cancel(leaving);
    await Promise.all(this.loading);
    await this.standby?.pause();
    await this.queue;
    this.keptRequests?.free();
    await this.stage?.dispose();
    this.stage = undefined;
  }

  private send(body: MemberToHostBody): void {
    this.session.send({ type: 'pipeline', body: body as Record<string, unknown> });
  }

  private onControl(raw: Record<string, unknown>): void {
    let body: HostToMemberBody;
    try {
      body = parsePipelineBody(HostToMemberBody, raw);
    } catch (err) {
      if (!isKiwiError(err)) throw err;
      this.emit('error', err);
      return;
    }
    switch (body.kind) {
      case 'assign': {
        const load = this.onAssign(body).catch((err: unknown) => this.fail(err, body.epoch)).finally(() => this.loading.delete(load));
        this.loading.add(load);
        return;
      }
      case 'weights-plan':
        this.plans.put(body);
        return;
      case 'released':
        this.released?.();
        return;
      case 'budget-too-small':
        this.emit('refused', budgetTooSmallError(body));
        return;
      case 'standby-plan':
        this.standby?.plan(body);
        return;
    }
  }

  private fail(cause: unknown, epoch?: number): void {
    // A load that failed for any reason is reported, never a crash of the member.
    const err = isKiwiError(cause) ? cause : new KiwiError('RING_STAGE_FAILED', `Could not load the assigned layers: ${String(cause instanceof Error ? cause.message : cause).slice(0, 300)}`);
    // A load that a newer assignment replaced, or that ended as this member left, is not a failure.
    if (this.closed || (epoch !== undefined && epoch !== this.assignment?.epoch)) return;
    this.emit('error', err);
    try {
      this.send({ kind: 'failed', ...(epoch !== undefined ? { epoch } : {}), code: err.code, message: err.message.slice(0, 1000) });
    } catch (sendErr) {
      if (!isKiwiError(sendErr)) throw sendErr;
    }
  }

  /**
   * The running stage's requests wait for the next assignment's stage, which adopts those it
   * rebuilds where it keeps their segments (stage-keep.ts); what an earlier one kept goes.
   */
  private keepRequests(): void {
    this.keptRequests?.free();
    this.keptRequests = this.stage !== undefined && this.outputs !== undefined ? new KeptStage(this.stage, new Map(this.caches), this.outputs) : undefined;
    if (this.keptRequests === undefined) for (const c of this.caches.values()) for (const segment of c) freeCache(segment);
    this.caches.clear();
    this.outputs = undefined;
  }

  /** Frees every request's cache and the prompt cache (a new assignment starts without them). */
  private dropCaches(): void {
    for (const c of this.caches.values()) for (const segment of c) freeCache(segment);
    this.caches.clear();
    this.prefixes?.clear();
    this.prefixes = undefined;
  }

  private async onAssign(a: Assign): Promise<void> {
    try {
      await this.loadStage(a);
    } finally {
      // Opened, failed or replaced: the steps waiting for this stage look again.
      this.opening.end(a);
    }
  }

  private async loadStage(a: Assign): Promise<void> {
    if (a.start >= a.end) throw new KiwiError('RING_PROTOCOL', `The host assigned an empty layer range ${a.start}-${a.end}.`);
    const t0 = performance.now();
    // From now on steps of the old epoch are dropped and a transfer for it ends.
    this.assignment = a;
    this.keepRequests();
    this.dropCaches();
    this.recentStepMs.length = 0;
    this.weights.cancel(new KiwiError('RING_REPLAN', 'The host re-planned the ring during the transfer.'));
    // Standby fetches wait while the new range loads (they would share its disk and link).
    await this.standby?.pause();
    await this.queue;
    if (this.assignment !== a || this.closed) return;
    this.dropCaches();
    this.send({ kind: 'assigned', epoch: a.epoch, start: a.start, end: a.end });
    this.emit('assigned', { start: a.start, end: a.end, head: false });
    this.startMemoryWatch();
    const model = JSON.stringify([a.model.fingerprint, a.maxPositions, a.layout ?? 'exact']);
    const running = this.stage !== undefined && this.stageModel === model ? this.stage : undefined;
    // Keep the running stage, reshape it (keep its segments inside the new range, open the layers
    // added beside them), or open the range anew in segments at the plan's cuts.
    const change = stageChange(running?.ranges, a, this.opts.growInPlace === false ? [] : (a.cuts ?? []));
    if (running !== undefined && change.kind === 'keep') {
      // The same layers as before: the running stage serves the new ring (only the caches went).
      const kept = await this.plans.next(a.epoch);
      this.rangeBytes = planBytes(kept);
      this.prefixes = new PrefixKvStore();
      this.outputs = outputsFor(running, this.keptRequests);
      const loadMs = performance.now() - t0;
      this.send({ kind: 'ready', epoch: a.epoch, source: 'kept', transferredBytes: 0, loadMs });
      this.emit('ready', { epoch: a.epoch, source: 'kept', transferredBytes: 0, loadMs, segments: running.segments.length, openedLayers: 0 });
      if (this.assignment === a) this.standbyAfterReady(a, kept, running.shape.blockCount, this.stageLocal);
      return;
    }
    const old = this.stage;
    this.stage = undefined;
    this.stageModel = '';
    const shaped = change.kind === 'reshape' ? change.reshape : undefined;
    const kept = shaped !== undefined ? running : undefined;
    if (kept === undefined) {
      this.keptRequests?.free();
      this.keptRequests = undefined;
      await old?.dispose();
    } else {
      // The segments outside the new range go before the added ones open (their memory is planned for those).
      for (const s of kept.segments.filter((_, i) => i < shaped!.keep.from || i >= shaped!.keep.to)) await s.dispose();
    }
    let stage: SegmentedStage | undefined;
    let source: WeightsSource;
    let transferredBytes: number;
    let transferMs: number;
    let plan: WeightsPlan;
    try {
      this.loadFraction = 0;
      plan = await this.plans.next(a.epoch);
      this.rangeBytes = planBytes(plan);
      const obtainAt = performance.now();
      const obtained = await this.weights.obtain(a, plan);
      ({ source, transferredBytes } = obtained);
      transferMs = performance.now() - obtainAt;
      this.loadFraction = 0.9;
      // The host may serve the ring from now on (a pipelined re-plan): steps that come while the
      // sessions open wait for them (onRing).
      this.opening.begin(a);
      this.send({ kind: 'opening', epoch: a.epoch, source, transferredBytes });
      if (change.kind === 'open') stage = new SegmentedStage(await this.openSegments(a, plan, obtained.file, source, change.ranges) as Stage[]);
      else {
        const [before, after] = await this.openSegments(a, plan, obtained.file, source, [shaped!.before, shaped!.after]);
        stage = kept!.reshaped(shaped!.keep, before, after);
      }
    } finally {
      // The kept sessions go with a load that failed or was replaced.
      if (stage === undefined && kept !== undefined) {
        this.keptRequests?.free();
        this.keptRequests = undefined;
        for (const s of kept.segments.slice(shaped!.keep.from, shaped!.keep.to)) await s.dispose();
      }
    }
    if (this.closed || this.assignment !== a) {
      await stage.dispose();
      return;
    }
    this.stage = stage;
    this.outputs = outputsFor(stage, this.keptRequests);
    this.stageModel = model;
    this.stageLocal = source === 'local';
    this.prefixes = new PrefixKvStore();
    const loadMs = performance.now() - t0;
    this.send({ kind: 'ready', epoch: a.epoch, source, transferredBytes, loadMs });
    this.emit('ready', { epoch: a.epoch, source, transferredBytes, loadMs, transferMs, segments: stage.segments.length, openedLayers: layersIn(change.kind === 'open' ? change.ranges : [shaped!.before, shaped!.after]) });
    for (const s of this.session.linkStatuses()) if (s.state === 'up') this.attach(s.peer);
    this.standbyAfterReady(a, plan, stage.shape.blockCount, source === 'local');
  }

  /** Opens a segment of each range from the weights obtained for `a` (undefined for an undefined range). */
  private async openSegments(a: Assign, plan: WeightsPlan, file: GgufFile, source: WeightsSource, ranges: ReadonlyArray<LayerRange | undefined>): Promise<Array<Stage | undefined>> {
    const shape = await modelShapeFromGguf(file, { maxPositions: a.maxPositions });
    // A received model's layers are known to the shard cache by their spans' sha256; once built, their raw copy goes.
    const received = source !== 'local' && this.opts.cache !== undefined;
    const cacheSource = received ? await this.weights.cacheSource(a, file, plan) : undefined;
    const opened: Array<Stage | undefined> = [];
    try {
      for (const r of ranges) {
        if (r === undefined) {
          opened.push(undefined);
          continue;
        }
        // With the replay inputs: a re-plan's replay of generated tokens runs in one pass (runtime/replay.ts).
        opened.push(await Stage.open(file, shape, { start: r.start, end: r.end, head: false }, {
          replayInputs: true,
          ...(this.opts.cache !== undefined ? { cache: this.opts.cache } : {}),
          ...(cacheSource !== undefined ? { cacheSource } : {}),
          ...(this.opts.provider !== undefined ? { provider: this.opts.provider } : {}),
          ...(this.opts.threads !== undefined ? { threads: this.opts.threads } : {}),
          ...(a.layout !== undefined ? { weightLayout: a.layout } : {}),
        }));
      }
    } catch (err) {
      for (const s of opened) await s?.dispose();
      throw err;
    }
    if (received) await this.weights.releaseBuilt(a, file, plan);
    return opened;
  }

  /** A ready stage: the host hears what this member holds, and standby layers follow (a member with its own copy of the model holds every layer already). */
  private standbyAfterReady(a: Assign, plan: WeightsPlan, blockCount: number, local: boolean): void {
    this.held = { a, blockCount, local };
    this.reportHolds();
    if (!local) this.standby?.ready(a, plan);
  }

  /**
   * Tells the host every layer this member holds on disk, with or without standby: its stage, the
   * layers its shard cache keeps built from earlier ranges, its standby layers; with its own copy
   * of the model, all. The planner counts them as held, so a re-plan that hands them back plans
   * (and moves) nothing for them. Reports go out in order, each for the assignment still current.
   */
  private reportHolds(): void {
    const held = this.held;
    if (held === undefined) return;
    const { a, blockCount, local } = held;
    this.holdsReports = this.holdsReports.then(async () => {
      const built = local || this.opts.cache === undefined ? [] : (await this.opts.cache.builtLayers(a.model.fingerprint)).keys();
      if (this.assignment !== a || this.closed) return;
      const layers = local
        ? [{ start: 0, end: blockCount }]
        : layerRanges([...Array.from({ length: a.end - a.start }, (_, i) => a.start + i), ...built, ...(this.standby?.status().layers ?? [])].filter((L) => L < blockCount));
      this.send({ kind: 'holds', ranges: layers });
    }).catch((err: unknown) => {
      if (!isKiwiError(err)) this.emit('warning', new KiwiError('WEIGHTS_TRANSFER_FAILED', `The layers this member holds could not be listed for the host (re-plans may move them again): ${String(err)}`));
    });
  }

  /** Resolves once the stage has run no step for STANDBY_IDLE_MS (or on abort): background builds yield to the ring's work. */
  private async whenIdle(signal: AbortSignal): Promise<void> {
    for (let wait = 0; !signal.aborted && (wait = this.lastStepAt + STANDBY_IDLE_MS - performance.now()) > 0; ) {
      await sleep(wait, undefined, { signal }).catch(() => undefined);
    }
  }

  /** Once assigned layers, a member with a memory reserve watches free memory. */
  private startMemoryWatch(): void {
    const keepFreeBytes = this.opts.keepFreeBytes;
    if (keepFreeBytes === undefined || this.memoryWatch !== undefined) return;
    this.memoryWatch = watchFreeMemory({
      keepFreeBytes,
      readFreeBytes: this.opts.readFreeBytes ?? freeMemoryReader(this.opts.provider),
      ...(this.opts.memoryCheckMs !== undefined ? { intervalMs: this.opts.memoryCheckMs } : {}),
      onChange: (low, freeBytes) => {
        // What it holds now plus what is free beyond the reserve: the planner fits its range into that.
        const memoryBytes = low ? Math.max(0, this.rangeBytes + freeBytes - keepFreeBytes) : null;
        this.emit('memory', { low, freeBytes, memoryBytes });
        try {
          this.send({ kind: 'memory', memoryBytes });
        } catch (err) {
          if (!isKiwiError(err)) throw err;
        }
      },
    });
    void this.memoryWatch.check();
  }

  /** The weights-progress event at human rates (the host still gets every per-MiB message: its flow control). */
  private emitProgress(receivedBytes: number, totalBytes: number): void {
    const p = this.weightsRate.update(receivedBytes, totalBytes);
    if (p !== null) this.emit('weights-progress', { receivedBytes, totalBytes, bytesPerSecond: p.rate, etaSeconds: p.etaSeconds, final: p.final });
  }

  private attach(peer: number): void {
    const link = this.session.ringLink(peer);
    if (link === undefined || this.attached.has(link)) return;
    this.attached.add(link);
    link.onMessage((bytes) => {
      // Steps and events come from the previous stage only; whatever else arrives is not read.
      if (this.assignment?.prev !== peer) return;
      // Copy: the link may reuse its buffer, and the step runs later.
      const msg = bytes.slice();
      this.queue = this.queue.then(() => this.onRing(peer, link, msg)).catch((err: unknown) => {
        this.emit('error', isKiwiError(err) ? err : new KiwiError('RING_STAGE_FAILED', `A ring step failed: ${String(err)}`));
      });
    });
  }

  /** Handles one message of `peer` (the previous stage); never throws what the peer caused. */
  private async onRing(peer: number, link: SecureLink, msg: Uint8Array): Promise<void> {
    // A pipelined re-plan serves the ring while this stage's sessions open: its steps wait for them.
    if (this.stage === undefined) await this.opening.wait(this.assignment);
    const a = this.assignment;
    const stage = this.stage;
    // Nothing of the current epoch arrives before its weights are in: this is an older ring's traffic.
    if (a === undefined || stage === undefined || a.prev !== peer || link.closed) return;
    let input: StepInput | undefined;
    try {
      const adopt = (id: number, cap: number, keep: number): SegmentCaches | undefined => (this.outputs && this.keptRequests?.adopt(id, stage, cap, keep, this.outputs));
      input = await checkStepInput(a, stage, this.caches, msg, this.opts.maxFrameBytes, this.prefixes, adopt);
    } catch (err) {
      if (err instanceof StepError && err.kind === 'recoverable') {
        // Caches out of step with the host's view (nobody's offence): the step's requests are recomputed.
        this.emit('error', err);
        await this.forward(a, stepFailed(a.epoch, err.step, err));
        return;
      }
      // The previous stage sent what no honest Kiwi sends: its link ends, the host hears who it was.
      const { cause, fault } = malformedFault(peer, err);
      link.fail(cause);
      this.emit('warning', fault);
      this.report(a, peer, 'malformed', fault);
      await this.forward(a, stepFailed(a.epoch, err instanceof StepError ? err.step : 0, fault)).catch(() => undefined);
      return;
    }
    if (input === undefined) return;
    if (input.kind === 'event') {
      const e = input.event;
      if (e.type === 'free') {
        for (const id of e.ids) this.outputs?.drop(id);
        this.keptRequests?.free(e.ids);
      }
      return this.forward(a, encodeRingEvent(e));
    }
    const { frame, meta, caches, batch, seq } = input;
    const t = frame.tensor;
    try {
      if (t.kind === 'hidden') {
        const bad = firstNonFinite(t.hidden);
        if (bad >= 0) throw this.numeric(a, peer, `The activations peer ${peer} sent for step ${meta.step} hold NaN or infinity (element ${bad}): a stage lost precision (fp16 overflow?).`);
      }
      const stageInput: StageInput = t.kind === 'ids' ? { kind: 'ids', ids: t.ids, batch, seq } : { kind: 'hidden', hidden: t.hidden, batch, seq };
      const t0 = performance.now();
      // A row rebuilt after a re-plan skips the segments that kept it (stage-keep.ts).
      const store = { outputs: this.outputs, kept: this.keptRequests };
      const out = await forwardKeeping(stage, stageInput, caches, meta.rows, store, meta.rows[0]?.replay === true ? { replay: true } : {});
      if (out.kind !== 'hidden') throw new Error('a member stage returned logits');
      const own = firstNonFinite(out.hidden);
      if (own >= 0) throw this.numeric(a, this.session.peer ?? 0, `Layers ${a.start}-${a.end} on this member produced NaN or infinity (element ${own}) for step ${meta.step}: a precision problem (fp16 overflow?).`);
      const wire: WireOptions = { encoding: a.encoding, zstd: a.zstd };
      // Each stage adds its compute time, so the host sees per-stage timing without another message.
      const stepMs = performance.now() - t0;
      this.lastStepAt = performance.now();
      this.recentStepMs.push(stepMs);
      if (this.recentStepMs.length > 64) this.recentStepMs.shift();
      const metadata = { ...frame.metadata, [`ms.${a.start}-${a.end}`]: stepMs.toFixed(3) };
      const frameOut = await encodeStepFrame({ metadata, tensor: { kind: 'hidden', hidden: out.hidden, dims: [batch, seq, stage.shape.hidden] } }, wire);
      await this.forward(a, encodeRingStep(frameOut));
    } catch (err) {
      // This stage could not run the step: its requests fail at the host (or are recomputed), the member goes on.
      const e = isKiwiError(err) ? err : new KiwiError('RING_STAGE_FAILED', `Layers ${a.start}-${a.end} could not run step ${meta.step}: ${String(err instanceof Error ? err.message : err).slice(0, 300)}`);
      await this.forward(a, stepFailed(a.epoch, meta.step, e));
      if (e.code !== 'RING_PEER_NUMERIC') this.emit('error', e);
    }
  }

  /** Reports NaN/Inf activations (a precision problem, not an offence) and returns the step's error. */
  private numeric(a: Assign, peer: number, message: string): KiwiError {
    const err = new KiwiError('RING_PEER_NUMERIC', message, { peer });
    this.emit('warning', err);
    this.report(a, peer, 'numeric', err);
    return err;
  }

  private report(a: Assign, peer: number, fault: 'malformed' | 'numeric', err: KiwiError): void {
    try {
      this.send({ kind: 'peer-fault', epoch: a.epoch, peer, fault, code: String(err.details.cause ?? err.code).slice(0, 64), message: err.message.slice(0, 1000) });
    } catch (sendErr) {
      if (!isKiwiError(sendErr)) throw sendErr;
    }
  }

  /**
   * Sends to the next stage of assignment `a`, waiting briefly for its link when it is being
   * (re)established; dropped when a re-plan replaced `a` meanwhile.
   */
  private async forward(a: Assign, bytes: Uint8Array): Promise<void> {
    const peer = a.next;
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (this.assignment !== a || this.closed) return;
      const link = this.session.ringLink(peer);
      if (link !== undefined && !link.closed) {
        link.send(bytes);
        return;
      }
      if (Date.now() > deadline) throw new KiwiError('RING_BROKEN', `The ring link to peer ${peer} is down; the host will re-plan the ring.`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}
