// The one generation loop, shared by the local stage chain (runtime/generation.ts BatchGenerator)
// and the ring (pipeline/ring-generator.ts RingGenerator): admission against the KV block pool,
// prefill one request at a time in chunks of PREFILL_CHUNK_TOKENS, alternating with the others'
// decode steps, so a long prompt holds them up for one chunk at most and a run's activations stay
// within what the planner admits (memory-model.ts scratchBytes); decode in batches (one token per request per step),
// accept (sample, hand on, stop on EOG / stop sequence / grammar / max tokens), finish and
// cancellation. A backend says only how a step runs (its `runStep`) and what a request holds there.
//
// Invariants: a request is in at most one step at a time (its caches grow in order), and it holds
// its KV reservation from admission until it settles, exactly once. Inputs were checked where they
// entered (the HTTP API with a 400, generate() for direct callers such as `kiwi generate`); here a
// bad request is a programming error and fails an assertion.
import assert from 'node:assert/strict';
import type { KvBlockPool, KvReservation } from './kv-pool.js';
import { PREFILL_CHUNK_TOKENS } from './memory-model.js';
import { PrefixCache, type PrefixCacheStats } from './prefix-cache.js';
import type { TokenConstraint } from './constrained/token-constraint.js';
import type { Sampler } from './sampling.js';
import { StopMatcher } from './stop-matcher.js';

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

/** Why a generation ended: the one declaration (the API's contract re-exports it). */
export type FinishReason = 'length' | 'stop';

export interface GenerateResult {
  ids: number[];
  finishReason: FinishReason;
  /** From admission to the first sampled token (prefill + sample). */
  ttftMs: number;
  /** Wall time after the first token until the end. */
  decodeMs: number;
}

/** One admitted request; `S` is what the backend holds for it (its caches, its fault count). */
export interface LoopRequest<S> {
  /** Unique within its loop; also the order of admission. */
  readonly id: number;
  readonly p: GenerateParams;
  /** At most this many generated tokens (the request's own, clamped to what the context leaves). */
  readonly maxTokens: number;
  readonly reservation: KvReservation;
  readonly state: S;
  /** Prompt and generated ids: the sampler's repetition window, and what a replay feeds. */
  readonly history: number[];
  /** Generated ids. */
  readonly ids: number[];
  /** Looks for stop sequences in the tail of the generated text only. */
  readonly stop: StopMatcher;
  /**
   * Positions in its caches. 0: the next step is the prompt's prefill; below history.length: the
   * next step feeds history[pos] (a decode step, or a replay of a generated token after a re-plan).
   */
  pos: number;
  /** In a step now: its caches are in use until the step returns. */
  stepping: boolean;
  /** Set once resolved or rejected. */
  done: boolean;
  readonly t0: number;
  ttftMs: number;
  readonly callbacks: { resolve: (r: GenerateResult) => void; reject: (err: unknown) => void; onAbort: () => void };
}

/** One row of a step: a request and the tokens it feeds at its position `request.pos`. */
export interface StepRow<S> {
  request: LoopRequest<S>;
  tokens: readonly number[];
  /**
   * Speculative decoding: the last tokens of `tokens` are these drafts, and the step returns the
   * logits of all drafts + 1 positions ([drafts + 1, vocab]) for the row.
   */
  drafts?: readonly number[];
  /**
   * Run as decode steps, in one trip (runtime/replay.ts): generated tokens replayed after a re-plan
   * (all but the last), or a verify step's token and drafts (an exact verify).
   */
  replay?: true;
}

/**
 * Speculative decoding's hooks (runtime/speculative.ts). A step of one decode row may carry drafts:
 * every stage runs them as one multi-token row, and verify() samples the positions in order,
 * keeps the accepted drafts and rolls `pos` back past the rejected ones (the backend drops those
 * cache positions before the request's next step).
 */
