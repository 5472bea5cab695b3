// The generation loop over the ring: the BatchGenerator's rules (admission against the KV pool,
// prefill one request at a time, decode in batches, stop on EOG / max tokens / stop sequences),
// but with several steps in flight at once so every stage of the ring has work: while one batch
// is at member 2, the next can be at member 1. A request is in at most one step at a time, so
// its caches on every stage grow in order; requests that became ready while the ring was busy
// are batched into the next step.
//
// Recovery (a member died, the ring is re-planned): a step that fails with a ring error does not end
// its requests. They are held, the host is told (onRingFault), and no step starts until resume()
// hands over the next ring's engine. Then every live request rebuilds its caches there (those on
// the old ring are gone) by the same computation that built them: its prompt as one prefill, then
// the tokens generated so far as decode steps, batched with the other requests' steps (a decode
// row's result does not depend on its batch). The next token follows bit for bit as if nothing
// happened, and the client's stream simply continues. One prefill of prompt + generated tokens
// would be quicker but is exact only up to float rounding (its attention sums in another order,
// runtime/recompute.test.ts), which flips near-tied tokens: a stream could change mid-way.
import { isKiwiError, KiwiError } from '../errors.js';
import { requestLength, sampleNext, settle, type FinishReason, type GenerateParams, type GenerateResult, type RequestProgress } from '../runtime/generation.js';
import type { KvBlockPool, KvReservation } from '../runtime/kv-pool.js';
import { StopMatcher } from '../runtime/stop-matcher.js';
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
}

/** Step errors that a new ring cures: a link or member went away, or a stage lost a request's cache. */
const RING_FAULTS = new Set(['RING_BROKEN', 'RING_PROTOCOL', 'RING_NOT_READY', 'RING_REPLAN', 'SESSION_DISCONNECTED']);

interface Active extends RequestProgress {
  id: number;
  reservation: KvReservation;
  /**
   * Positions in its caches on the current ring. 0: the next step is the prompt's prefill; below
   * history.length: the next step feeds history[pos] (a decode step, or a replay after a re-plan).
   */
  pos: number;
  /** Steps of this request that failed with the ring. */
  faults: number;
  /** Set once resolved or rejected. */
  done: boolean;
  /** In a step now: its caches are in use until the step returns. */
  stepping: boolean;
  onAbort: () => void;
}

export class RingGenerator {
  private readonly fresh: Active[] = [];
  private readonly ready: Active[] = [];
  /** Requests of failed steps, held until the next ring. */
  private readonly stalled: Active[] = [];
  /** No step starts: the ring is being re-planned. */
  private holding = false;
  /** Set while no ring can serve: new requests fail with it at once. */
  private unavailable: KiwiError | undefined;
  private idleWaiters: Array<() => void> = [];
  private inFlight = 0;
  /** Requests inside the steps in flight. */
  private rowsInFlight = 0;
  private nextId = 1;
  private kvWaiters = 0;
  private readonly maxBatch: number;
  private maxInFlight: number;

  constructor(
    private engine: RingEngine,
    readonly pool: KvBlockPool,
    readonly contextTokens: number,
    private readonly opts: RingGeneratorOptions = {},
  ) {
    this.maxBatch = opts.maxBatch ?? 8;
    this.maxInFlight = opts.maxInFlight ?? 3;
  }

