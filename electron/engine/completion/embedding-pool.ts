// Sentence embeddings from a stage chain: the input prefilled once through every stage, the head
// asked for its final-norm hidden state of every position, mean-pooled and L2-normalized (what
// llama-server returns with --embeddings --pooling mean). Its own fresh caches, freed afterwards.
import type { StageChain } from '../runtime/stage-chain.js';
import type { StageInput } from '../runtime/stage.js';

/** Mean over positions of [seq, hidden], then divided by its L2 norm. */
export function meanPoolNormalized(states: Float32Array /* [seq, hidden] */, seq: number, hidden: number): Float32Array {
  const out = new Float32Array(hidden);
  const sum = new Float64Array(hidden);
  for (let t = 0; t < seq; t++) for (let i = 0; i < hidden; i++) sum[i]! += states[t * hidden + i]!;
  let norm = 0;
  for (let i = 0; i < hidden; i++) norm += (sum[i]! / seq) ** 2;
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  for (let i = 0; i < hidden; i++) out[i] = (sum[i]! / seq) * scale;
  return out;
}

/** One input's pooled embedding; `ids` fits the chain's context (the caller checks). */
export async function embedWithChain(chain: StageChain, ids: readonly number[]): Promise<Float32Array> {
  const caches = chain.newCaches(ids.length);
  const seq = ids.length;
  let input: StageInput = { kind: 'ids', ids: BigInt64Array.from(ids.map(BigInt)), batch: 1, seq }; // [1, seq]
  for (let s = 0; s < chain.stages.length; s++) {
    const stage = chain.stages[s]!;
    const out = await stage.forward(input, [caches[s]!], { hiddenNorm: stage.plan.head });
    if (out.kind === 'logits') {
      if (out.hiddenNorm === undefined) throw new Error('the head returned no hidden_norm');
      return meanPoolNormalized(out.hiddenNorm, seq, stage.shape.hidden);
    }
    input = { kind: 'hidden', hidden: out.hidden, batch: 1, seq }; // [1, seq, hidden]
  }
  throw new Error('stage chain ended without a head');
}
