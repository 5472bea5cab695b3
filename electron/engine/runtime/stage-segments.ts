// A ring stage (a member's, or the host's first blocks) as consecutive segments, each a Stage (its
// own onnxruntime session and caches) over part of the stage's range, run back to back. A re-plan
// reshapes a running stage instead of opening a session over its whole new range: the segments
// inside the new range stay, those outside it go, and the layers added before and after open as
// new segments. onnxruntime prepacks every weight of a session at its creation (0.4-0.8 s a layer
// at 8B on two cores, even from the shard cache), so reopening the layers it runs made a
// survivor's load cost its whole new range. A fresh stage opens split at the plan's cuts (where a
// likely re-plan would cut it, pipeline/fault-cuts.ts), so that re-plan keeps most of it. Splitting
// a range between sessions is exact (a ring already splits the model between stages bit for bit),
// and a segment costs a step one more hop to its session's thread, so the number of segments is
// bounded and a range no reshape reaches opens anew.
import type { KvCache } from './kv-store.js';
import type { LayerRange } from './layer-range.js';
import type { Stage, StageInput, StageOutput } from './stage.js';
import type { StagePlan } from './stage-weights.js';

/** Segments of one member's stage at most (each adds a hop to its session's thread per step). */
export const MAX_SEGMENTS = 3;

/** One request's caches in a segmented stage: one per segment, in order. */
export type SegmentCaches = KvCache[];

export class SegmentedStage {
  constructor(readonly segments: readonly Stage[]) {
    if (segments.length === 0) throw new Error('a segmented stage needs a segment');
    for (let i = 1; i < segments.length; i++) {
      if (segments[i]!.plan.start !== segments[i - 1]!.plan.end || segments[i - 1]!.plan.head) throw new Error('segments must follow each other, the head last');
    }
  }

  get plan(): StagePlan {
    const last = this.segments[this.segments.length - 1]!;
    return { start: this.segments[0]!.plan.start, end: last.plan.end, head: last.plan.head };
  }

  get shape(): Stage['shape'] {
    return this.segments[0]!.shape;
  }

  /** Caches for one request of at most `capacity` positions, one per segment. */
  emptyCache(capacity: number): SegmentCaches {
    return this.segments.map((s) => s.emptyCache(capacity));
  }

  /** Runs the segments in order (Stage.forward's contract); row b continues `caches[b]`. */
  async forward(input: StageInput, caches: readonly SegmentCaches[], opts: Parameters<Stage['forward']>[2] = {}): Promise<StageOutput> {
    let x = input;
    for (let s = 0; ; s++) {
      const segment = this.segments[s]!;
      const out = await segment.forward(x, caches.map((c) => c[s]!), segment.plan.head ? opts : { ...opts, hiddenNorm: false, logitsTail: 1 });
      if (s === this.segments.length - 1 || out.kind === 'logits') return out;
      x = { kind: 'hidden', hidden: out.hidden, batch: x.batch, seq: x.seq };
    }
  }

  /**
   * One request's row rebuilt after a re-plan (one row, positions [pos, pos + seq), stage-keep.ts):
   * a segment whose cache still holds these positions is skipped; any other runs, fed from the rows
   * before it: the input, the segment run before it, or `kept` (the rows at layer `kept.at`). The
   * output is the last segment's, or the kept rows where the stage ends at `kept.at`.
   */
  async resumeForward(
    input: StageInput,
    caches: SegmentCaches,
    pos: number,
    kept: { at: number; rows: (from: number, to: number) => Float32Array | undefined } | undefined,
    opts: Parameters<Stage['forward']>[2] = {},
  ): Promise<StageOutput> {
    const { seq } = input;
    if (input.batch !== 1) throw new Error('resumeForward: one row at a time');
    const rowsAt = (layer: number): StageInput => {
      const hidden = kept?.at === layer ? kept.rows(pos, pos + seq) : undefined;
      if (hidden === undefined) throw new Error(`no rows at layer ${layer} for positions ${pos}-${pos + seq} to rebuild from`);
      return { kind: 'hidden', hidden, batch: 1, seq };
    };
    let x = input;
    let live = this.plan.start;
    for (let s = 0; s < this.segments.length; s++) {
      const segment = this.segments[s]!;
      const c = caches[s]!;
      if (c.length >= pos + seq) continue;
      if (c.length !== pos) throw new Error(`segment ${segment.plan.start}-${segment.plan.end} holds ${c.length} positions, not ${pos}`);
      if (live !== segment.plan.start) x = rowsAt(segment.plan.start);
      const out = await segment.forward(x, [c], segment.plan.head ? opts : { ...opts, hiddenNorm: false, logitsTail: 1 });
      if (out.kind === 'logits') return out;
      x = { kind: 'hidden', hidden: out.hidden, batch: 1, seq };
      live = segment.plan.end;
    }
    const out = live === this.plan.end ? x : rowsAt(this.plan.end);
    if (out.kind !== 'hidden') throw new Error('resumeForward: a stage that ran nothing got token ids');
    return { kind: 'hidden', hidden: out.hidden };
  }