  /** Requests waiting for KV blocks. */
  get waitingForKv(): number {
    return this.kvWaiters;
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
   * as a prefill and then one decode step per token generated so far (see the header). Returns how
   * many requests were resumed. Call after hold().
   */
  resume(engine: RingEngine, opts: { maxInFlight?: number } = {}): number {
    if (this.inFlight > 0) throw new Error('resume() while steps are in flight; await hold() first');
    this.engine = engine;
    if (opts.maxInFlight !== undefined) this.maxInFlight = opts.maxInFlight;
    this.unavailable = undefined;
    const live = [...this.stalled, ...this.fresh, ...this.ready].sort((a, b) => a.id - b.id);
    this.stalled.length = 0;
    this.ready.length = 0;
    this.fresh.length = 0;
    for (const a of live) {
      engine.open(a.id, a.reservation.capacityTokens);
      a.pos = 0;
      this.fresh.push(a);
    }
    this.holding = false;
    this.pump();
    return live.length;
  }

  /** No ring can be formed in time: held and waiting requests fail with `err`, and so do new ones until resume(). */
  failWaiting(err: KiwiError): void {
    this.unavailable = err;
    for (const queue of [this.stalled, this.fresh, this.ready]) {
      for (const a of queue.splice(0)) this.finish(a, err);
    }
  }

  async generate(p: GenerateParams): Promise<GenerateResult> {
    if (this.unavailable !== undefined) throw this.unavailable;
    const { maxTokens, tokens } = requestLength(p, this.contextTokens);
    let reservation = this.pool.tryReserve(tokens);
    if (reservation === undefined) {
      this.kvWaiters++;
      try {
        reservation = await this.pool.reserve(tokens, { wait: this.opts.refuseWhenFull !== true, ...(p.signal !== undefined ? { signal: p.signal } : {}) });
      } finally {
        this.kvWaiters--;
      }
    }
    if (p.signal?.aborted === true) {
      this.pool.release(reservation);
      throw p.signal.reason;
    }
    const id = this.nextId++;
    this.engine.open(id, reservation.capacityTokens);
    const r = reservation;
    return new Promise<GenerateResult>((resolve, reject) => {
      const a: Active = {
        id, p, maxTokens, reservation: r, pos: 0, faults: 0, history: [...p.promptIds], ids: [],
        stop: new StopMatcher(p.stop ?? []), done: false, stepping: false, onAbort: () => this.abort(a),
        t0: performance.now(), ttftMs: 0, resolve, reject,
      };
      p.signal?.addEventListener('abort', a.onAbort, { once: true });
      this.fresh.push(a);
      this.pump();
    });
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
    const id = this.nextId++;
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

  /** An aborted request waiting in a queue ends now; one inside a step ends when the step returns. */
  private abort(a: Active): void {
    if (a.done || a.stepping) return;
    for (const queue of [this.fresh, this.ready, this.stalled]) {
      const i = queue.indexOf(a);
      if (i >= 0) queue.splice(i, 1);
    }
    this.finish(a, a.p.signal?.reason);
  }

  /**
   * Starts steps while there is work and room in the ring. Decoding requests travel in groups of
   * about (decoding requests / steps in flight): a group that waits for its stragglers makes one
   * batched step instead of several single-row ones, and the groups keep every stage busy.
   */
  private pump(): void {
    while (this.inFlight < this.maxInFlight && !this.holding) {
      const next = this.fresh.shift();
      if (next === undefined && this.inFlight > 0) {
        const target = Math.min(this.maxBatch, Math.ceil((this.ready.length + this.rowsInFlight) / this.maxInFlight));
        if (this.ready.length < target) return;
      }
      const batch = next !== undefined ? [next] : this.ready.splice(0, this.maxBatch);
      if (batch.length === 0) return;
      const live = batch;
      this.inFlight++;
      this.rowsInFlight += live.length;
      for (const a of live) a.stepping = true;
      const rows = live.map((a) => ({ id: a.id, tokens: a.pos === 0 ? a.p.promptIds : [a.history[a.pos]!], pos: a.pos, cap: a.reservation.capacityTokens }));
      this.engine.step(rows).then(
        (logits) => {
          this.inFlight--;
          this.rowsInFlight -= live.length;
          live.forEach((a, i) => {
            a.stepping = false;
            a.pos += rows[i]!.tokens.length;
            try {
              // Still replaying tokens it had already generated: their logits were used the first time.
              if (a.pos >= a.history.length) this.accept(a, logits[i]!);
              else if (a.p.signal?.aborted === true) this.finish(a, a.p.signal.reason);
              else this.ready.push(a);
            } catch (err) {
              this.finish(a, err);
            }
          });
          this.afterStep();
        },
        (err: unknown) => {
          this.inFlight--;
          this.rowsInFlight -= live.length;
          for (const a of live) a.stepping = false;
          if (isKiwiError(err) && RING_FAULTS.has(err.code)) {
            // The ring failed, not the request: hold it for the next ring.
            for (const a of live) {
              if (a.done) continue;
              if (a.p.signal?.aborted === true) this.finish(a, a.p.signal.reason);
              // A re-plan the host chose (a member left or returned) is nobody's fault; a step that failed counts.
              else if (err.code !== 'RING_REPLAN' && ++a.faults > (this.opts.maxRecomputes ?? 4)) this.finish(a, err);
              else this.stalled.push(a);
            }
            this.holding = true;
            this.opts.onRingFault?.(err);
          } else {
            // A failed step ends the requests of that step, and only those.
            for (const a of live) this.finish(a, err);
          }
          this.afterStep();
        },
      );
    }
  }

  private afterStep(): void {
    if (this.inFlight === 0) for (const w of this.idleWaiters.splice(0)) w();
    this.pump();
  }

  private accept(a: Active, logits: Float32Array): void {
    if (a.p.signal?.aborted === true) return this.finish(a, a.p.signal.reason);
    const outcome = sampleNext(a, logits);
    if (outcome !== undefined) return this.finish(a, outcome);
    this.ready.push(a);
  }

  private finish(a: Active, outcome: FinishReason | unknown): void {
    if (a.done) return;
    a.done = true;
    a.p.signal?.removeEventListener('abort', a.onAbort);
    this.pool.release(a.reservation);
    // Every stage drops the request's caches (a `free` event travels the ring).
    this.engine.free([a.id]);
    settle(a, outcome);
  }
}
