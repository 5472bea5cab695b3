// A member's part of the ring: takes its assignment from the host, obtains its weights (its own
// copy of the model, an earlier transfer, HTTP range requests to the model's URL when the host
// names one, or streamed from the host now), opens its Stage, and then
// runs every step that arrives from its ring neighbour, sending the result to the next one. Steps
// run one at a time in arrival order, so each request's KV cache grows in order; per-request caches
// live here until a `free` event (request ended or cancelled) passes through.
// A re-plan sends a new assignment (a new ring epoch): the member drops the old epoch's caches and
// any of its steps still arriving, keeps its stage when the layers did not change, and otherwise
// loads the new range (weights it already received stay on disk). handBack() leaves gracefully:
// the host re-plans without this member before it goes.
// What arrives from the previous stage is checked before it runs (tensor-frame.ts limits, the wire
// the link agreed, rows that fit their caches). Malformed data ends that link with an error frame,
// a `warning`, and a `peer-fault` report so the host plans without the sender; NaN or infinite
// activations are reported as a precision problem. Nothing a peer sends throws out of a handler.
import { EventEmitter } from 'node:events';
import { freeMemoryReader, watchFreeMemory, type MemoryWatch } from '../device/memory-watch.js';
import { isKiwiError, KiwiError } from '../errors.js';
import { ProgressRate } from '../progress-rate.js';
import { openGguf, type GgufFile } from '../model/gguf/gguf-reader.js';
import { modelShapeFromGguf } from '../runtime/decoder-shape.js';
import type { ExecutionProvider } from '../runtime/ort-session.js';
import { modelFingerprint, type ShardCache } from '../runtime/shard-cache.js';
import { Stage, type KvCache, type StageInput } from '../runtime/stage.js';
import type { MemberSession } from '../session/member.js';
import { decodeStepFrame, encodeStepFrame, firstNonFinite, maxStepFrameBytes, type WireOptions } from '../transport/tensor-frame.js';
import type { SecureLink } from '../transport/secure-link.js';
import { fetchSpans, PartialModel, type HashedSpan } from './member-weights.js';
import { budgetTooSmallError } from './member-budget.js';
import {
  Assign, decodeRingEvent, decodeWeightsChunk, encodeRingEvent, encodeRingStep, HostToMemberBody, parsePipelineBody, parseStepMetadata, RingKind,
  type MemberToHostBody, type RingEvent, type WeightsPlan,
} from './ring-protocol.js';

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
}

export interface RingMemberEvents {
  assigned: [a: { start: number; end: number; head: boolean }];
  /** At most a few a second (engine/progress-rate.ts), always the final one; rate in bytes/s, null until measured. */
  'weights-progress': [p: { receivedBytes: number; totalBytes: number; bytesPerSecond: number | null; etaSeconds: number | null; final: boolean }];
  ready: [r: { epoch: number; source: WeightsSource; transferredBytes: number; loadMs: number }];
  /** Free memory fell below the reserve (low) or came back; memoryBytes: what this member asked to be planned with. */
  memory: [m: { low: boolean; freeBytes: number; memoryBytes: number | null }];
  /** The host will not plan this member (its --memory-mb cannot hold one layer): the member should stop. */
  refused: [err: KiwiError];
  /** Something that did not stop the member, e.g. the model's URL failed and the host streams the weights instead. */
  warning: [err: KiwiError];
  error: [err: KiwiError];
}

type WeightsSource = 'local' | 'cache' | 'url' | 'host' | 'kept';

interface Transfer {
  plan: HashedSpan[];
  partial: PartialModel;
  missing: HashedSpan[];
  receivedBytes: number;
  totalBytes: number;
  lastReportedBytes: number;
  done: () => void;
  failed: (err: KiwiError) => void;
}

const PROGRESS_EVERY_BYTES = 1 << 20;

export class RingMember extends EventEmitter<RingMemberEvents> {
  private stage: Stage | undefined;
  /** What the open stage holds: layers, model and context (a re-plan that keeps them keeps the stage). */
  private stageKey = '';
  private assignment: Assign | undefined;
  private released: (() => void) | undefined;
  private memoryWatch: MemoryWatch | undefined;
  /** Bytes of the weights this member's current range reads (its memory need, with the KV cache on top). */
  private rangeBytes = 0;
  private readonly caches = new Map<number, KvCache>();
  private queue: Promise<void> = Promise.resolve();
  private transfer: Transfer | undefined;
  private pendingPlan: WeightsPlan | undefined;
  private planWaiter: ((plan: WeightsPlan) => void) | undefined;
  private readonly attached = new WeakSet<SecureLink>();
  private closed = false;
  /** 0..1 while the weights arrive and the stage opens; 1 once ready. */
  private loadFraction = 0;
  private readonly weightsRate = new ProgressRate();
  /** Compute times (ms) of the recent steps of this stage, for status displays. */
  private readonly recentStepMs: number[] = [];

