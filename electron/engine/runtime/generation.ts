// Generation over a stage chain in this process: the shared loop (generation-loop.ts) with steps
// run through the chain, one at a time, on caches of each request's own. generate() runs one
// request alone and is the entry point of direct callers (`kiwi generate`, tests, benchmarks): it
// checks the request against the context and says what to change.
import { KiwiError } from '../errors.js';
import { GenerationLoop, type GenerateParams, type GenerateResult, type StepRow } from './generation-loop.js';
import { KvBlockPool } from './kv-pool.js';
import type { RequestCaches, StageChain } from './stage-chain.js';

export interface BatchGeneratorOptions {
  /** Most requests decoded in one forward pass. Default 8. */
  maxBatch?: number;
  /** Refuse instead of waiting when the KV pool is full. */
  refuseWhenFull?: boolean;
}

/**
 * Requests are admitted against the KV block pool, prefilled one at a time, then decoded together
 * in batches until max tokens, an end-of-generation token or a stop sequence. A request that is
 * aborted leaves its queue at once and ends alone: the others of its batch go on.
 */
export class BatchGenerator extends GenerationLoop<RequestCaches> {
  constructor(
    readonly chain: StageChain,
    pool: KvBlockPool,
    opts: BatchGeneratorOptions = {},
  ) {
    super(pool, chain.maxPositions, { ...opts, maxInFlight: 1 });
  }

  protected open(_id: number, capacityTokens: number): RequestCaches {
    return this.chain.newCaches(capacityTokens);
  }

  protected runStep(rows: readonly StepRow<RequestCaches>[]): Promise<Float32Array[]> {
    return this.chain.step(rows.map((r) => ({ tokens: r.tokens, caches: r.request.state })));
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
