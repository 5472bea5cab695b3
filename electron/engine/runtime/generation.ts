// The generation loop over a stage chain: requests are admitted against the KV block pool,
// prefilled one at a time, then decoded together in batches (one token per request per step)
// until max tokens, an end-of-generation token or a stop sequence. A request that is aborted
// leaves its queue at once and ends alone: the others of its batch go on.
import { KiwiError } from '../errors.js';
import { KvBlockPool } from './kv-pool.js';
import type { KvReservation } from './kv-pool.js';
import type { TokenConstraint } from './constrained/token-constraint.js';
import type { Sampler } from './sampling.js';
import { StopMatcher } from './stop-matcher.js';
import type { RequestCaches, StageChain } from './stage-chain.js';

export interface GenerateParams {
  promptIds: readonly number[];
  maxTokens: number;
  sampler: Sampler;
  /** End-of-generation tokens (EOS, EOT): generation stops after producing one; it is not part of `ids`. */
  isEndOfGeneration: (id: number) => boolean;
  /**
   * The text each generated id adds (a tokenizer's stream decoder: '' inside an unfinished
   * character). Needed for `stop`; its pieces are also handed to `onToken`.
   */
  decoder?: { push(id: number): string };
  stop?: readonly string[];
  /** Aborting ends this request (rejecting with the reason) and frees its KV blocks; no other request is touched. */
  signal?: AbortSignal;
  /** Each generated id, with the text it added ('' without a decoder). */
  onToken?: (id: number, text: string) => void;
  /**
   * Constrained decoding (response_format, forced tool calls): masks each step's logits before
   * sampling and follows the sampled tokens; the generation ends ('stop') once the grammar is complete.
   */
  constraint?: TokenConstraint;
}

export type FinishReason = 'length' | 'stop';

export interface GenerateResult {
  ids: number[];
  finishReason: FinishReason;
  /** From admission to the first sampled token (prefill + sample). */
  ttftMs: number;
  /** Wall time after the first token until the end. */
  decodeMs: number;
}

/** What sampleNext and settle read and write of a request (BatchGenerator's and RingGenerator's alike). */
export interface RequestProgress {
  p: GenerateParams;
  maxTokens: number;
  /** Prompt and generated ids: the sampler's repetition window. */
  history: number[];
  ids: number[];
  /** Looks for stop sequences in the tail of the generated text only. */
  stop: StopMatcher;
  /** The token to feed next (sampled, not yet in the cache). */
  pending?: number | undefined;
  t0: number;
  ttftMs: number;
  resolve: (r: GenerateResult) => void;
  reject: (err: unknown) => void;
}

interface Active extends RequestProgress {
  caches: RequestCaches;
  reservation: KvReservation;
  /** Set once the request has been resolved or rejected. */
  done: boolean;
  onAbort: () => void;
}

export interface BatchGeneratorOptions {
  /** Most requests decoded in one forward pass. */
  maxBatch?: number;
  /** Refuse instead of waiting when the KV pool is full. */
  refuseWhenFull?: boolean;
}

export class BatchGenerator {
  private readonly fresh: Active[] = [];
  private readonly decoding: Active[] = [];
  private running = false;
  private readonly maxBatch: number;
  private kvWaiters = 0;

  constructor(
    readonly chain: StageChain,
    readonly pool: KvBlockPool,
    private readonly opts: BatchGeneratorOptions = {},
  ) {
    this.maxBatch = opts.maxBatch ?? 8;
  }

  async generate(p: GenerateParams): Promise<GenerateResult> {
    const { maxTokens, tokens } = requestLength(p, this.chain.maxPositions);
    // Reserve the request's whole length up front: it can then never run out mid-generation.
    // While it waits for blocks it is counted in waitingForKv; an abort takes it out of the pool's queue.
    let reservation = this.pool.tryReserve(tokens);
    if (reservation === undefined) {
      this.kvWaiters++;
      try {
        reservation = await this.pool.reserve(tokens, {
          wait: this.opts.refuseWhenFull !== true,
          ...(p.signal !== undefined ? { signal: p.signal } : {}),
        });
      } finally {
        this.kvWaiters--;
      }
    }
    if (p.signal?.aborted === true) {
      this.pool.release(reservation);
      throw p.signal.reason;
    }
    return new Promise<GenerateResult>((resolve, reject) => {
      const a: Active = {
        p,
        maxTokens,
        caches: this.chain.newCaches(reservation.capacityTokens),
        reservation,
        history: [...p.promptIds],
        ids: [],
        stop: new StopMatcher(p.stop ?? []),
        done: false,
        onAbort: () => this.abort(a),
        t0: performance.now(),
        ttftMs: 0,
        resolve,
        reject,
      };
      p.signal?.addEventListener('abort', a.onAbort, { once: true });
      this.fresh.push(a);
      void this.run();
    });
  }

  /** Requests waiting for KV blocks (admitted requests being prefilled or decoded are not counted). */
  get waitingForKv(): number {
    return this.kvWaiters;
  }

