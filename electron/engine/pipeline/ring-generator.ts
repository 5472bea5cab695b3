// Generation over the ring: the shared loop (runtime/generation-loop.ts: admission, prefill one
// request at a time, batched decoding, accept, finish, cancellation) with steps run by the ring
// engine, several in flight at once so every stage of the ring has work: while one batch is at
// member 2, the next can be at member 1. A request is in at most one step at a time, so its
// caches on every stage grow in order; requests that became ready while the ring was busy are
// batched into the next step.
//
// Recovery (a member died, the ring is re-planned): a step that fails with a ring error does not end
// its requests. They are held, the host is told (onRingFault), and no step starts until resume()
// hands over the next ring's engine. Then every live request rebuilds its caches there (those on
// the old ring are gone) by the same computation that built them: its prompt as one prefill, then
// the tokens generated so far (all but the last) as one replay row, which every stage computes as
// their decode steps (runtime/replay.ts: in one pass at accuracy level 4, else one decode step per
// token inside the stage), then the last token as a plain decode step. The next token follows bit
// for bit as if nothing happened, and the client's stream simply continues. A plain prefill of
// prompt + generated tokens would be exact only up to float rounding (its attention sums in
// another order, runtime/recompute.test.ts), which flips near-tied tokens.
import { isKiwiError, KiwiError } from '../errors.js';
import { GenerationLoop, type LoopRequest, type StepRow } from '../runtime/generation-loop.js';
import type { KvBlockPool } from '../runtime/kv-pool.js';
import type { Drafter } from '../runtime/prompt-lookup.js';
import { speculationFor, type SpeculativeDecoding, type SpeculativeMode } from '../runtime/speculative.js';
import type { RingEngine } from './ring-engine.js';

export interface RingGeneratorOptions {
  /** Most requests decoded in one step. Default 8. */
  maxBatch?: number;
  /** Steps in flight at once; about the number of stages keeps each busy. Default 3. */
  maxInFlight?: number;
  refuseWhenFull?: boolean;
  /** A step failed because the ring did: its requests are held for recompute; the host re-plans. */
  onRingFault?: (err: KiwiError) => void;
  /** How often one request may be caught in a failed step before it fails. Default 4. */
  maxRecomputes?: number;
  /** The prompt cache's bound in KV bytes (runtime/prefix-cache.ts); 0 or absent: off. */
  promptCacheBytes?: number;
  /** Speculative decoding (runtime/speculative.ts): drafts verified in one trip round the ring; default off. */
  speculative?: SpeculativeMode;
  /** Its drafter; default prompt lookup. */
  drafter?: Drafter;
  /** After a re-plan, stages that kept a request's caches skip the layers they hold (runtime/stage-keep.ts). Default yes; false rebuilds every layer (for comparison). */
  keepCaches?: boolean;
}

/** Step errors that a new ring cures: a link or member went away, or a stage lost a request's cache. */
const RING_FAULTS = new Set(['RING_BROKEN', 'RING_PROTOCOL', 'RING_NOT_READY', 'RING_REPLAN', 'SESSION_DISCONNECTED']);

/** What the ring keeps of a request (its caches live in the engine, by request id). */
interface RingRequestState {
  /** Steps of this request that failed with the ring. */
  faults: number;
  /** Prompt cache: the entry its caches start from, named in its first step (members copy it then). */
  seed?: number | undefined;
  /** Rebuilding after a re-plan: the positions every stage had finished, which stages that kept the request's caches skip. */
  keep?: number | undefined;
}

type Request = LoopRequest<RingRequestState>;

export class RingGenerator extends GenerationLoop<RingRequestState> {
  /** Requests of failed steps, held until the next ring. */
  private readonly stalled: Request[] = [];
  /** Set while no ring can serve: new requests fail with it at once. */
  private unavailable: KiwiError | undefined;
  private idleWaiters: Array<() => void> = [];
  /** Requests the last resume() handed over that have not yet made a new token, with their history's length then (caughtUp()). */
  private rebuilding = new Map<Request, number>();
  private caughtUpWaiters: Array<() => void> = [];

