// A chain of stages run in one process (the ring without the network): token ids enter the
// first stage, hidden states flow stage to stage, the head returns logits.
import { Stage } from './stage.js';
import type { StageInput, StageOptions } from './stage.js';
import type { KvCache } from './kv-store.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { DecoderShape } from './stage-graph.js';
import { validateSplit } from './layer-range.js';
import type { LayerRange } from './layer-range.js';

/** One request's caches: one KvCache per stage. */
export type RequestCaches = KvCache[];

export class StageChain {
  constructor(readonly stages: readonly Stage[]) {
    const first = stages[0];
    const last = stages[stages.length - 1];
    if (first === undefined || last === undefined || first.plan.start !== 0 || !last.plan.head) {
      throw new Error('a stage chain starts at layer 0 and ends with the head');
    }
  }

  get vocab(): number {
    return this.stages[0]!.shape.vocab;
  }

  /** The head returns the logits of several positions in one pass (speculative verification). */
  get verifies(): boolean {
    return this.stages[this.stages.length - 1]!.verifies;
  }

  /** Every stage can replay generated tokens in one pass (runtime/replay.ts). */
  get replays(): boolean {
    return this.stages.every((s) => s.replays);
  }

  get maxPositions(): number {
    return Math.min(...this.stages.map((s) => s.shape.maxPositions));
  }

  /** KV bytes per position of one request over all stages (to size a KvBlockPool). */
  get kvBytesPerToken(): number {
    return this.stages.reduce((a, s) => a + s.kvBytesPerToken, 0);
  }

  /** Empty caches for one request of at most `capacity` positions. */
  newCaches(capacity: number = this.maxPositions): RequestCaches {
    return this.stages.map((s) => s.emptyCache(capacity));
  }

  /**
   * One forward pass. A single row may add many tokens (prefill); several rows add one token each
   * (batched decode). Returns the logits of each row's last position, [vocab] each; `logitsTail`
   * (one row, speculative verification) asks for its last `logitsTail` positions, [logitsTail, vocab].
   */
  async step(rows: ReadonlyArray<{ tokens: readonly number[]; caches: RequestCaches }>, opts: { logitsTail?: number; replay?: boolean } = {}): Promise<Float32Array[]> {
    const batch = rows.length;
    const seq = rows[0]?.tokens.length ?? 0;
    const tail = opts.logitsTail ?? 1;
    let input: StageInput = {
      kind: 'ids',
      ids: BigInt64Array.from(rows.flatMap((r) => r.tokens.map(BigInt))), // [batch, seq]
      batch,
      seq,
    };
    for (let s = 0; s < this.stages.length; s++) {
      const stage = this.stages[s]!;
      const out = await stage.forward(
        input,
        rows.map((r) => r.caches[s]!),
        { ...(stage.plan.head && tail !== 1 ? { logitsTail: tail } : {}), ...(opts.replay === true ? { replay: true } : {}) },
      );
      if (out.kind === 'logits') {
        const v = this.vocab * tail;
        return rows.map((_, b) => out.logits.subarray(b * v, (b + 1) * v)); // [batch, vocab] -> rows
      }
      input = { kind: 'hidden', hidden: out.hidden, batch, seq }; // [batch, seq, hidden]
    }
    throw new Error('stage chain ended without a head');
  }

  async dispose(): Promise<void> {
    for (const s of this.stages) await s.dispose();
  }
}

/** Builds one stage per range (the ranges must tile the model's layers); the last is the head. */
export async function buildStageChain(file: GgufFile, shape: DecoderShape, ranges: readonly LayerRange[], opts: StageOptions = {}): Promise<StageChain> {
  validateSplit(ranges, shape.blockCount);
  const stages: Stage[] = [];
  try {
    for (const [i, r] of ranges.entries()) {
      stages.push(await Stage.open(file, shape, { ...r, head: i === ranges.length - 1 }, opts));
    }
  } catch (err) {
    for (const s of stages) await s.dispose();
    throw err;
  }
  return new StageChain(stages);
}