  constructor(
    private readonly session: MemberSession,
    private readonly opts: RingMemberOptions,
  ) {
    super();
    session.on('pipeline', (body) => this.onControl(body));
    session.on('pipeline-bytes', (bytes) => {
      try {
        const chunk = decodeWeightsChunk(bytes);
        this.onChunk(chunk.offset, chunk.data);
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
  status(): { epoch: number | undefined; start: number | undefined; end: number | undefined; ready: boolean; requests: number; loadFraction: number; stageMs: number | null } {
    const n = this.recentStepMs.length;
    return {
      epoch: this.assignment?.epoch, start: this.assignment?.start, end: this.assignment?.end, ready: this.stage !== undefined, requests: this.caches.size,
      loadFraction: this.stage !== undefined ? 1 : this.loadFraction,
      stageMs: n === 0 ? null : this.recentStepMs.reduce((a, x) => a + x, 0) / n,
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
    await this.queue;
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
      case 'assign':
        void this.onAssign(body).catch((err: unknown) => this.fail(err, body.epoch));
        return;
      case 'weights-plan':
        if (this.planWaiter !== undefined) this.planWaiter(body);
        else this.pendingPlan = body;
        return;
      case 'released':
        this.released?.();
        return;
      case 'budget-too-small':
        this.emit('refused', budgetTooSmallError(body));
        return;
    }
  }

  private fail(cause: unknown, epoch?: number): void {
    // A load that failed for any reason is reported, never a crash of the member.
    const err = isKiwiError(cause) ? cause : new KiwiError('RING_STAGE_FAILED', `Could not load the assigned layers: ${String(cause instanceof Error ? cause.message : cause).slice(0, 300)}`);
    // A load that a newer assignment replaced is not a failure.
    if (epoch !== undefined && epoch !== this.assignment?.epoch) return;
    this.emit('error', err);
    try {
      this.send({ kind: 'failed', ...(epoch !== undefined ? { epoch } : {}), code: err.code, message: err.message.slice(0, 1000) });
    } catch (sendErr) {
      if (!isKiwiError(sendErr)) throw sendErr;
    }
  }

  private async onAssign(a: Assign): Promise<void> {
    if (a.start >= a.end) throw new KiwiError('RING_PROTOCOL', `The host assigned an empty layer range ${a.start}-${a.end}.`);
    const t0 = performance.now();
    // From now on steps of the old epoch are dropped and a transfer for it ends.
    this.assignment = a;
    this.caches.clear();
    this.recentStepMs.length = 0;
    this.transfer?.failed(new KiwiError('RING_REPLAN', 'The host re-planned the ring during the transfer.'));
    this.transfer = undefined;
    await this.queue;
    if (this.assignment !== a) return;
    this.caches.clear();
    this.send({ kind: 'assigned', epoch: a.epoch, start: a.start, end: a.end });
    this.emit('assigned', { start: a.start, end: a.end, head: false });
    this.startMemoryWatch();
    const key = JSON.stringify([a.start, a.end, a.model.fingerprint, a.maxPositions]);
    if (this.stage !== undefined && this.stageKey === key) {
      // The same layers as before: the running stage serves the new ring (only the caches went).
      this.rangeBytes = (await this.nextPlan(a.epoch)).spans.reduce((n, s) => n + s.bytes, 0);
      const loadMs = performance.now() - t0;
      this.send({ kind: 'ready', epoch: a.epoch, source: 'kept', transferredBytes: 0, loadMs });
      this.emit('ready', { epoch: a.epoch, source: 'kept', transferredBytes: 0, loadMs });
      return;
    }
    const old = this.stage;
    this.stage = undefined;
    this.stageKey = '';
    await old?.dispose();
    this.loadFraction = 0;
    const { file, source, transferredBytes } = await this.obtainWeights(a);
    this.loadFraction = 0.9;
    const shape = await modelShapeFromGguf(file, { maxPositions: a.maxPositions });
    const stage = await Stage.open(file, shape, { start: a.start, end: a.end, head: false }, {
      ...(this.opts.cache !== undefined ? { cache: this.opts.cache } : {}),
      ...(this.opts.provider !== undefined ? { provider: this.opts.provider } : {}),
      ...(this.opts.threads !== undefined ? { threads: this.opts.threads } : {}),
    });
    if (this.closed || this.assignment !== a) {
      await stage.dispose();
      return;
    }
    this.stage = stage;
    this.stageKey = key;
    const loadMs = performance.now() - t0;
    this.send({ kind: 'ready', epoch: a.epoch, source, transferredBytes, loadMs });
    this.emit('ready', { epoch: a.epoch, source, transferredBytes, loadMs });
    for (const s of this.session.linkStatuses()) if (s.state === 'up') this.attach(s.peer);
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

  private async obtainWeights(a: Assign): Promise<{ file: GgufFile; source: WeightsSource; transferredBytes: number }> {
    const plan = await this.nextPlan(a.epoch);
    this.rangeBytes = plan.spans.reduce((n, s) => n + s.bytes, 0);
    if (this.opts.modelPath !== undefined) {
      const file = await openGguf(this.opts.modelPath);
      if ((await modelFingerprint(file)) === a.model.fingerprint) return { file, source: 'local', transferredBytes: 0 };
    }
    const partial = await PartialModel.open(this.opts.weightsDir, a.model.fingerprint, a.model.fileBytes);
    // Layers received for an earlier range (this session or an earlier run of the same model) stay:
    // only the spans not already verified on disk are asked for, and only those count as moved.
    await partial.adopt(plan.spans);
    let missing = partial.missing(plan.spans);
    if (missing.length === 0) return { file: await openGguf(partial.path), source: 'cache', transferredBytes: 0 };
    if (a.model.url !== undefined) {
      const totalBytes = missing.reduce((n, s) => n + s.bytes, 0);
      let receivedBytes = 0;
      let lastReportedBytes = 0;
      try {
        await fetchSpans(a.model.url, missing, partial, (n) => {
          receivedBytes += n;
          if (receivedBytes - lastReportedBytes < PROGRESS_EVERY_BYTES && receivedBytes < totalBytes) return;
          lastReportedBytes = receivedBytes;
          this.loadFraction = totalBytes > 0 ? 0.9 * Math.min(1, receivedBytes / totalBytes) : 0.9;
          this.send({ kind: 'weights-progress', receivedBytes, totalBytes });
          this.emitProgress(receivedBytes, totalBytes);
        });
      } catch (err) {
        if (!isKiwiError(err)) throw err;
        // The host has the file too: what the URL did not give, it streams.
        this.emit('warning', new KiwiError(err.code, `${err.message} Receiving the rest from the host instead.`));
      }
      missing = partial.missing(plan.spans);
      if (missing.length === 0) {
        const file = await openGguf(partial.path);
        if ((await modelFingerprint(file)) !== a.model.fingerprint) throw new KiwiError('WEIGHTS_TRANSFER_FAILED', `The model header fetched from ${a.model.url} does not match the host's model.`);
        return { file, source: 'url', transferredBytes: receivedBytes };
      }
    }
    const totalBytes = missing.reduce((n, s) => n + s.bytes, 0);
    await new Promise<void>((resolve, reject) => {
      this.transfer = { plan: plan.spans, partial, missing: [...missing], receivedBytes: 0, totalBytes, lastReportedBytes: 0, done: resolve, failed: reject };
      this.send({ kind: 'weights-request', spans: missing.map((s) => ({ offset: s.offset, bytes: s.bytes })) });
    });
    this.transfer = undefined;
    const file = await openGguf(partial.path);
    if ((await modelFingerprint(file)) !== a.model.fingerprint) throw new KiwiError('WEIGHTS_TRANSFER_FAILED', 'The received model header does not match the host\'s model.');
    return { file, source: 'host', transferredBytes: totalBytes };
  }

  /** The weights plan of assignment `epoch` (plans of other epochs are dropped). */
  private nextPlan(epoch: number): Promise<WeightsPlan> {
    const ready = this.pendingPlan;
    this.pendingPlan = undefined;
    if (ready?.epoch === epoch) return Promise.resolve(ready);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new KiwiError('SESSION_TIMEOUT', 'The host did not describe this member\'s weights in time.')), 60_000);
      this.planWaiter = (plan) => {
        if (plan.epoch !== epoch) return;
        clearTimeout(timer);
        this.planWaiter = undefined;
        resolve(plan);
      };
    });
  }

  private chunkQueue: Promise<void> = Promise.resolve();

  private onChunk(offset: number, data: Uint8Array): void {
    const t = this.transfer;
    // Chunks of a transfer that a re-plan ended may still be on their way.
    if (t === undefined) return;
    this.chunkQueue = this.chunkQueue.then(async () => {
      if (this.transfer !== t) return;
      try {
        await t.partial.write(offset, data, t.missing);
        t.receivedBytes += data.length;
        const span = t.missing[0];
        if (span !== undefined && offset + data.length === span.offset + span.bytes) {
          await t.partial.verify(span);
          t.missing.shift();
        }
        if (t.receivedBytes - t.lastReportedBytes >= PROGRESS_EVERY_BYTES || t.missing.length === 0) {
          t.lastReportedBytes = t.receivedBytes;
          // The transfer is most of the loading; opening the stage is the rest.
          this.loadFraction = t.totalBytes > 0 ? 0.9 * Math.min(1, t.receivedBytes / t.totalBytes) : 0.9;
          this.send({ kind: 'weights-progress', receivedBytes: t.receivedBytes, totalBytes: t.totalBytes });
          this.emitProgress(t.receivedBytes, t.totalBytes);
        }
        if (t.missing.length === 0) t.done();
      } catch (err) {
        this.transfer = undefined;
        // A disk error (full, read-only) ends the transfer and is reported to the host, not a crash.
        t.failed(isKiwiError(err) ? err : new KiwiError('WEIGHTS_TRANSFER_FAILED', `Could not store the received weights: ${(err as Error).message}`));
      }
    });
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
    const a = this.assignment;
    const stage = this.stage;
    // Nothing of the current epoch arrives before the stage is ready: this is an older ring's traffic.
    if (a === undefined || stage === undefined || a.prev !== peer || link.closed) return;
    let input: Awaited<ReturnType<RingMember['checkInput']>> | undefined;
    try {
      input = await this.checkInput(a, stage, msg);
    } catch (err) {
      if (err instanceof StepError && err.kind === 'recoverable') {
        // Caches out of step with the host's view (nobody's offence): the step's requests are recomputed.
        this.emit('error', err);
        await this.forward(a, encodeRingEvent({ type: 'step-failed', epoch: a.epoch, step: err.step, code: err.code, message: err.message.slice(0, 1000) }));
        return;
      }
      // The previous stage sent what no honest Kiwi sends: its link ends, the host hears who it was.
      const cause = isKiwiError(err) ? err : new KiwiError('RING_PROTOCOL', `A ring message could not be read: ${String(err instanceof Error ? err.message : err).slice(0, 300)}`);
      const fault = new KiwiError('RING_PEER_MALFORMED', `Peer ${peer} sent malformed ring data (${cause.code}): ${cause.message}`, { peer, cause: cause.code });
      link.fail(cause);
      this.emit('warning', fault);
      this.report(a, peer, 'malformed', fault);
      const step = err instanceof StepError ? err.step : 0;
      await this.forward(a, encodeRingEvent({ type: 'step-failed', epoch: a.epoch, step, code: fault.code, message: fault.message.slice(0, 1000) })).catch(() => undefined);
      return;
    }
    if (input === undefined) return;
    if (input.kind === 'event') return this.forward(a, encodeRingEvent(input.event));
    const { frame, meta, caches, batch, seq } = input;
    const t = frame.tensor;
    try {
      if (t.kind === 'hidden') {
        const bad = firstNonFinite(t.hidden);
        if (bad >= 0) throw this.numeric(a, peer, `The activations peer ${peer} sent for step ${meta.step} hold NaN or infinity (element ${bad}): a stage lost precision (fp16 overflow?).`);
      }
      const stageInput: StageInput = t.kind === 'ids' ? { kind: 'ids', ids: t.ids, batch, seq } : { kind: 'hidden', hidden: t.hidden, batch, seq };
      const t0 = performance.now();
      const out = await stage.forward(stageInput, caches);
      if (out.kind !== 'hidden') throw new Error('a member stage returned logits');
      const own = firstNonFinite(out.hidden);
      if (own >= 0) throw this.numeric(a, this.session.peer ?? 0, `Layers ${a.start}-${a.end} on this member produced NaN or infinity (element ${own}) for step ${meta.step}: a precision problem (fp16 overflow?).`);
      const wire: WireOptions = { encoding: a.encoding, zstd: a.zstd };
      // Each stage adds its compute time, so the host sees per-stage timing without another message.
      const stepMs = performance.now() - t0;
      this.recentStepMs.push(stepMs);
      if (this.recentStepMs.length > 64) this.recentStepMs.shift();
      const metadata = { ...frame.metadata, [`ms.${a.start}-${a.end}`]: stepMs.toFixed(3) };
      const frameOut = await encodeStepFrame({ metadata, tensor: { kind: 'hidden', hidden: out.hidden, dims: [batch, seq, stage.shape.hidden] } }, wire);
      await this.forward(a, encodeRingStep(frameOut));
    } catch (err) {
      // This stage could not run the step: its requests fail at the host (or are recomputed), the member goes on.
      const e = isKiwiError(err) ? err : new KiwiError('RING_STAGE_FAILED', `Layers ${a.start}-${a.end} could not run step ${meta.step}: ${String(err instanceof Error ? err.message : err).slice(0, 300)}`);
      const failed: RingEvent = { type: 'step-failed', epoch: a.epoch, step: meta.step, code: e.code, message: e.message.slice(0, 1000) };
      await this.forward(a, encodeRingEvent(failed));
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
   * Decodes and checks one message from the previous stage against this assignment: what the link
   * agreed to carry, sizes the shape allows, rows that fit their caches. Throws what is malformed
   * (a StepError once the step id is known); undefined: another epoch's traffic, dropped.
   */
  private async checkInput(a: Assign, stage: Stage, msg: Uint8Array): Promise<
    | { kind: 'event'; event: RingEvent }
    | { kind: 'step'; frame: Awaited<ReturnType<typeof decodeStepFrame>>; meta: ReturnType<typeof parseStepMetadata>; caches: KvCache[]; batch: number; seq: number }
    | undefined
  > {
    const kind = msg[0];
    if (kind === RingKind.EVENT) {
      const event = decodeRingEvent(msg.subarray(1));
      if (event.type === 'free') for (const id of event.ids) this.caches.delete(id);
      if (event.type === 'step-failed' && event.epoch !== a.epoch) return undefined;
      return { kind: 'event', event };
    }
    if (kind !== RingKind.STEP) throw new KiwiError('RING_PROTOCOL', `Unknown ring message kind ${String(kind)}.`);
    const maxBytes = this.opts.maxFrameBytes ?? maxStepFrameBytes({ hidden: stage.shape.hidden, maxRows: 64, maxSeq: a.maxPositions }, a.receive.tensor);
    const frame = await decodeStepFrame(msg.subarray(1), { maxBytes, hidden: stage.shape.hidden, expect: a.receive });
    const t = frame.tensor;
    const batch = t.dims[0];
    const seq = t.dims[1];
    const meta = parseStepMetadata(frame.metadata, batch);
    if (meta.epoch !== a.epoch) return undefined;
    const bad = (why: string): StepError => new StepError(meta.step, why);
    if (batch > 1 && seq !== 1) throw bad('A batched step must add one token per request.');
    if (new Set(meta.rows.map((r) => r.id)).size !== batch) throw bad('A step names one request twice.');
    const caches = meta.rows.map((r) => {
      if (r.cap > a.maxPositions || r.pos + seq > r.cap) throw bad(`Request ${r.id} would hold ${r.pos + seq} positions in a cache of ${r.cap} (context ${a.maxPositions}).`);
      let c = this.caches.get(r.id);
      if (c === undefined && r.pos === 0) {
        c = stage.emptyCache(r.cap);
        this.caches.set(r.id, c);
      }
      if (c === undefined || c.length !== r.pos || c.capacity !== r.cap) {
        throw new StepError(meta.step, `Request ${r.id} is at position ${r.pos} but this stage holds ${c?.length ?? 'no'} positions for it.`, 'recoverable');
      }
      return c;
    });
    return { kind: 'step', frame, meta, caches, batch, seq };
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

/** A malformed step whose id is known (so its requests can be failed), or a cache out of step (recomputed, nobody's offence). */
class StepError extends KiwiError {
  constructor(
    readonly step: number,
    message: string,
    readonly kind: 'malformed' | 'recoverable' = 'malformed',
  ) {
    super('RING_PROTOCOL', message);
  }
}
