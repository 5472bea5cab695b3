// The host's end of the ring: it embeds (and runs its own first blocks, when the plan gives it
// some), sends each step to the first member, receives the last member's hidden states and runs
// the head (final norm + output projection) to get logits. Many steps may be in flight at once,
// each at a different stage; results are matched to steps by id. A link that closes or a stage
// that fails ends only the steps it affects, with RING_BROKEN or the stage's own error code.
// One engine serves one ring epoch; a re-plan retires it and builds the next.
// What the last member sends is checked before it is used: its encoding is the one the link
// agreed, its size what the shape allows, its rows and shape those of the step sent. A member that
// sends anything else is malformed (hostile or broken): the link to it ends with an error frame and
// onPeerFault names it, so the host plans without it; its step fails with RING_PEER_MALFORMED. NaN
// or infinite activations of the right shape are a precision problem (an honest fp16 stage can
// overflow): that step fails with RING_PEER_NUMERIC and the member stays. Nothing a peer sends can
// throw out of a message handler.
import { isKiwiError, isKiwiErrorCode, KiwiError, type KiwiErrorCode } from '../errors.js';
import { PrefixKvStore } from '../runtime/prefix-cache-kv.js';
import type { Stage } from '../runtime/stage.js';
import type { SegmentCaches, SegmentedStage } from '../runtime/stage-segments.js';
import { forwardKeeping, KeptStage, outputsFor, StageOutputs } from '../runtime/stage-keep.js';
import { freeCache, rollbackCache, type KvCache } from '../runtime/kv-store.js';
import type { SecureLink } from '../transport/secure-link.js';
import { decodeStepFrame, encodeStepFrame, firstNonFinite, maxStepFrameBytes, type ActivationEncoding, type StepTensor, type WireOptions } from '../transport/tensor-frame.js';
import { decodeRingEvent, encodeRingEvent, encodeRingStep, parseStepMetadata, RingKind, stepMetadata, type RingEvent, type StepRow } from './ring-protocol.js';

export interface RingLinks {
  /** The secure link to a ring neighbour, or undefined while it is down. */
  link(peer: number): SecureLink | undefined;
}

export interface RingEngineOptions {
  /** The ring's generation (assign.epoch): steps and events of other epochs are dropped. */
  epoch: number;
  /** The host's own blocks [0, a) (a > 0; several segments where a re-plan grew them), or undefined when the first member embeds. */
  first: SegmentedStage | undefined;
  /** The head: zero blocks, final norm and output projection ([n, n) with head). */
  head: Stage;
  firstPeer: number;
  lastPeer: number;
  wire: WireOptions;
  /** What the last member's link agreed to carry (its stage's wire); other frames are refused. */
  receive: { tensor: ActivationEncoding; zstd: boolean };
  /** Largest decoded frame accepted; default what the head's shape allows (prefill of maxPositions, or maxRows rows). */
  maxFrameBytes?: number;
  /** Most rows of one step (the generator's maxBatch); default 64. */
  maxRows?: number;
  /** Called once when the ring breaks (a link closed, a protocol violation); every later step fails (RING_BROKEN). */
  onBroken?: (err: KiwiError) => void;
  /** A member sent malformed ring data (the link to it is closed) or non-finite activations (a precision problem). */
  onPeerFault?: (peer: number, fault: PeerFault, err: KiwiError) => void;
  /** Each completed step's timing (the host's stage-drift monitor reads them, stage-drift-monitor.ts). */
  onTiming?: (t: StepTiming) => void;
  /** The previous ring's first stage and its requests (RingEngine.handOver()): requests it rebuilds skip the blocks they kept. */
  kept?: KeptStage | undefined;
}

export type PeerFault = 'malformed' | 'numeric';

/** Codes a member's step-failed event may carry as they are; any other is the stage's failure (502), never the client's. */
const PASSED_ON: ReadonlySet<string> = new Set<KiwiErrorCode>(['RING_BROKEN', 'RING_PROTOCOL', 'RING_NOT_READY', 'RING_REPLAN', 'SESSION_DISCONNECTED', 'RING_PEER_MALFORMED', 'RING_PEER_NUMERIC', 'RING_STAGE_FAILED']);

/** Converts what handling a peer's message threw into the KiwiError that ends the link. */
export function peerError(err: unknown): KiwiError {
  if (isKiwiError(err)) return err;
  return new KiwiError('RING_PROTOCOL', `A ring message could not be handled: ${String(err instanceof Error ? err.message : err).slice(0, 300)}`);
}