export interface SpeculationHook {
  /** Tokens guessed to follow a decoding request's history ([]: a plain step). */
  draft(a: LoopRequest<unknown>): readonly number[] | Promise<readonly number[]>;
  /** Samples the verified positions (logits [drafts + 1, vocab]) and says how the request ends, if it does. */
  verify(a: LoopRequest<unknown>, logits: Float32Array, drafts: readonly number[], stepMs: number): FinishReason | undefined;
  /** A plain step of `rows` rows took `ms` (the cost a draft must beat). */
  plainStep(rows: number, ms: number): void;
  /** The request ended (what the drafter keeps for it goes). */
  finished(a: LoopRequest<unknown>): void;
  /** Drafted rows run as replays (each position as its decode step, bit for bit), not as a chunk. */
  readonly exactVerify: boolean;
}

export interface GenerationLoopOptions {
  /** Most requests decoded in one step. Default 8. */
  maxBatch?: number;
  /** Steps in flight at once. Default 1 (a step must return before the next starts). */
  maxInFlight?: number;
  /** Refuse with KV_POOL_EXHAUSTED instead of waiting when the KV pool is full. */
  refuseWhenFull?: boolean;
  /** The prompt cache's bound in KV bytes (prefix-cache.ts); 0 or absent: no prompt cache. */
  promptCacheBytes?: number;
  /** Speculative decoding (runtime/speculative.ts); absent: none. */
  speculation?: SpeculationHook;
  /** Most prompt positions one prefill step runs (prefillEnd). Default PREFILL_CHUNK_TOKENS. */
  prefillChunk?: number;
}

export abstract class GenerationLoop<S> {
  /** Admitted, waiting for their prompt's prefill. */
  protected readonly fresh: LoopRequest<S>[] = [];
  /** Waiting for their next decode (or replay) step. */
  protected readonly ready: LoopRequest<S>[] = [];
  /** The last step started was a prompt's chunk: decode steps waiting go next. */
  private chunkLast = false;
  /** No step starts (the ring is being re-planned). */
  protected holding = false;
  protected inFlight = 0;
  /** Requests inside the steps in flight. */
  protected rowsInFlight = 0;
  protected maxInFlight: number;
  private readonly maxBatch: number;
  private nextId = 1;
  private kvWaiters = 0;
  /** Recent prompts' KV, reused by prompts that start the same way (prefix-cache.ts). */
  protected readonly prefixes: PrefixCache | undefined;

  constructor(
    readonly pool: KvBlockPool,
    /** Positions one request may use (prompt + generated). */
    readonly contextTokens: number,
    private readonly loopOptions: GenerationLoopOptions = {},
  ) {
    this.maxBatch = loopOptions.maxBatch ?? 8;
    this.maxInFlight = loopOptions.maxInFlight ?? 1;
    const cacheBytes = loopOptions.promptCacheBytes ?? 0;
    this.prefixes = cacheBytes > 0 ? new PrefixCache(pool, cacheBytes, (entries) => this.dropPrefixes(entries)) : undefined;
  }

  /** Runs one step of `rows` (in this order) and returns each row's logits of its last token. */
  protected abstract runStep(rows: readonly StepRow<S>[]): Promise<Float32Array[]>;
  /** What the backend holds for a newly admitted request of `capacityTokens` positions. */
  protected abstract open(id: number, capacityTokens: number): S;
  /** A request settled: the backend frees what it held for it. */
  protected close(_a: LoopRequest<S>): void {}
  /** Prompt cache: the request's caches start with the first `length` positions of entry `entry`. */
  protected seedPrefix(_a: LoopRequest<S>, _entry: number, _length: number): void {
    throw new Error('this backend has no prompt cache');
  }
  /** Prompt cache: keep the first `length` positions of the (finished) request's caches as entry `entry`. */
  protected keepPrefix(_a: LoopRequest<S>, _entry: number, _length: number): void {
    throw new Error('this backend has no prompt cache');
  }
  /** Prompt cache: entries evicted, their KV goes. */
  protected dropPrefixes(_entries: number[]): void {}
  /** The backend runs a row of generated tokens as their decode steps in one step (runtime/replay.ts); else one step per token. */
  protected replaysGenerated(): boolean {
    return false;
  }
  /** Requests the backend keeps outside `fresh` and `ready` (still live, abortable). */
  protected heldQueues(): LoopRequest<S>[][] {
    return [];
  }
  /** A step failed with `err`: true when the backend keeps its requests; else they fail with it. */
  protected keepAfterFailedStep(_batch: readonly LoopRequest<S>[], _err: unknown): boolean {
    return false;
  }
  /** A refusal of new requests before admission (a ring that cannot be formed), if any. */
  protected refusal(): unknown {
    return undefined;
  }

