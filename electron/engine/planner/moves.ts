// Re-plans that keep what members hold (issue 15): which blocks each device holds now, how many a
// stage would have to fetch, and, for a fixed chain, the division within a bottleneck bound that
// fetches the fewest blocks; among those, the one whose busiest stage opens the fewest blocks anew
// (stages open in parallel, so a recovery waits for the one that opens the most), then the fewest
// opened in all. A device that keeps the very range it runs keeps its stage, one whose stage can
// be reshaped keeps the segments inside its new range and opens the added blocks as segments
// beside them; any other range is a new session over all its blocks, about 0.5 s a block at 8B
// on 2 cores even when every layer is built. Pure.
import { cutsOf, reshape, reshapedRanges, splitAt } from '../runtime/stage-segments.js';
import { costCapacityBlocks, memoryCapacityBlocks, stageCost, type DeviceCost } from './cost-model.js';
import type { LayerRange, RunningRange } from './fleet.js';

/** A division is re-chosen to move less only when its bottleneck stays within this share of the best. */
export const MOVE_MARGIN = 0.05;

/** Per device: prefix counts of the blocks it holds (held[d][k] = held blocks among [0, k)). */
export type HeldPrefix = ReadonlyArray<Int32Array>;

export function heldPrefix(holds: ReadonlyArray<readonly LayerRange[] | undefined>, layers: number): HeldPrefix {
  return holds.map((ranges) => {
    const mark = new Uint8Array(layers);
    for (const r of ranges ?? []) for (let k = Math.max(0, r.start); k < Math.min(layers, r.end); k++) mark[k] = 1;
    const prefix = new Int32Array(layers + 1);
    for (let k = 0; k < layers; k++) prefix[k + 1] = (prefix[k] as number) + (mark[k] as number);
    return prefix;
  });
}

/** Blocks of [start, end) that `device` does not hold. */
export function fetchBlocks(held: HeldPrefix, device: number, start: number, end: number): number {
  const p = held[device];
  if (p === undefined) return end - start;
  return end - start - ((p[end] as number) - (p[start] as number));
}

/** How `device`'s stage over [start, end) runs after the re-plan: kept, reshaped (runtime/stage-segments.ts reshape), or opened whole; its blocks opened anew and its cuts. */
function nextStage(runs: ReadonlyArray<RunningRange | undefined>, device: number, start: number, end: number): { reopen: number; cuts: readonly number[] } {
  const r = runs[device];
  const whole = { reopen: end - start, cuts: [] };
  if (r === undefined) return whole;
  if (r.start === start && r.end === end) return { reopen: 0, cuts: r.cuts ?? [] };
  if (r.grows !== true) return whole;
  const overlap = Math.max(0, Math.min(end, r.end) - Math.max(start, r.start));
  if (r.everyCut === true) return overlap > 0 ? { reopen: end - start - overlap, cuts: [] } : whole;
  const current = splitAt(r, r.cuts ?? []);
  const shaped = reshape(current, { start, end });
  if (shaped === undefined) return whole;
  const kept = current.slice(shaped.keep.from, shaped.keep.to).reduce((n, k) => n + k.end - k.start, 0);
  return { reopen: end - start - kept, cuts: cutsOf(reshapedRanges(current, shaped)) };
}

/** Blocks of the stage [start, end) that `device` must open anew: none when it runs that range now, the added ones when its stage is reshaped, else all. */
export function reopenBlocks(runs: ReadonlyArray<RunningRange | undefined>, device: number, start: number, end: number): number {
  return nextStage(runs, device, start, end).reopen;
}

/** The boundaries between the sessions `device`'s stage over [start, end) will run in (each session pays the fixed part of a step, cost-model.ts stageCost). */
export function stageCuts(runs: ReadonlyArray<RunningRange | undefined>, device: number, start: number, end: number): readonly number[] {
  return nextStage(runs, device, start, end).cuts;
}

/**
 * The division of `layers` blocks over `chain` (chain[0] holds the head) whose every stage costs at
 * most `bound` and fits in memory, fetching the fewest blocks; among those, the one whose stage
 * that opens the most blocks anew opens the fewest (`runs`: the range each device runs now; the
 * stages open in parallel, so a recovery waits for the longest), then the fewest opened in all,
 * then the lowest bottleneck. Returns the counts per chain position, or null when no division
 * meets the bound.
 */