export interface StepTiming {
  /** Wall time of the whole step, host to host. */
  ringMs: number;
  /** Of which the host's own stages computed (its first blocks and the head; not their waits for a turn). */
  hostMs: number;
  /** Compute time each member stage reported, by its layer range ('2-5'). */
  stageMs: Record<string, number>;
  /** The host's own first blocks (embedding included; 0 when it runs none). */
  firstMs: number;
  /** Rows and tokens per row of the step (1 x 1: one request's decode step). */
  rows: number;
  seq: number;
  /** Positions the first row had cached before the step: what its attention read (a step's cost grows with it). */
  position: number;
}

interface Pending {
  rows: StepRow[];
  /** Tokens per row sent: the result must have exactly this shape. */
  seq: number;
  /** Logits of this many last positions per row (speculative verification; else 1). */
  logitsTail: number;
  started: number;
  hostMs: number;
  resolve: (logits: Float32Array[]) => void;
  reject: (err: unknown) => void;
  /** Asked for the head's final norm of every position (embeddings): [batch, seq, hidden]. */
  onHiddenNorm?: ((hiddenNorm: Float32Array) => void) | undefined;
}

/** Runs one thing at a time on a stage (its onnxruntime session and the caches it writes). */
class Serial {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(f: () => Promise<T>): Promise<T> {
    const p = this.tail.then(f, f);
    this.tail = p.catch(() => undefined);
    return p;
  }

  /** run(f), and how long f itself ran: the stage's compute time, without the wait for its turn. */
  async timed<T>(f: () => Promise<T>): Promise<{ out: T; ms: number }> {
    let ms = 0;
    const out = await this.run(async () => {
      const t0 = performance.now();
      try {
        return await f();
      } finally {
        ms = performance.now() - t0;
      }
    });
    return { out, ms };
  }
}

export class RingEngine {
  private readonly pending = new Map<number, Pending>();
  private readonly caches = new Map<number, { first: SegmentCaches | undefined; head: KvCache }>();
  /** The rows the host's first blocks sent on, per request (kept across a re-plan, stage-keep.ts). */
  private readonly outputs: StageOutputs | undefined;
  /** The previous ring's first stage, until its requests are rebuilt here. */
  private kept: KeptStage | undefined;
  /** This ring's first stage and requests once retired, for the next ring (handOver()). */
  private leaving: KeptStage | undefined;
  /** The host's stages' part of the prompt cache (the first stage's, then the head's). */
  private readonly prefixKv: PrefixKvStore;
  private nextStep = 1;
  private readonly firstLock = new Serial();
  private readonly headLock = new Serial();
  private readonly attached = new WeakSet<SecureLink>();
  /** Recent step timings for status displays (newest last). */
  readonly timings: StepTiming[] = [];
  private broken: KiwiError | undefined;
  /** Replaced by a newer ring: messages are no longer ours. */
  private retired = false;

  constructor(
    private readonly links: RingLinks,
    private readonly opts: RingEngineOptions,
  ) {
    this.attach(opts.lastPeer);
    this.attach(opts.firstPeer);
    this.prefixKv = new PrefixKvStore();
    const first = opts.first;
    // A previous stage that shares no segment with this one has nothing to give.
    if (first !== undefined && opts.kept?.stage.segments.some((s) => first.segments.includes(s)) === true) this.kept = opts.kept;
    else opts.kept?.free();
    this.outputs = first === undefined ? undefined : outputsFor(first, this.kept);
  }

  get vocab(): number {
    return this.opts.head.shape.vocab;
  }

  /** The head returns the logits of several positions of a row (speculative verification). */
  get verifies(): boolean {
    return this.opts.head.verifies;
  }

  get inFlight(): number {
    return this.pending.size;
  }

  get epoch(): number {
    return this.opts.epoch;
  }

  get isRetired(): boolean {
    return this.retired;
  }

  /** Retires this ring (a re-plan replaces it): steps in flight fail with `err`, later ones too. */
  retire(err: KiwiError): void {
    const first = this.retired ? undefined : this.opts.first;
    this.retired = true;
    this.broken ??= err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    // The first stage's caches wait for the next ring (handOver()); the head's are rebuilt there.
    if (first !== undefined && this.outputs !== undefined) {
      const caches = new Map<number, SegmentCaches>();
      for (const [id, c] of this.caches) if (c.first !== undefined) caches.set(id, c.first);
      this.leaving = new KeptStage(first, caches, this.outputs);
      for (const c of this.caches.values()) freeCache(c.head);
      this.caches.clear();
    }
    for (const id of [...this.caches.keys()]) this.dropCaches(id);
    this.kept?.free();
    this.kept = undefined;
    this.prefixKv.clear();
  }