  /** Requests waiting for KV blocks (admitted requests being prefilled or decoded are not counted). */
  get waitingForKv(): number {
    return this.kvWaiters;
  }

  /** The prompt cache's hits, tokens reused and size; undefined when it is off. */
  get promptCacheStats(): PrefixCacheStats | undefined {
    return this.prefixes?.stats();
  }

  async generate(p: GenerateParams): Promise<GenerateResult> {
    const refused = this.refusal();
    if (refused !== undefined) throw refused;
    const { maxTokens, tokens } = requestLength(p, this.contextTokens);
    // Reserve the request's whole length up front: it can then never run out mid-generation.
    // While it waits for blocks it is counted in waitingForKv; an abort takes it out of the pool's queue.
    let reservation = this.pool.tryReserve(tokens);
    if (reservation === undefined) {
      this.kvWaiters++;
      try {
        reservation = await this.pool.reserve(tokens, { wait: this.loopOptions.refuseWhenFull !== true, ...(p.signal !== undefined ? { signal: p.signal } : {}) });
      } finally {
        this.kvWaiters--;
      }
    }
    if (p.signal?.aborted === true) {
      this.pool.release(reservation);
      throw p.signal.reason;
    }
    const id = this.newId();
    const state = this.open(id, reservation.capacityTokens);
    const r = reservation;
    return new Promise<GenerateResult>((resolve, reject) => {
      const a: LoopRequest<S> = {
        id, p, maxTokens, reservation: r, state, history: [...p.promptIds], ids: [], stop: new StopMatcher(p.stop ?? []),
        pos: 0, stepping: false, done: false, t0: performance.now(), ttftMs: 0,
        callbacks: { resolve, reject, onAbort: () => this.abort(a) },
      };
      p.signal?.addEventListener('abort', a.callbacks.onAbort, { once: true });
      const hit = this.prefixes?.lookup(id, p.promptIds);
      if (hit !== undefined) {
        this.seedPrefix(a, hit.entry, hit.length);
        a.pos = hit.length;
      }
      this.fresh.push(a);
      this.pump();
    });
  }

  protected newId(): number {
    return this.nextId++;
  }