  /** Speculation's counters (for /health); undefined when off. */
  readonly speculation: SpeculativeDecoding | undefined;

  constructor(
    private engine: RingEngine,
    pool: KvBlockPool,
    contextTokens: number,
    private readonly opts: RingGeneratorOptions = {},
  ) {
    const speculation = engine.verifies ? speculationFor(opts.speculative, opts.drafter) : undefined;
    super(pool, contextTokens, { ...opts, maxInFlight: opts.maxInFlight ?? 3, ...(speculation !== undefined ? { speculation } : {}) });
    this.speculation = speculation;
  }

  /** Requests started and not finished. */
  get live(): number {
    return this.fresh.length + this.ready.length + this.stalled.length + this.rowsInFlight;
  }

  /** Stops starting steps; resolves once none is in flight (a safe point to re-plan). */
  hold(): Promise<void> {
    this.holding = true;
    if (this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Continues on a new ring: every live request is opened there and rebuilds its caches, its prompt
   * as a prefill and then its generated tokens as one replay row (see the header). Returns how
   * many requests were resumed. Call after hold().
   */
  resume(engine: RingEngine, opts: { maxInFlight?: number } = {}): number {
    if (this.inFlight > 0) throw new Error('resume() while steps are in flight; await hold() first');
    this.engine = engine;
    if (opts.maxInFlight !== undefined) this.maxInFlight = opts.maxInFlight;
    this.unavailable = undefined;
    const live = [...this.stalled, ...this.fresh, ...this.ready].sort((a, b) => a.id - b.id);
    this.rebuilding = new Map(live.map((a) => [a, a.history.length]));
    this.stalled.length = 0;
    this.ready.length = 0;
    this.fresh.length = 0;
    // The new ring's stages hold no prompt-cache entries: every request recomputes from its prompt.
    this.prefixes?.clear();
    for (const a of live) {
      a.state.keep = this.opts.keepCaches !== false && a.pos > 0 ? a.pos : undefined;
      engine.open(a.id, a.reservation.capacityTokens, a.state.keep);
      a.pos = 0;
      a.state.seed = undefined;
      this.fresh.push(a);
    }
    this.holding = false;
    this.pump();
    this.settleRebuilt();
    return live.length;
  }

  /** Whether requests the last resume() handed over still rebuild their caches (caughtUp()). */
  get catchingUp(): boolean {
    return this.rebuilding.size > 0;
  }

  /**
   * Resolves once every request the last resume() handed over has rebuilt its caches (its prompt
   * and replay ran) and made its first new token, or has ended: until then a recovery is still on
   * the streams' critical path (the client waits for that token), and background work waits
   * (session-host.ts; members' standby fetches beside that decode step made it 2-4x slower at 8B).
   */
  caughtUp(): Promise<void> {
    if (!this.catchingUp) return Promise.resolve();
    return new Promise((resolve) => this.caughtUpWaiters.push(resolve));
  }

  private settleRebuilt(): void {
    for (const [a, length] of this.rebuilding) if (a.done || a.history.length > length) this.rebuilding.delete(a);
    if (this.rebuilding.size === 0) for (const w of this.caughtUpWaiters.splice(0)) w();
  }

  /** No ring can be formed in time: held and waiting requests fail with `err`, and so do new ones until resume(). */
  failWaiting(err: KiwiError): void {
    this.unavailable = err;
    for (const queue of [this.stalled, this.fresh, this.ready]) {
      for (const a of queue.splice(0)) this.finish(a, err);
    }
  }

  /**
   * The head's final-norm hidden states [seq, hidden] of `ids` as one prefill through the ring
   * (embeddings), on caches of its own that are freed at once. Counted as a step in flight, so a
   * re-plan waits for it; a ring fault fails it (the client retries) rather than replaying it.
   */
  async hiddenStates(ids: readonly number[], signal?: AbortSignal): Promise<Float32Array> {
    if (this.unavailable !== undefined) throw this.unavailable;
    if (this.holding) throw new KiwiError('RING_REPLAN', 'the ring is being re-planned; retry in a moment');
    const reservation = await this.pool.reserve(ids.length, signal !== undefined ? { signal } : {});
    const id = this.newId();
    this.inFlight++;
    try {
      this.engine.open(id, reservation.capacityTokens);
      let states: Float32Array | undefined;
      await this.engine.step([{ id, tokens: ids, pos: 0, cap: reservation.capacityTokens }], { onHiddenNorm: (h) => (states = h) });
      if (states === undefined) throw new Error('the head returned no hidden states');
      return states;
    } finally {
      this.engine.free([id]);
      this.pool.release(reservation);
      this.inFlight--;
      this.afterStep();
    }
  }

  protected override refusal(): KiwiError | undefined {
    return this.unavailable;
  }

  protected open(id: number, capacityTokens: number): RingRequestState {
    this.engine.open(id, capacityTokens);
    return { faults: 0 };
  }

  protected runStep(rows: readonly StepRow<RingRequestState>[]): Promise<Float32Array[]> {
    return this.engine.step(rows.map((row) => {
      const { request: a, tokens } = row;
      const from = a.state.seed;
      a.state.seed = undefined;
      // Rows within what survived are rebuilt (a chunk boundary or the replay's end is where `keep` falls).
      const keep = a.state.keep !== undefined && a.pos + tokens.length <= a.state.keep ? a.state.keep : undefined;
      if (keep === undefined) a.state.keep = undefined;
      return { id: a.id, tokens, pos: a.pos, cap: a.reservation.capacityTokens, from, ...(row.replay === true ? { replay: true } : {}), ...(keep !== undefined ? { keep } : {}) };
    }), rows[0]?.drafts !== undefined ? { logitsTail: rows[0].drafts.length + 1 } : {});
  }

  /** Every stage runs a replayed row as its decode steps (runtime/replay.ts): one trip round the ring. */
  protected override replaysGenerated(): boolean {
    return true;
  }

  protected override seedPrefix(a: Request, entry: number, length: number): void {
    this.engine.seedPrefix(a.id, entry, length);
    a.state.seed = entry;
  }

  protected override keepPrefix(a: Request, entry: number, length: number): void {
    this.engine.keepPrefix(a.id, entry, length);
  }

  protected override dropPrefixes(entries: number[]): void {
    this.engine.dropPrefixes(entries);
  }

  /** Every stage drops the request's caches (a `free` event travels the ring). */
  protected override close(a: Request): void {
    this.engine.free([a.id]);
    if (this.rebuilding.delete(a)) this.settleRebuilt();
  }

  protected override heldQueues(): Request[][] {
    return [this.stalled];
  }

  /** The ring failed, not the request: its requests are held for the next ring (the host re-plans). */
  protected override keepAfterFailedStep(batch: readonly Request[], err: unknown): boolean {
    if (!isKiwiError(err) || !RING_FAULTS.has(err.code)) return false;
    for (const a of batch) {
      if (a.done) continue;
      if (a.p.signal?.aborted === true) this.finish(a, a.p.signal.reason);
      // A re-plan the host chose (a member left or returned) is nobody's fault; a step that failed counts.
      else if (err.code !== 'RING_REPLAN' && ++a.state.faults > (this.opts.maxRecomputes ?? 4)) this.finish(a, err);
      else this.stalled.push(a);
    }
    this.holding = true;
    this.opts.onRingFault?.(err);
    return true;
  }

  protected override afterStep(): void {
    if (this.inFlight === 0) for (const w of this.idleWaiters.splice(0)) w();
    this.settleRebuilt();
    super.afterStep();
  }
}