  /** The first stage and its requests as this retired ring left them, for the next ring's engine (`kept`); once. */
  handOver(): KeptStage | undefined {
    const kept = this.leaving;
    this.leaving = undefined;
    return kept;
  }

  /** Listens on a ring link (call again when a link came back up). */
  attach(peer: number): void {
    const link = this.links.link(peer);
    if (link === undefined || this.attached.has(link)) return;
    this.attached.add(link);
    link.onMessage((bytes) => {
      // Only the last member sends to the host; anything else on a ring link is not ours to read.
      if (peer !== this.opts.lastPeer || this.retired) return;
      this.onMessage(bytes.slice()).catch((err: unknown) => this.malformed(peer, link, peerError(err)));
    });
    link.onClose((info) => {
      if (!this.retired) this.breakRing(new KiwiError('RING_BROKEN', `The ring link to peer ${peer} closed (${info.reason}).`));
    });
  }

  /**
   * Opens the host's caches for a request of at most `capacity` positions; `keep`: it is rebuilt
   * after a re-plan, and the first stage's blocks that kept its first `keep` positions keep them.
   */
  open(id: number, capacity: number, keep?: number): void {
    this.dropCaches(id);
    const first = this.opts.first;
    const kept = first !== undefined && keep !== undefined ? this.kept?.adopt(id, first, capacity, keep, this.outputs!) : undefined;
    if (kept === undefined) this.outputs?.drop(id);
    this.caches.set(id, { first: kept ?? first?.emptyCache(capacity), head: this.opts.head.emptyCache(capacity) });
  }

  /** Frees a request on the host and, through a `free` event around the ring, on every member. */
  free(ids: readonly number[]): void {
    for (const id of ids) this.dropCaches(id);
    this.kept?.free(ids);
    this.leaving?.free(ids);
    this.sendEvent({ type: 'free', ids: [...ids] });
  }

  /** Prompt cache: every stage keeps the first `length` positions of request `id`'s caches as entry `entry` (send before free()). */
  keepPrefix(id: number, entry: number, length: number): void {
    const c = this.cachesOf(id);
    this.prefixKv.keep(entry, [...(c.first ?? []), c.head], length);
    this.sendEvent({ type: 'free', ids: [], keep: [{ id, entry, length }] });
  }

  /** Prompt cache: request `id` (just opened) starts with the first `length` positions of `entry`; its first step's row says `from: entry` to the members. */
  seedPrefix(id: number, entry: number, length: number): void {
    const cap = this.cachesOf(id).head.capacity;
    const seeded = this.prefixKv.seed(entry, length, cap);
    if (seeded === undefined) throw new Error(`prompt cache entry ${entry} is not held by the host`);
    this.dropCaches(id);
    const n = this.opts.first?.segments.length ?? 0;
    this.caches.set(id, { first: n > 0 ? seeded.slice(0, n) : undefined, head: seeded[n]! });
  }

  /** Prompt cache: entries evicted, on every stage. */
  dropPrefixes(entries: readonly number[]): void {
    this.prefixKv.drop(entries);
    this.sendEvent({ type: 'free', ids: [], drop: [...entries] });
  }

  private sendEvent(e: RingEvent): void {
    const link = this.links.link(this.opts.firstPeer);
    if (link !== undefined && !link.closed) link.send(encodeRingEvent(e));
  }

