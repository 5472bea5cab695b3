// The generation loop over the ring: the BatchGenerator's rules (admission against the KV pool,
// prefill one request at a time, decode in batches, stop on EOG / max tokens / stop sequences),
// but with several steps in flight at once so every stage of the ring has work: while one batch
// is at member 2, the next can be at member 1. A request is in at most one step at a time, so
// its caches on every stage grow in order; requests that became ready while the ring was busy
// are batched into the next step.
import { KiwiError } from '../errors.js';
import { sampleNext, settle, type FinishReason, type GenerateParams, type GenerateResult, type RequestProgress } from '../runtime/generation.js';
import type { KvBlockPool, KvReservation } from '../runtime/kv-pool.js';
import { StopMatcher } from '../runtime/stop-matcher.js';
import type { RingEngine } from './ring-engine.js';

export interface RingGeneratorOptions {
  /** Most requests decoded in one step. Default 8. */
  maxBatch?: number;
  /** Steps in flight at once; about the number of stages keeps each busy. Default 3. */
  maxInFlight?: number;
  refuseWhenFull?: boolean;
}

interface Active extends RequestProgress {
  id: number;
  reservation: KvReservation;
  pos: number;
  pending: number | undefined;
  /** Set once resolved or rejected. */
  done: boolean;
  /** In a step now: its caches are in use until the step returns. */
  stepping: boolean;
  onAbort: () => void;
}

export class RingGenerator {
  private readonly fresh: Active[] = [];
  private readonly ready: Active[] = [];
  private inFlight = 0;
  /** Requests inside the steps in flight. */
  private rowsInFlight = 0;
  private nextId = 1;
  private kvWaiters = 0;
  private readonly maxBatch: number;
  private readonly maxInFlight: number;

  constructor(
    readonly engine: RingEngine,
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

  async generate(p: GenerateParams): Promise<GenerateResult> {
    if (p.promptIds.length === 0) throw new KiwiError('USAGE', 'the prompt is empty; give at least one token');
    if (p.promptIds.length >= this.contextTokens) {
      throw new KiwiError('CONTEXT_EXCEEDED', `the prompt has ${p.promptIds.length} tokens but the context holds ${this.contextTokens}; shorten the prompt`, {
        promptTokens: p.promptIds.length,
        contextTokens: this.contextTokens,
      });
    }
    const maxTokens = Math.min(p.maxTokens, this.contextTokens - p.promptIds.length);
    if ((p.stop ?? []).some((x) => x.length > 0) && p.decoder === undefined) throw new Error('stop sequences need a decoder');
    const tokens = p.promptIds.length + maxTokens;
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
        id, p, maxTokens, reservation: r, pos: 0, history: [...p.promptIds], ids: [], pending: undefined,
        stop: new StopMatcher(p.stop ?? []), done: false, stepping: false, onAbort: () => this.abort(a),
        t0: performance.now(), ttftMs: 0, resolve, reject,
      };
      p.signal?.addEventListener('abort', a.onAbort, { once: true });
      this.fresh.push(a);
      this.pump();
    });
  }

  /** An aborted request waiting in a queue ends now; one inside a step ends when the step returns. */
  private abort(a: Active): void {
    if (a.done || a.stepping) return;
    for (const queue of [this.fresh, this.ready]) {
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
    while (this.inFlight < this.maxInFlight) {
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
      const rows = live.map((a) => ({ id: a.id, tokens: a.pending !== undefined ? [a.pending] : a.p.promptIds, pos: a.pos, cap: a.reservation.capacityTokens }));
      this.engine.step(rows).then(
        (logits) => {
          this.inFlight--;
          this.rowsInFlight -= live.length;
          live.forEach((a, i) => {
            a.stepping = false;
            a.pos += rows[i]!.tokens.length;
            try {
              this.accept(a, logits[i]!);
            } catch (err) {
              this.finish(a, err);
            }
          });
          this.pump();
        },
        (err: unknown) => {
          this.inFlight--;
          this.rowsInFlight -= live.length;
          for (const a of live) a.stepping = false;
          // A failed step ends the requests of that step, and only those.
          for (const a of live) this.finish(a, err);
          this.pump();
        },
      );
    }
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