  /** The segments' ranges, in order. */
  get ranges(): LayerRange[] {
    return this.segments.map((s) => ({ start: s.plan.start, end: s.plan.end }));
  }

  /** This stage's segments `keep` (a Reshape's), with `before` and `after` (opened for its ranges) around them. */
  reshaped(keep: Reshape['keep'], before: Stage | undefined, after: Stage | undefined): SegmentedStage {
    return new SegmentedStage([...(before ? [before] : []), ...this.segments.slice(keep.from, keep.to), ...(after ? [after] : [])]);
  }

  async dispose(): Promise<void> {
    for (const s of this.segments) await s.dispose();
  }

  /** Disposes the segments `kept` does not run: a stage grown from `kept` and not taken gives back only what it added. */
  async disposeExcept(kept: SegmentedStage | undefined): Promise<void> {
    for (const s of this.segments) if (kept?.segments.includes(s) !== true) await s.dispose();
  }
}

/** How a running stage becomes the next: the segments [from, to) it keeps, the ranges to open before and after them. */
export interface Reshape {
  keep: { from: number; to: number };
  before?: LayerRange;
  after?: LayerRange;
}

/**
 * How a stage running `current` (its segments' ranges, in order) runs `next` without reopening what
 * it keeps: the segments inside `next` stay, those outside it go, the layers before and after them
 * open as new segments. Undefined when a segment straddles an end of `next`, none would stay, or
 * the result needs more than MAX_SEGMENTS: then `next` opens anew.
 */
export function reshape(current: readonly LayerRange[], next: LayerRange): Reshape | undefined {
  if (current.some((r) => r.start < next.end && r.end > next.start && (r.start < next.start || r.end > next.end))) return undefined;
  const from = current.findIndex((r) => r.start >= next.start && r.end <= next.end);
  if (from < 0) return undefined;
  let to = from;
  while (to < current.length && current[to]!.end <= next.end) to++;
  const first = current[from]!.start;
  const last = current[to - 1]!.end;
  const before = next.start < first ? { start: next.start, end: first } : undefined;
  const after = next.end > last ? { start: last, end: next.end } : undefined;
  if (to - from + (before ? 1 : 0) + (after ? 1 : 0) > MAX_SEGMENTS) return undefined;
  return { keep: { from, to }, ...(before ? { before } : {}), ...(after ? { after } : {}) };
}

/** The ranges of the segments a reshape of `current` runs, in order. */
export function reshapedRanges(current: readonly LayerRange[], r: Reshape): LayerRange[] {
  return [...(r.before ? [r.before] : []), ...current.slice(r.keep.from, r.keep.to), ...(r.after ? [r.after] : [])];
}

/** Layers in `ranges` (undefined: none). */
export function layersIn(ranges: ReadonlyArray<LayerRange | undefined>): number {
  return ranges.reduce((n, r) => n + (r === undefined ? 0 : r.end - r.start), 0);
}

/** The boundaries inside a stage between its segments (`ranges` in order). */
export function cutsOf(ranges: readonly LayerRange[]): number[] {
  return ranges.slice(1).map((r) => r.start);
}

/** `range` split at `cuts` (ascending, inside it). */
export function splitAt(range: LayerRange, cuts: readonly number[]): LayerRange[] {
  const ends = [range.start, ...cuts, range.end];
  return ends.slice(1).map((end, i) => ({ start: ends[i]!, end }));
}

/**
 * What a stage running `current` (its segments' ranges; undefined: none) does to run `next` split
 * at `cuts` as planned: keep itself (same range), reshape (when that gives exactly the planned
 * segments), or open `next` anew in segments at the cuts. Host and members decide with this from
 * the plan, which priced the same rule (planner/moves.ts).
 */
export function stageChange(current: readonly LayerRange[] | undefined, next: LayerRange, cuts: readonly number[]): { kind: 'keep' } | { kind: 'reshape'; reshape: Reshape } | { kind: 'open'; ranges: LayerRange[] } {
  if (current !== undefined && current.length > 0) {
    if (current[0]!.start === next.start && current[current.length - 1]!.end === next.end) return { kind: 'keep' };
    const r = reshape(current, next);
    if (r !== undefined && sameCuts(cutsOf(reshapedRanges(current, r)), cuts)) return { kind: 'reshape', reshape: r };
  }
  return { kind: 'open', ranges: splitAt(next, cuts) };
}

const sameCuts = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);