  /**
   * One step for rows of requests: one row of many tokens (prefill) or many rows of one token.
   * `pos` is each request's position before this step; returns each row's last-position logits.
   */
  async step(
    rows: ReadonlyArray<{ id: number; tokens: readonly number[]; pos: number; cap: number; from?: number | undefined; replay?: boolean; keep?: number | undefined }>,
    opts: { onHiddenNorm?: (hiddenNorm: Float32Array) => void; logitsTail?: number } = {},
  ): Promise<Float32Array[]> {
    if (this.broken !== undefined) throw this.broken;
    const batch = rows.length;
    const seq = rows[0]?.tokens.length ?? 0;
    // Speculative decoding: `logitsTail` asks for a row's last positions; positions past `pos` (drafts
    // a verify step rejected) are dropped here and, as the row travels, on every member.
    const logitsTail = opts.logitsTail ?? 1;
    for (const r of rows) {
      // A rebuilt request's kept blocks hold positions past `pos` that its rows skip (stage-keep.ts).
      if (r.keep !== undefined) continue;
      const c = this.caches.get(r.id);
      for (const kv of c !== undefined ? [...(c.first ?? []), c.head] : []) if (kv.length > r.pos) rollbackCache(kv, r.pos);
    }
    const ids = BigInt64Array.from(rows.flatMap((r) => r.tokens.map(BigInt))); // [batch, seq]
    const meta: StepRow[] = rows.map((r) => ({
      id: r.id, pos: r.pos, cap: r.cap,
      ...(r.from !== undefined ? { from: r.from } : {}), ...(r.replay === true ? { replay: true as const } : {}), ...(r.keep !== undefined ? { keep: r.keep } : {}),
    }));
    // Generated tokens replayed after a re-plan: every stage computes them as decode steps (runtime/replay.ts).
    const replay = meta[0]?.replay === true ? { replay: true } : {};
    const step = this.nextStep++;
    const started = performance.now();
    let tensor: StepTensor = { kind: 'ids', ids, dims: [batch, seq] };
    let hostMs = 0;
    const first = this.opts.first;
    if (first !== undefined) {
      const caches = rows.map((r) => this.cachesOf(r.id).first!);
      const store = { outputs: this.outputs, kept: this.kept };
      // Its compute time only: another step's turn on the stage (pipelined requests) is not its cost.
      const { out, ms } = await this.firstLock.timed(() => forwardKeeping(first, { kind: 'ids', ids, batch, seq }, caches, rows, store, replay));
      if (out.kind !== 'hidden') throw new Error('the host\'s first stage returned logits');
      tensor = { kind: 'hidden', hidden: out.hidden, dims: [batch, seq, first.shape.hidden] };
      hostMs = ms;
    }
    if (this.broken !== undefined) throw this.broken;
    const frame = await encodeStepFrame({ metadata: stepMetadata(this.opts.epoch, step, meta), tensor }, this.opts.wire);
    const link = this.links.link(this.opts.firstPeer);
    if (link === undefined || link.closed) throw new KiwiError('RING_BROKEN', `The ring link to the first member (peer ${this.opts.firstPeer}) is down.`);
    const result = new Promise<Float32Array[]>((resolve, reject) => this.pending.set(step, { rows: meta, seq, logitsTail, started, hostMs, resolve, reject, onHiddenNorm: opts.onHiddenNorm }));
    link.send(encodeRingStep(frame));
    return result;
  }

  /** Frees request `id`'s caches on the host's stages. */
  private dropCaches(id: number): void {
    const c = this.caches.get(id);
    if (c === undefined) return;
    for (const kv of [...(c.first ?? []), c.head]) freeCache(kv);
    this.caches.delete(id);
    this.outputs?.drop(id);
  }

  private cachesOf(id: number): { first: SegmentCaches | undefined; head: KvCache } {
    const c = this.caches.get(id);
    if (c === undefined) throw new Error(`request ${id} has no caches on the host (open it first)`);
    return c;
  }

