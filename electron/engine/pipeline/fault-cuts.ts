// Where a fresh stage should be split so that a likely re-plan keeps most of it (issue 15). A stage
// reshapes only at its segments' boundaries (runtime/stage-segments.ts reshape): a survivor whose
// range moves after a member is lost (9-21 to 12-32: the host took 9-12, the lost member's layers
// went to it) would reopen all its layers, whole, on the recovery's critical path. So each stage
// that opens anew is split where the re-plans after losing one member would cut it: the plans
// without each member in turn are computed as if every stage could keep any of its blocks, and
// each stage gets the cuts (at most two: one for the loss on each side, within MAX_SEGMENTS) that
// leave the fewest layers to reopen, summed over those plans. A cut costs the stage one more
// session to run per step (about 1.2 ms on two cores, bench/segments.ts), so each cut must spare
// `minBytes` of reopening in one of those plans; small models, whose sessions open in well under a
// second, stay in one session. Pure.
import { MAX_SEGMENTS, layersIn, reshape, splitAt } from '../runtime/stage-segments.js';
import type { LayerRange } from '../runtime/layer-range.js';
import type { RingStage } from './session-fleet.js';

/** A cut is worth its cost per step only where it spares reopening this many bytes of weights as the runtime keeps them (1-1.5 s of prepacking on two cores; three blocks of an 8B Q4_0, more than a 1B model's stage). */
export const CUT_MIN_BYTES = 512 * 1024 ** 2;

/**
 * `order` with cuts added to each stage that `opensAnew`, chosen against the plans without each
 * member (`replanWithout(peer)`, undefined where none fits): the fewest layers reopened over them,
 * each cut sparing at least `minBytes` in one of them (`blockBytes`: one block's resident bytes).
 */
export function withFaultCuts(
  order: readonly RingStage[],
  opensAnew: (i: number) => boolean,
  blockBytes: number,
  minBytes: number,
  replanWithout: (peer: number) => readonly RingStage[] | undefined,
): RingStage[] {
  const replans = order.slice(1).flatMap((lost) => {
    const next = replanWithout(lost.peer);
    return next === undefined ? [] : [next];
  });
  const minBlocks = Math.max(minBytes / blockBytes, Number.MIN_VALUE);
  return order.map((cur, i) => {
    if (cur.cuts.length > 0 || !opensAnew(i)) return cur;
    const nexts = replans.flatMap((p) => p.filter((s) => s.peer === cur.peer && s.end > s.start));
    const cuts = bestCuts(cur, nexts, minBlocks);
    return cuts.length > 0 ? { ...cur, cuts } : cur;
  });
}

/** Layers a stage over `range` split at `cuts` reopens to run each of `nexts`. */
function reopenedLayers(range: LayerRange, cuts: readonly number[], nexts: readonly LayerRange[]): number[] {
  const segments = splitAt(range, cuts);
  return nexts.map((next) => {
    const r = reshape(segments, next);
    return r === undefined ? next.end - next.start : layersIn([r.before, r.after]);
  });
}

/**
 * The cuts of `range` (each at a boundary of one of `nexts`) that reopen the fewest layers over
 * `nexts`, each earning its hop: without it, some re-plan would reopen at least `minBlocks` more
 * (a stage smaller than that is never cut). The fewest cuts on a tie.
 */
function bestCuts(range: LayerRange, nexts: readonly LayerRange[], minBlocks: number): number[] {
  const candidates = [...new Set(nexts.flatMap((n) => [n.start, n.end]))].filter((c) => c > range.start && c < range.end).sort((a, b) => a - b);
  const sets: number[][] = [[]];
  for (const c of candidates) for (const s of sets.slice()) if (s.length < MAX_SEGMENTS - 1) sets.push([...s, c]);
  const memo = new Map<string, number[]>();
  const reopened = (cuts: readonly number[]): number[] => {
    const key = cuts.join(',');
    let r = memo.get(key);
    if (r === undefined) memo.set(key, (r = reopenedLayers(range, cuts, nexts)));
    return r;
  };
  const total = (cuts: readonly number[]) => reopened(cuts).reduce((a, b) => a + b, 0);
  const worthIt = (cuts: number[]) => {
    const own = reopened(cuts);
    return cuts.every((_, k) => reopened(cuts.filter((__, j) => j !== k)).some((n, p) => n - own[p]! >= minBlocks));
  };
  let best: number[] = [];
  for (const s of sets) if (s.length > 0 && worthIt(s) && (total(s) < total(best) || (total(s) === total(best) && s.length < best.length))) best = s;
  return best;
}
