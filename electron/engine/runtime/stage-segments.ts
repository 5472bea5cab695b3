// A ring stage (a member's, or the host's first blocks) as consecutive segments, each a Stage (its
// own onnxruntime session and caches) over part of the stage's range, run back to back. A re-plan
// that only grows a stage's range opens the added layers as a new segment beside the running ones
// instead of a session over the whole range: onnxruntime prepacks every weight of a session at its
// creation (0.4-0.8 s a layer at 8B on two cores, even from the shard cache), so reopening the
// layers it runs made a survivor's load cost its whole new range. Splitting a range between
// sessions is exact (a ring already splits the model between stages bit for bit), and a segment
// costs a step one more hop to its session's thread, so the number of segments is bounded and a
// range that shrinks or moves opens as one segment again.
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

  /** This stage with the segments `before` and `after` (opened for the ranges growth() named) around it. */
  grown(before: Stage | undefined, after: Stage | undefined): SegmentedStage {
    return new SegmentedStage([...(before ? [before] : []), ...this.segments, ...(after ? [after] : [])]);
  }

  async dispose(): Promise<void> {
    for (const s of this.segments) await s.dispose();
  }

  /** Disposes the segments `kept` does not run: a stage grown from `kept` and not taken gives back only what it added. */
  async disposeExcept(kept: SegmentedStage | undefined): Promise<void> {
    for (const s of this.segments) if (kept?.segments.includes(s) !== true) await s.dispose();
  }
}

/**
 * The ranges to open so that a stage of `segments` segments running `current` runs `next`: the
 * layers before it and after it. Undefined when `next` does not contain `current` or would need
 * more than MAX_SEGMENTS: then `next` opens as one segment.
 */
export function growth(current: LayerRange, segments: number, next: LayerRange): { before?: LayerRange; after?: LayerRange } | undefined {
  if (next.start > current.start || next.end < current.end) return undefined;
  const before = next.start < current.start ? { start: next.start, end: current.start } : undefined;
  const after = next.end > current.end ? { start: current.end, end: next.end } : undefined;
  if (segments + (before ? 1 : 0) + (after ? 1 : 0) > MAX_SEGMENTS) return undefined;
  return { ...(before ? { before } : {}), ...(after ? { after } : {}) };
}