  /** Throws what the peer did wrong (the caller ends its link); failures of the host's own head reject only their step. */
  private async onMessage(msg: Uint8Array): Promise<void> {
    if (this.retired) return;
    if (msg[0] === RingKind.EVENT) {
      const e = decodeRingEvent(msg.subarray(1));
      if (e.type === 'step-failed' && e.epoch === this.opts.epoch) {
        const p = this.pending.get(e.step);
        this.pending.delete(e.step);
        const code = PASSED_ON.has(e.code) && isKiwiErrorCode(e.code) ? e.code : 'RING_STAGE_FAILED';
        p?.reject(new KiwiError(code, `A ring stage failed (${e.code}): ${e.message}`, { stageCode: e.code }));
      }
      // A `free` event that went all the way round ends here.
      return;
    }
    if (msg[0] !== RingKind.STEP) throw new KiwiError('RING_PROTOCOL', `Unknown ring message kind ${String(msg[0])}.`);
    const head = this.opts.head;
    const maxBytes = this.opts.maxFrameBytes ?? maxStepFrameBytes({ hidden: head.shape.hidden, maxRows: this.opts.maxRows ?? 64, maxSeq: head.shape.maxPositions }, this.opts.receive.tensor);
    const frame = await decodeStepFrame(msg.subarray(1), { maxBytes, hidden: head.shape.hidden, expect: this.opts.receive });
    const t = frame.tensor;
    if (t.kind !== 'hidden') throw new KiwiError('RING_PROTOCOL', 'The last stage sent token ids instead of hidden states.');
    const { epoch, step, rows } = parseStepMetadata(frame.metadata, t.dims[0]);
    // A step of an older ring, still in transit when it was re-planned: its requests were recomputed.
    if (epoch !== this.opts.epoch || this.retired) return;
    const p = this.pending.get(step);
    if (p === undefined) throw new KiwiError('RING_PROTOCOL', `The ring returned step ${step}, which is not in flight.`);
    this.pending.delete(step);
    if (t.dims[1] !== p.seq || rows.length !== p.rows.length || rows.some((r, i) => r.id !== p.rows[i]!.id || r.pos !== p.rows[i]!.pos || r.cap !== p.rows[i]!.cap)) {
      const err = new KiwiError('RING_PROTOCOL', `The ring returned step ${step} as ${t.dims[0]} x ${t.dims[1]} rows [${rows.map((r) => r.id).join(',')}], but it was sent as ${p.rows.length} x ${p.seq} [${p.rows.map((r) => r.id).join(',')}].`);
      // This step's requests got a corrupted result: they fail (the member's fault, 502); the others are recomputed.
      p.reject(new KiwiError('RING_PEER_MALFORMED', `A ring member corrupted this request's step: ${err.message}`));
      throw err;
    }
    const bad = firstNonFinite(t.hidden);
    if (bad >= 0) {
      const err = new KiwiError('RING_PEER_NUMERIC', `The ring's activations for step ${step} hold NaN or infinity (element ${bad}): a stage lost precision (fp16 overflow?).`);
      p.reject(err);
      this.opts.onPeerFault?.(this.opts.lastPeer, 'numeric', err);
      return;
    }
    try {
      const caches = rows.map((r) => this.cachesOf(r.id).head);
      const position = caches[0]?.length ?? 0;
      const hiddenNorm = p.onHiddenNorm !== undefined;
      const tail = p.logitsTail;
      const { out, ms: headMs } = await this.headLock.timed(() => head.forward({ kind: 'hidden', hidden: t.hidden, batch: t.dims[0], seq: t.dims[1] }, caches, { hiddenNorm, ...(tail !== 1 ? { logitsTail: tail } : {}), ...(p.rows[0]?.replay === true ? { replay: true } : {}) }));
      if (out.kind !== 'logits') throw new Error('the head stage returned hidden states');
      if (out.hiddenNorm !== undefined) p.onHiddenNorm?.(out.hiddenNorm);
      const v = head.shape.vocab * tail;
      const now = performance.now();
      const stageMs: Record<string, number> = {};
      for (const [k, v] of Object.entries(frame.metadata)) {
        const ms = Number(v);
        if (k.startsWith('ms.') && Number.isFinite(ms)) stageMs[k.slice(3)] = ms;
      }
      const timing: StepTiming = { ringMs: now - p.started, hostMs: p.hostMs + headMs, stageMs, firstMs: p.hostMs, rows: rows.length, seq: p.seq, position };
      this.timings.push(timing);
      if (this.timings.length > 64) this.timings.shift();
      p.resolve(rows.map((_, b) => out.logits.slice(b * v, (b + 1) * v)));
      this.opts.onTiming?.(timing);
    } catch (err) {
      p.reject(err);
    }
  }

  /**
   * The last member sent something no honest stage sends: end its link (error frame), report it,
   * and break the ring: the steps in flight are recomputed on the next one, planned without it.
   */
  private malformed(peer: number, link: SecureLink, cause: KiwiError): void {
    if (this.retired) return;
    const err = new KiwiError('RING_PEER_MALFORMED', `Peer ${peer} sent malformed ring data (${cause.code}): ${cause.message}`, { peer, cause: cause.code });
    link.fail(cause);
    this.opts.onPeerFault?.(peer, 'malformed', err);
    this.breakRing(new KiwiError('RING_BROKEN', err.message));
  }

  private breakRing(err: KiwiError): void {
    if (this.broken === undefined) this.opts.onBroken?.(err);
    this.broken = err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }
}
