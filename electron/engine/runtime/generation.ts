// The generation loop over a stage chain: requests are admitted against the KV block pool,
// prefilled one at a time, then decoded together in batches (one token per request per step)
// until max tokens, an end-of-generation token or a stop sequence.
import { KiwiError } from '../errors.js';
import { KvBlockPool } from './kv-pool.js';
import type { KvReservation } from './kv-pool.js';
import type { Sampler } from './sampling.js';
import type { RequestCaches, StageChain } from './stage-chain.js';

export interface GenerateParams {
  promptIds: readonly number[];
  maxTokens: number;
  sampler: Sampler;
  /** End-of-generation tokens (EOS, EOT): generation stops after producing one; it is not part of `ids`. */
  isEndOfGeneration: (id: number) => boolean;
  /** With `stop`: the text of generated ids, to look for stop sequences. */
  textOf?: (ids: readonly number[]) => string;
  stop?: readonly string[];
  signal?: AbortSignal;
  onToken?: (id: number) => void;
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

interface Active {
  p: GenerateParams;
  maxTokens: number;
  caches: RequestCaches;
  reservation: KvReservation;
  history: number[];
  ids: number[];
  /** The token to feed next (sampled, not yet in the cache). */
  pending?: number;
  t0: number;
  ttftMs: number;
  resolve: (r: GenerateResult) => void;
  reject: (err: unknown) => void;
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

  constructor(
    readonly chain: StageChain,
    readonly pool: KvBlockPool,
    private readonly opts: BatchGeneratorOptions = {},
  ) {
    this.maxBatch = opts.maxBatch ?? 8;
  }

  async generate(p: GenerateParams): Promise<GenerateResult> {
    if (p.promptIds.length === 0) throw new KiwiError('USAGE', 'the prompt is empty; give at least one token');
    const context = this.chain.maxPositions;
    if (p.promptIds.length >= context) {
      throw new KiwiError(
        'CONTEXT_EXCEEDED',
        `the prompt has ${p.promptIds.length} tokens but the context holds ${context}; shorten the prompt`,
        { promptTokens: p.promptIds.length, contextTokens: context },
      );
    }
    const maxTokens = Math.min(p.maxTokens, context - p.promptIds.length);
    // Reserve the request's whole length up front: it can then never run out mid-generation.
    const reservation = await this.pool.reserve(p.promptIds.length + maxTokens, {
      wait: this.opts.refuseWhenFull !== true,
      ...(p.signal !== undefined ? { signal: p.signal } : {}),
    });
    return new Promise<GenerateResult>((resolve, reject) => {
      this.fresh.push({
        p,
        maxTokens,
        caches: this.chain.newCaches(reservation.capacityTokens),
        reservation,
        history: [...p.promptIds],
        ids: [],
        t0: performance.now(),
        ttftMs: 0,
        resolve,
        reject,
      });
      void this.run();
    });
  }

  private async run(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (this.fresh.length > 0 || this.decoding.length > 0) {
        const next = this.fresh.shift();
        // Prefill one request ([1, promptLength] tokens), or decode one token for each of up to
        // maxBatch requests in one forward pass.
        const batch = next !== undefined ? [next] : this.decoding.splice(0, this.maxBatch);
        const rows = batch.map((a) => ({ tokens: a.pending !== undefined ? [a.pending] : a.p.promptIds, caches: a.caches }));
        let logits: Float32Array[];
        try {
          for (const a of batch) a.p.signal?.throwIfAborted();
          logits = await this.chain.step(rows);
        } catch (err) {
          // A failed step ends the requests of that step, and only those.
          for (const a of batch) this.finish(a, err);
          continue;
        }
        batch.forEach((a, i) => {
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
    const id = a.p.sampler.sample(logits, a.history);
    if (a.ids.length === 0) a.ttftMs = performance.now() - a.t0;
    if (a.p.isEndOfGeneration(id)) return this.finish(a, 'stop');
    a.ids.push(id);
    a.history.push(id);
    a.p.onToken?.(id);
    const stop = a.p.stop ?? [];
    if (stop.length > 0 && a.p.textOf !== undefined) {
      const text = a.p.textOf(a.ids);
      if (stop.some((s) => s.length > 0 && text.includes(s))) return this.finish(a, 'stop');
    }
    if (a.ids.length >= a.maxTokens) return this.finish(a, 'length');
    a.pending = id;
    this.decoding.push(a);
  }

  private finish(a: Active, outcome: FinishReason | unknown): void {
    this.pool.release(a.reservation);
    if (outcome === 'stop' || outcome === 'length') {
      a.resolve({ ids: a.ids, finishReason: outcome, ttftMs: a.ttftMs, decodeMs: performance.now() - a.t0 - a.ttftMs });
    } else {
      a.reject(outcome);
    }
  }
}

/** One request on its own (a pool that holds exactly the chain's context). */
export function generate(chain: StageChain, p: GenerateParams): Promise<GenerateResult> {
  const pool = new KvBlockPool(1, chain.maxPositions, chain.kvBytesPerToken);
  return new BatchGenerator(chain, pool).generate(p);
}