  /**
   * Starts steps while there is work and room: one request's prefill ([1, prompt] tokens), or one
   * token for each of up to maxBatch requests. With several steps in flight (the ring), decoding
   * requests travel in groups of about (decoding requests / steps in flight): a group that waits
   * for its stragglers makes one batched step instead of several single-row ones, and the groups
   * keep every stage busy.
   */
  protected pump(): void {
    while (this.inFlight < this.maxInFlight && !this.holding) {
      // A prompt in chunks lets the decode steps waiting go between two of its chunks.
      const decodeFirst = this.chunkLast && this.ready.length > 0 && this.fresh.length > 0 && this.fresh[0]!.pos > 0;
      const next = decodeFirst ? undefined : (this.fresh.shift() ?? this.nextReplay());
      if (next === undefined && this.inFlight > 0) {
        const target = Math.min(this.maxBatch, Math.ceil((this.ready.length + this.rowsInFlight) / this.maxInFlight));
        if (this.ready.length < target) return;
      }
      const batch = next !== undefined ? [next] : this.ready.splice(0, this.maxBatch);
      if (batch.length === 0) return;
      this.inFlight++;
      this.rowsInFlight += batch.length;
      for (const a of batch) a.stepping = true;
      // A prompt's prefill starts after the prefix its caches were seeded with (0 without one).
      const rows = batch.map((a): StepRow<S> =>
        a === next && replayLength(a) > 1
          ? { request: a, tokens: a.history.slice(a.pos, -1), replay: true }
          : { request: a, tokens: a.pos < a.p.promptIds.length ? a.p.promptIds.slice(a.pos, prefillEnd(a.pos, a.p.promptIds.length, this.loopOptions.prefillChunk)) : [a.history[a.pos]!] });
      this.chunkLast = next !== undefined && next.pos < next.p.promptIds.length;
      // Drafts ride on a step of one row only: several rows are a batch, which the stages run one token each.
      const spec = this.loopOptions.speculation;
      // A drafter that runs a model drafts before the step starts; its time counts in the step's.
      const t0 = performance.now();
      const drafting = spec !== undefined && rows.length === 1 ? addDrafts(rows[0]!, spec) : undefined;
      (drafting === undefined ? this.runStep(rows) : drafting.then(() => this.runStep(rows))).then(
        (logits) => {
          this.stepEnded(batch);
          const stepMs = performance.now() - t0;
          if (rows[0]?.drafts === undefined) spec?.plainStep(rows.length, stepMs);
          rows.forEach(({ request: a, tokens, drafts }, i) => {
            a.pos += tokens.length;
            try {
              if (a.p.signal?.aborted === true) this.finish(a, a.p.signal.reason);
              // More of its prompt to prefill: its next chunk goes first among the prefills.
              else if (a.pos < a.p.promptIds.length) this.fresh.unshift(a);
              // Still replaying tokens it had already generated: their logits were used the first time.
              else if (a.pos < a.history.length) this.ready.push(a);
              else if (drafts !== undefined) this.settle(a, spec!.verify(a, logits[i]!, drafts, stepMs));
              else this.accept(a, logits[i]!);
            } catch (err) {
              this.finish(a, err);
            }
          });
          this.afterStep();
        },
        (err: unknown) => {
          this.stepEnded(batch);
          // A failed step ends the requests of that step, and only those (unless the backend keeps them).
          if (!this.keepAfterFailedStep(batch, err)) for (const a of batch) this.finish(a, err);
          this.afterStep();
        },
      );
    }
  }

  /** A request resumed after a re-plan with generated tokens to replay: it goes alone, as a prefill does. */
  private nextReplay(): LoopRequest<S> | undefined {
    if (!this.replaysGenerated()) return undefined;
    const i = this.ready.findIndex((a) => replayLength(a) > 1);
    return i < 0 ? undefined : this.ready.splice(i, 1)[0];
  }

  private stepEnded(batch: readonly LoopRequest<S>[]): void {
    this.inFlight--;
    this.rowsInFlight -= batch.length;
    for (const a of batch) {
      a.stepping = false;
      this.prefixes?.unpin(a.id); // its first step has copied what it was seeded with, on every stage
    }
  }

  /** After any step in flight returned: start the next ones. */
  protected afterStep(): void {
    this.pump();
  }

  /** Samples from a request's logits and either queues it for its next step or finishes it. */
  private accept(a: LoopRequest<S>, logits: Float32Array): void {
    this.settle(a, sampleNext(a, logits));
  }

  private settle(a: LoopRequest<S>, outcome: FinishReason | undefined): void {
    // Aborted from inside its own onToken: it has ended (and freed its caches) already.
    if (a.done) return;
    if (outcome !== undefined) return this.finish(a, outcome);
    this.ready.push(a);
  }

  /**
   * An aborted request waiting in a queue ends now. One inside a step ends as soon as the step
   * returns (its caches are in use until then), without sampling its logits.
   */
  private abort(a: LoopRequest<S>): void {
    if (a.done || a.stepping) return;
    for (const queue of [this.fresh, this.ready, ...this.heldQueues()]) {
      const i = queue.indexOf(a);
      if (i >= 0) queue.splice(i, 1);
    }
    this.finish(a, a.p.signal?.reason);
  }

