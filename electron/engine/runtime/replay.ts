// A replay that costs about one prefill (issue 15). After a re-plan a request rebuilds its caches
// on the new ring: its prompt as one prefill, then its generated tokens as they were first
// computed, one decode step each. Sent as one row of n tokens with `replay` set, a stage runs the
// n positions' projections, norms and feed-forward at once and their attention as n one-token
// rows over the cache (stage-graph.ts replayAttention): bit for bit the decode steps, wherever
// every other op gives a row the same result whatever the number of rows beside it.
//
// Measured op by op (bench/replay-ops.ts, onnxruntime 1.30 CPU): RMSNorm (with and without the
// skip add) and float MatMul give a row the same bits for 1 row and for n; GroupQueryAttention's
// output differs between a one-token step and an n-token pass (its K/V caches do not), hence the
// per-row attention; MatMulNBits at accuracy level 0 (f32 activations) differs between 1 row and 2
// or more everywhere; at level 4 (int8 activations) it depends on the CPU's kernels (agreeing on
// an AVX-512 machine, 4 bits differing on an AVX2 one), so replay-exactness.ts measures it on
// this machine, and the decode-step replay stays where it is not exact (replayMode 'auto'). Ring
// stages have the replay inputs (their plan admits the scratch a replay leaves: memory-model.ts
// replayScratchBytes); a stage without them runs a replayed row as its own decode steps, still in
// one trip round the ring.
import type { OrtFeeds } from '../ort/session.js';
import { i32Tensor } from '../ort/session.js';
import { IO } from './stage-graph.js';

/** How recovery replays generated tokens: 'steps' one decode step each; 'batched' one pass; 'auto' batched where it is exact. */
export type ReplayMode = 'auto' | 'steps' | 'batched';

/** Whether recovery should replay in one pass: the mode, every stage's graph, and whether the one pass is exact here (replay-exactness.ts). */
export function batchedReplay(mode: ReplayMode, stagesReplay: boolean, exact: boolean): boolean {
  if (!stagesReplay || mode === 'steps') return false;
  return mode === 'batched' || exact;
}

/**
 * The replay inputs of a stage run: `from` = the cache length before a replayed row of `seq`
 * tokens, or undefined for a plain step (one dummy row over one position, its output unused).
 */
export function replayFeeds(from: number | undefined, seq: number): OrtFeeds {
  if (from === undefined) {
    return { [IO.replay]: i32Tensor(Int32Array.of(0), [1]), [IO.replaySeqlensK]: i32Tensor(Int32Array.of(0), [1]), [IO.replayTotal]: i32Tensor(Int32Array.of(1), []) };
  }
  return {
    [IO.replay]: i32Tensor(Int32Array.of(1), [1]),
    [IO.replaySeqlensK]: i32Tensor(Int32Array.from({ length: seq }, (_, j) => from + j), [seq]),
    [IO.replayTotal]: i32Tensor(Int32Array.of(from + seq), []),
  };
}