  /**
   * Ends an aborted request now when it waits in a queue. One inside the running step is ended as
   * soon as the step returns (its caches are in use until then), without sampling its logits.
   */
  private abort(a: Active): void {
    if (a.done) return;
    for (const queue of [this.fresh, this.decoding]) {
      const i = queue.indexOf(a);
      if (i >= 0) {
        queue.splice(i, 1);
        this.finish(a, a.p.signal?.reason);
        return;
      }
    }
  }

  private async run(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (this.fresh.length > 0 || this.decoding.length > 0) {
        const next = this.fresh.shift();
        // Prefill one request ([1, promptLength] tokens), or decode one token for each of up to
        // maxBatch requests in one forward pass. Aborted requests leave the queues when they abort,
        // so the batch holds live requests only.
        const batch = next !== undefined ? [next] : this.decoding.splice(0, this.maxBatch);
        const rows = batch.map((a) => ({ tokens: a.pending !== undefined ? [a.pending] : a.p.promptIds, caches: a.caches }));
        let logits: Float32Array[];
        try {
          logits = await this.chain.step(rows);
        } catch (err) {
          // A failed step ends the requests of that step, and only those.
          for (const a of batch) this.finish(a, err);
          continue;
        }
        batch.forEach((a, i) => {
          if (a.p.signal?.aborted === true) return this.finish(a, a.p.signal.reason);
          try {
            this.accept(a, logits[i]!);
          } catch (err) {
            this.finish(a, err);
          }
        });
      }
    } finally {
      this.running = false;
    }
  }

  /** Samples from a request's logits and either queues it for the next decode step or finishes it. */
  private accept(a: Active, logits: Float32Array): void {
    const outcome = sampleNext(a, logits);
    if (outcome !== undefined) return this.finish(a, outcome);
    this.decoding.push(a);
  }

  private finish(a: Active, outcome: FinishReason | unknown): void {
    if (a.done) return;
    a.done = true;
    a.p.signal?.removeEventListener('abort', a.onAbort);
    this.pool.release(a.reservation);
    settle(a, outcome);
  }
}

/**
 * The one check of a request against the context, shared by every generation loop (BatchGenerator,
 * the RingGenerator): a prompt of at least one token that leaves room for one generated token.
 * Returns the tokens it may generate and the positions it holds in all. Entry points (the API, the
 * CLI) check their inputs first with their own wording; this is what a direct caller hits.
 */
export function requestLength(p: GenerateParams, contextTokens: number): { maxTokens: number; tokens: number } {
  if (p.promptIds.length === 0) throw new KiwiError('USAGE', 'the prompt is empty; give at least one token');
  if (p.promptIds.length >= contextTokens) {
    throw new KiwiError('CONTEXT_EXCEEDED', `the prompt has ${p.promptIds.length} tokens but the context holds ${contextTokens}; shorten the prompt`, {
      promptTokens: p.promptIds.length,
      contextTokens,
    });
  }
  if ((p.stop ?? []).some((x) => x.length > 0) && p.decoder === undefined) throw new Error('stop sequences need a decoder');
  const maxTokens = Math.min(p.maxTokens, contextTokens - p.promptIds.length);
  return { maxTokens, tokens: p.promptIds.length + maxTokens };
}

/**
 * Samples a request's next token from its logits and hands it on (decoder, onToken). Returns the
 * finish reason when the request ends here (end of generation, stop sequence, max tokens); else
 * undefined, with the token in `pending` to feed next.
 */
export function sampleNext(a: RequestProgress, logits: Float32Array): FinishReason | undefined {
  const constraint = a.p.constraint;
  let row = logits;
  if (constraint !== undefined) {
    row = Float32Array.from(logits); // the step's logits may be shared; the mask writes a copy
    constraint.maskLogits(row);
  }
  const id = a.p.sampler.sample(row, a.history);
  if (a.ids.length === 0) a.ttftMs = performance.now() - a.t0;
  if (a.p.isEndOfGeneration(id)) return 'stop';
  constraint?.accept(id);
  a.ids.push(id);
  a.history.push(id);
  const piece = a.p.decoder?.push(id) ?? '';
  a.p.onToken?.(id, piece);
  if (a.stop.push(piece)) return 'stop';
  if (constraint?.finished === true) return 'stop';
  if (a.ids.length >= a.maxTokens) return 'length';
  a.pending = id;
  return undefined;
}

/** Resolves a finished request with its result, or rejects it with whatever else ended it. */
export function settle(a: RequestProgress, outcome: FinishReason | unknown): void {
  if (outcome === 'stop' || outcome === 'length') {
    a.resolve({ ids: a.ids, finishReason: outcome, ttftMs: a.ttftMs, decodeMs: performance.now() - a.t0 - a.ttftMs });
  } else {
    a.reject(outcome);
  }
}

/** One request on its own (a pool that holds exactly the chain's context). */
export function generate(chain: StageChain, p: GenerateParams): Promise<GenerateResult> {
  const pool = new KvBlockPool(1, chain.maxPositions, chain.kvBytesPerToken);
  return new BatchGenerator(chain, pool).generate(p);
}