  /** Ends a request: frees its KV blocks and what the backend holds, then resolves (finish reason) or rejects (anything else). */
  protected finish(a: LoopRequest<S>, outcome: FinishReason | unknown): void {
    if (a.done) return;
    a.done = true;
    a.p.signal?.removeEventListener('abort', a.callbacks.onAbort);
    this.pool.release(a.reservation);
    this.prefixes?.unpin(a.id);
    this.loopOptions.speculation?.finished(a);
    // A request that ended normally has its whole prompt in its caches: the prompt cache may keep it.
    const entry = outcome === 'stop' || outcome === 'length' ? this.prefixes?.store(a.p.promptIds) : undefined;
    if (entry !== undefined) this.keepPrefix(a, entry, a.p.promptIds.length);
    this.close(a);
    if (outcome === 'stop' || outcome === 'length') {
      a.callbacks.resolve({ ids: a.ids, finishReason: outcome, ttftMs: a.ttftMs, decodeMs: performance.now() - a.t0 - a.ttftMs });
    } else {
      a.callbacks.reject(outcome);
    }
  }
}

/**
 * What a valid request generates at most and the positions it holds in all. The loop's inputs were
 * checked at their entry (checkGenerateRequest, the API): a prompt of at least one token that leaves
 * room for one generated token, and a decoder where there are stop sequences.
 */
function requestLength(p: GenerateParams, contextTokens: number): { maxTokens: number; tokens: number } {
  assert(p.promptIds.length > 0 && p.promptIds.length < contextTokens, `a request needs a prompt of 1 to ${contextTokens - 1} tokens, got ${p.promptIds.length} (its entry point checks this)`);
  assert(p.decoder !== undefined || !(p.stop ?? []).some((x) => x.length > 0), 'stop sequences need a decoder');
  const maxTokens = Math.min(p.maxTokens, contextTokens - p.promptIds.length);
  return { maxTokens, tokens: p.promptIds.length + maxTokens };
}

/**
 * Samples a request's next token from its logits and hands it on (decoder, onToken). Returns the
 * finish reason when the request ends here (end of generation, stop sequence, grammar complete, max
 * tokens); else undefined, with the token the last of `history`, to feed next.
 */
export function sampleNext(a: LoopRequest<unknown>, logits: Float32Array, draft?: number): FinishReason | undefined {
  const constraint = a.p.constraint;
  let row = logits;
  if (constraint !== undefined) {
    row = Float32Array.from(logits); // the step's logits may be shared; the mask writes a copy
    constraint.maskLogits(row);
  }
  // With a draft (speculative decoding), the same distribution; the draft is kept when it comes out.
  const id = draft === undefined ? a.p.sampler.sample(row, a.history) : a.p.sampler.sampleWithDraft(row, a.history, draft);
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
  return undefined;
}

/**
 * Where a prefill step from `pos` ends: PREFILL_CHUNK_TOKENS on, or the prompt's end. A chunk never
 * leaves one token alone for the last step: a step of two or more positions on top of a cache gives
 * the bits of one whole prefill wherever the cut falls, a one-token step does not
 * (prefix-cache.exact.test.ts), so chunked and whole prefills sample the same tokens.
 */
export function prefillEnd(pos: number, promptLength: number, chunk = PREFILL_CHUNK_TOKENS): number {
  assert(chunk >= 2, `a prefill chunk has at least 2 positions, got ${chunk}`);
  const left = promptLength - pos;
  if (left <= chunk) return promptLength;
  return left - chunk === 1 ? pos + chunk - 1 : pos + chunk;
}

/** Generated tokens whose caches a resumed request still rebuilds, the last one's step excluded (it samples). */
function replayLength(a: LoopRequest<unknown>): number {
  return a.pos < a.p.promptIds.length ? 0 : a.history.length - 1 - a.pos;
}

/**
 * Adds the hook's drafts to a decode row (not to a prefill or to the replay of generated tokens);
 * a promise when the drafter answers later.
 */
function addDrafts<S>(row: StepRow<S>, spec: SpeculationHook): Promise<void> | undefined {
  const a = row.request;
  if (a.pos < a.p.promptIds.length || a.pos !== a.history.length - 1) return undefined;
  const add = (drafts: readonly number[]): void => {
    if (drafts.length === 0) return;
    row.tokens = [...row.tokens, ...drafts];
    row.drafts = drafts;
    if (spec.exactVerify) row.replay = true;
  };
  const drafts = spec.draft(a);
  if ('then' in drafts) return drafts.then(add);
  add(drafts);
  return undefined;
}
