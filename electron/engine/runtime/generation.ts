// Generation over a stage chain in this process: the shared loop (generation-loop.ts) with steps
// run through the chain, one at a time, on caches of each request's own. generate() runs one
// request alone and is the entry point of direct callers (`kiwi generate`, tests, benchmarks): it
// checks the request against the context and says what to change.
import { KiwiError } from '../errors.js';
import { GenerationLoop, type GenerateParams, type GenerateResult, type LoopRequest, type StepRow } from './generation-loop.js';
import { KvBlockPool } from './kv-pool.js';
import { PrefixKvStore } from './prefix-cache-kv.js';
import { speculationFor, type SpeculativeDecoding, type SpeculativeMode } from './speculative.js';
import type { Drafter } from './prompt-lookup.js';
import { freeCache, rollbackCache } from './kv-store.js';
import type { RequestCaches, StageChain } from './stage-chain.js';

export interface BatchGeneratorOptions {
  /** Most requests decoded in one forward pass. Default 8. */
  maxBatch?: number;
  /** Refuse instead of waiting when the KV pool is full. */
  refuseWhenFull?: boolean;
  /** The prompt cache's bound in KV bytes; 0 or absent: none. */
  promptCacheBytes?: number;
  /** Speculative decoding (runtime/speculative.ts); default off. Needs a head that verifies. */
  speculative?: SpeculativeMode;
  /** Its drafter; default prompt lookup. */
  drafter?: Drafter;
  /** Most prompt positions one prefill step runs (generation-loop.ts prefillEnd); default 128. */
  prefillChunk?: number;
}

/**
 * Requests are admitted against the KV block pool, prefilled one at a time, then decoded together
 * in batches until max tokens, an end-of-generation token or a stop sequence. A request that is
 * aborted leaves its queue at once and ends alone: the others of its batch go on.
 */
export class BatchGenerator extends GenerationLoop<RequestCaches> {
  /** The prompt cache's KV, one cache per stage per entry. */
  private readonly prefixKv: PrefixKvStore;
  /** Speculation's counters (for /health); undefined when off. */
  readonly speculation: SpeculativeDecoding | undefined;

  constructor(
    readonly chain: StageChain,
    pool: KvBlockPool,
    opts: BatchGeneratorOptions = {},
  ) {
    const speculation = chain.verifies ? speculationFor(opts.speculative, opts.drafter) : undefined;
    super(pool, chain.maxPositions, { ...opts, maxInFlight: 1, ...(speculation !== undefined ? { speculation } : {}) });
    this.speculation = speculation;
    this.prefixKv = new PrefixKvStore();
  }

  protected override seedPrefix(a: LoopRequest<RequestCaches>, entry: number, length: number): void {
    const seeded = this.prefixKv.seed(entry, length, a.state[0]!.capacity);
    if (seeded === undefined) throw new Error(`prompt cache entry ${entry} is not held`);
    for (const c of a.state.splice(0, a.state.length, ...seeded)) freeCache(c);
  }

  protected override keepPrefix(a: LoopRequest<RequestCaches>, entry: number, length: number): void {
    this.prefixKv.keep(entry, a.state, length);
  }

  protected override dropPrefixes(entries: number[]): void {
    this.prefixKv.drop(entries);
  }

  protected open(_id: number, capacityTokens: number): RequestCaches {
    return this.chain.newCaches(capacityTokens);
  }

  protected override close(a: LoopRequest<RequestCaches>): void {
    for (const c of a.state) freeCache(c);
  }

  protected runStep(rows: readonly StepRow<RequestCaches>[]): Promise<Float32Array[]> {
    // Positions past `pos` are drafts a verify step rejected: dropped before the caches grow again.
    for (const r of rows) for (const c of r.request.state) if (c.length > r.request.pos) rollbackCache(c, r.request.pos);
    const drafts = rows[0]?.drafts;
    return this.chain.step(rows.map((r) => ({ tokens: r.tokens, caches: r.request.state })), { ...(drafts !== undefined ? { logitsTail: drafts.length + 1 } : {}), ...(rows[0]?.replay === true ? { replay: true } : {}) });
  }
}

/**
 * The entry check of a request that no API has checked: a prompt of at least one token that leaves
 * room for one generated token in `contextTokens`. Throws KiwiError USAGE / CONTEXT_EXCEEDED.
 */
function checkGenerateRequest(p: GenerateParams, contextTokens: number): void {
  if (p.promptIds.length === 0) throw new KiwiError('USAGE', 'the prompt is empty; give at least one token');
  if (p.promptIds.length >= contextTokens) {
    throw new KiwiError('CONTEXT_EXCEEDED', `the prompt has ${p.promptIds.length} tokens but the context holds ${contextTokens}; shorten the prompt`, {
      promptTokens: p.promptIds.length,
      contextTokens,
    });
  }
}

/** One request on its own (a pool that holds exactly the chain's context), checked first. */
export async function generate(chain: StageChain, p: GenerateParams): Promise<GenerateResult> {
  checkGenerateRequest(p, chain.maxPositions);
  const pool = new KvBlockPool(1, chain.maxPositions, chain.kvBytesPerToken);
  return new BatchGenerator(chain, pool).generate(p);
}