export function fewestMoves(costs: readonly DeviceCost[], chain: readonly number[], layers: number, held: HeldPrefix, bound: number, runs: ReadonlyArray<RunningRange | undefined> = []): number[] | null {
  const free = divide(costs, chain, layers, held, bound, runs, Number.POSITIVE_INFINITY);
  if (free === null) return null;
  // A maximum is not a sum the division's recursion can carry: try each cap on a stage's opened
  // blocks, lowest first, and keep the first that fetches no more.
  for (let cap = 0; cap < free.maxOpen; cap++) {
    const capped = divide(costs, chain, layers, held, bound, runs, cap);
    if (capped !== null && capped.miss === free.miss) return capped.counts;
  }
  return free.counts;
}

/** fewestMoves among divisions whose every stage opens at most `maxOpen` blocks anew: fewest fetched, then fewest opened, then the lowest bottleneck. */
function divide(costs: readonly DeviceCost[], chain: readonly number[], layers: number, held: HeldPrefix, bound: number, runs: ReadonlyArray<RunningRange | undefined>, maxOpen: number): { counts: number[]; miss: number; maxOpen: number } | null {
  const m = chain.length;
  if (m === 0 || layers < m) return null;
  const maxPerDevice = layers - (m - 1);
  const caps = chain.map((d, i) => {
    const c = costs[d] as DeviceCost;
    return Math.min(memoryCapacityBlocks(c, i === 0), costCapacityBlocks(c, i === 0, bound, maxPerDevice), maxPerDevice);
  });
  if (caps.some((cap) => cap < 1)) return null;
  // miss[i][e], open[i][e], worst[i][e]: the best way to place stages 0..i-1 over blocks [0, e); from[i][e] its last start.
  const INF = Number.POSITIVE_INFINITY;
  let miss = new Float64Array(layers + 1).fill(INF);
  let open = new Float64Array(layers + 1).fill(INF);
  let worst = new Float64Array(layers + 1).fill(INF);
  miss[0] = 0;
  open[0] = 0;
  worst[0] = 0;
  const from: Int32Array[] = [];
  for (let i = 0; i < m; i++) {
    const d = chain[i] as number;
    const c = costs[d] as DeviceCost;
    const nextMiss = new Float64Array(layers + 1).fill(INF);
    const nextOpen = new Float64Array(layers + 1).fill(INF);
    const nextWorst = new Float64Array(layers + 1).fill(INF);
    const back = new Int32Array(layers + 1).fill(-1);
    // Stage i ends after at least i + 1 blocks and leaves one block for each stage after it.
    for (let e = i + 1; e <= layers - (m - 1 - i); e++) {
      for (let k = 1; k <= (caps[i] as number) && e - k >= i; k++) {
        const s = e - k;
        const before = miss[s] as number;
        if (before === INF) continue;
        const reopen = reopenBlocks(runs, d, s, e);
        if (reopen > maxOpen) continue;
        const mv = before + fetchBlocks(held, d, s, e);
        const op = (open[s] as number) + reopen;
        // A reshaped stage pays a step's fixed part per segment: within the bound or not at all.
        const cost = stageCost(c, k, i === 0, stageCuts(runs, d, s, e).length + 1);
        if (cost > bound) continue;
        const w = Math.max(worst[s] as number, cost);
        const better = mv !== nextMiss[e] ? mv < (nextMiss[e] as number) : op !== nextOpen[e] ? op < (nextOpen[e] as number) : w < (nextWorst[e] as number);
        if (better) {
          nextMiss[e] = mv;
          nextOpen[e] = op;
          nextWorst[e] = w;
          back[e] = s;
        }
      }
    }
    from.push(back);
    miss = nextMiss;
    open = nextOpen;
    worst = nextWorst;
  }
  if (miss[layers] === INF) return null;
  const counts = new Array<number>(m).fill(0);
  let most = 0;
  for (let i = m - 1, e = layers; i >= 0; i--) {
    const s = (from[i] as Int32Array)[e] as number;
    counts[i] = e - s;
    most = Math.max(most, reopenBlocks(runs, chain[i] as number, s, e));
    e = s;
  }
  return { counts, miss: miss[layers] as number, maxOpen: most };
}
