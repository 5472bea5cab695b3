// Drafting with a small model of the same vocabulary (`--draft-model FILE`, issue 16): the draft
// model runs whole in this process (the host, where the generation loop is) and guesses k tokens by
// greedy decoding after a request's history. A guess is a single token, not a distribution, so the
// verify step's speculative sampling (Sampler.sampleWithDraft) keeps the target's distribution at
// any temperature, and greedy output is the target's own, whatever the draft model says.
//
// Each request keeps its own draft caches between steps: what the target rejected is rolled back to
// the longest prefix the draft caches share with the request's history, so a step feeds only the
// tokens the target accepted since (one row) and then decodes k - 1 more. Calls run one at a time
// (the ring has several steps in flight; the draft model's sessions serve them in turn).
import { isKiwiError, KiwiError } from '../errors.js';
import type { Tokenizer } from '../model/tokenizer/tokenizer.js';
import { PREFILL_CHUNK_TOKENS, stageResidentBytes } from './memory-model.js';
import { openLocalModel } from './local-model.js';
import type { Drafter } from './prompt-lookup.js';
import { argmax } from './sampling.js';
import type { RequestCaches, StageChain } from './stage-chain.js';
import type { StageOptions } from './stage.js';
import { freeCache, rollbackCache } from './kv-store.js';

interface DraftState {
  caches: RequestCaches;
  /** The tokens whose K/V the caches hold, in order. */
  fed: number[];
}

export class DraftModelDrafter implements Drafter {
  readonly name = 'draft-model';
  private readonly states = new Map<object, DraftState>();
  private queue: Promise<unknown> = Promise.resolve();

  /**
   * @param residentBytes what the draft model keeps resident (weights, one request's KV, scratch):
   *   the host's memory it takes from what the planner may give the host's stage
   */
  constructor(
    private readonly chain: StageChain,
    readonly residentBytes: number,
    private readonly onDispose: () => Promise<void> = () => chain.dispose(),
  ) {}

  draft(history: readonly number[], k: number, key: object = history): Promise<number[]> {
    const run = this.queue.then(() => this.decode(history, k, key));
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** The request ended: its draft caches go, after the drafts queued for it (which would make new ones). */
  release(key: object): void {
    this.queue = this.queue.then(() => {
      for (const c of this.states.get(key)?.caches ?? []) freeCache(c);
      this.states.delete(key);
    });
  }

  /** Requests whose draft caches are held now (diagnostics). */
  get held(): number {
    return this.states.size;
  }

  async dispose(): Promise<void> {
    await this.queue;
    this.states.clear(); // the chain's disposal drops their buffers
    await this.onDispose();
  }

  private async decode(history: readonly number[], k: number, key: object): Promise<number[]> {
    // Past the draft model's context there is nothing to guess with (the target goes on alone).
    if (k <= 0 || history.length === 0 || history.length + k > this.chain.maxPositions) return [];
    let state = this.states.get(key);
    if (state === undefined) {
      state = { caches: this.chain.newCaches(), fed: [] };
      this.states.set(key, state);
    }
    // Keep what the caches share with the history, less at least its last token (whose logits are needed).
    let keep = 0;
    const limit = Math.min(state.fed.length, history.length - 1);
    while (keep < limit && state.fed[keep] === history[keep]) keep++;
    for (const c of state.caches) rollbackCache(c, keep);
    state.fed.length = keep;
    let logits: Float32Array | undefined;
    for (let from = keep; from < history.length; from += PREFILL_CHUNK_TOKENS) {
      const tokens = history.slice(from, Math.min(from + PREFILL_CHUNK_TOKENS, history.length));
      logits = (await this.chain.step([{ tokens, caches: state.caches }]))[0];
      state.fed.push(...tokens);
    }
    const out = [argmax(logits!)];
    while (out.length < k) {
      const last = out[out.length - 1]!;
      logits = (await this.chain.step([{ tokens: [last], caches: state.caches }]))[0]!;
      state.fed.push(last);
      out.push(argmax(logits));
    }
    return out;
  }
}

/**
 * Opens `path` as the draft model of a model whose tokenizer is `target`: refused unless both have
 * the same vocabulary (the same piece for every id), since a draft is a list of the target's ids.
 */
export async function openDraftModel(path: string, target: Tokenizer, opts: StageOptions & { maxPositions: number }): Promise<DraftModelDrafter> {
  const model = await openLocalModel(path, opts).catch((err: unknown) => {
    throw isKiwiError(err) ? new KiwiError(err.code, `--draft-model ${path}: ${err.message}`) : err;
  });
  const mismatch = vocabularyMismatch(model.tokenizer, target);
  if (mismatch !== undefined) {
    await model.dispose();
    throw new KiwiError('USAGE', `--draft-model ${path} has another vocabulary than the model (${mismatch}); a draft model must share the model's tokenizer (the same family, e.g. Llama-3.2-1B for Llama-3.1-8B)`);
  }
  const whole = { start: 0, end: model.shape.blockCount, head: true };
  const resident = stageResidentBytes(model.file, model.shape, whole, { kvPositions: opts.maxPositions }).total;
  return new DraftModelDrafter(model.chain, resident, () => model.dispose());
}

/** Where two vocabularies differ (undefined: the same size and pieces). */
export function vocabularyMismatch(draft: Tokenizer, target: Tokenizer): string | undefined {
  if (draft.vocabSize !== target.vocabSize) return `${draft.vocabSize} tokens against ${target.vocabSize}`;
  for (let id = 0; id < target.vocabSize; id++) {
    const a = draft.tokenPiece(id, { special: true });
    const b = target.tokenPiece(id, { special: true });
    if (a.length !== b.length || a.some((x, i) => x !== b[i])) return `token ${id} is '${Buffer.from(a).toString('utf8')}' there, '${Buffer.from(b).toString('utf8')}' here`;
  }
  return undefined;
}
