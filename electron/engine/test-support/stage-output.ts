// What a stage computes for some rows on a fresh cache: tests that open one range two ways (from
// the shard cache, built fresh) compare these bit for bit.
import type { Stage } from '../runtime/stage.js';

/** The stage's output for `seq` rows of `hidden` on a fresh cache: its hidden states, or the head's logits, copied. */
export async function stageOutput(st: Stage, hidden: Float32Array, seq: number): Promise<Float32Array> {
  const out = await st.forward({ kind: 'hidden', hidden, batch: 1, seq }, [st.emptyCache()]);
  return Float32Array.from(out.kind === 'hidden' ? out.hidden : out.logits);
}
