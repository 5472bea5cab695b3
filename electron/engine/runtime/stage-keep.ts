// What a ring stage keeps of its live requests across a re-plan, so that a stage whose range
// survives (unchanged, or reshaped: stage-segments.ts) rebuilds only the layers it did not
// run before instead of the whole request:
// - each request's caches, one per segment: a segment the next stage still runs keeps its
//   positions and is skipped while the request is rebuilt;
// - the rows the stage sent on (its output at its last layer, per position, StageOutputs): a
//   segment added after the kept ones is fed from them, and a stage whose segments all survived
//   sends them on without running anything.
// The host names the positions that survived (`keep`, those every stage had finished before the
// ring broke); caches that hold more are cut back to it. Where the kept segments and rows cannot
// feed the rest (rows never recorded: a request seeded from the prompt cache), the stage rebuilds
// the request from its input as before. Rebuilt rows are the ones the decode steps computed, so
// skipping them is exact.
import { freeCache, rollbackCache } from './kv-store.js';
import type { StageInput, StageOutput } from './stage.js';
import type { SegmentCaches, SegmentedStage } from './stage-segments.js';

/** Rows are kept in blocks of this many positions (as KV buffers grow). */
const ROW_BLOCK = 256;

/** The rows a stage sent on, per request: [positions, hidden] at layer `at` (the stage's end). */
export class StageOutputs {
  private readonly rows = new Map<number, { data: Float32Array; length: number }>();
  /** Requests whose rows have a gap (seeded from the prompt cache): not recorded. */
  private readonly gaps = new Set<number>();

  constructor(
    readonly at: number,
    private readonly hidden: number,
  ) {}

  /** Positions held for request `id`. */
  length(id: number): number {
    return this.gaps.has(id) ? 0 : (this.rows.get(id)?.length ?? 0);
  }

  /** Bytes held, all requests. */
  get bytes(): number {
    let n = 0;
    for (const r of this.rows.values()) n += r.data.byteLength;
    return n;
  }

  /**
   * Records rows [pos, pos + seq) of request `id` (`rows` from `offset`, seq x hidden floats). Rows it
   * holds already (a rebuilt request's kept rows) stay; a gap before `pos` stops recording it.
   */
  put(id: number, pos: number, seq: number, rows: Float32Array, offset = 0): void {
    if (this.gaps.has(id)) return;
    const r = this.rows.get(id) ?? { data: new Float32Array(0), length: 0 };
    if (r.length > pos) return;
    if (r.length < pos) {
      this.drop(id);
      this.gaps.add(id);
      return;
    }
    const need = (pos + seq) * this.hidden;
    if (r.data.length < need) {
      const grown = new Float32Array(Math.ceil((pos + seq) / ROW_BLOCK) * ROW_BLOCK * this.hidden);
      grown.set(r.data.subarray(0, r.length * this.hidden));
      r.data = grown;
    }
    r.data.set(rows.subarray(offset, offset + seq * this.hidden), pos * this.hidden);
    r.length = pos + seq;
    this.rows.set(id, r);
  }

  /** A copy of rows [from, to) of request `id`, or undefined where they are not all held. */
  get(id: number, from: number, to: number): Float32Array | undefined {
    const r = this.rows.get(id);
    if (r === undefined || this.gaps.has(id) || to > r.length) return undefined;
    return r.data.slice(from * this.hidden, to * this.hidden);
  }

  /** Drops positions from `length` on (rejected drafts; a rebuild that keeps fewer). */
  truncate(id: number, length: number): void {
    const r = this.rows.get(id);
    if (r !== undefined && r.length > length) r.length = length;
  }

  drop(id: number): void {
    this.rows.delete(id);
    this.gaps.delete(id);
  }

  clear(): void {
    this.rows.clear();
    this.gaps.clear();
  }
}

/**
 * The outputs store of `next`, the next ring's stage: `kept`'s where `next` ends at the same layer
 * (its rows go on being the stage's output), else a new one.
 */
export function outputsFor(next: SegmentedStage, kept: KeptStage | undefined): StageOutputs {
  return kept !== undefined && next.plan.end === kept.outputs.at ? kept.outputs : new StageOutputs(next.plan.end, next.shape.hidden);
}

/** A stage's requests as they stood when its ring was retired, until the next ring's stage adopts them. */
export class KeptStage {
  constructor(
    readonly stage: SegmentedStage,
    private readonly caches: Map<number, SegmentCaches>,
    readonly outputs: StageOutputs,
  ) {}

  /**
   * Request `id`'s caches on `next`, rebuilt from its first `keep` positions: a segment `next`
   * shares with the kept stage keeps its cache cut to `keep` positions (skipped while the request
   * is rebuilt, SegmentedStage.resumeForward), any other starts empty. Where the kept segments and
   * rows cannot feed the rest, every segment starts empty. Undefined when nothing is kept for `id`.
   * `outputs`: next's store (outputsFor()); its rows for `id` are cut to what the rebuild keeps.
   */
  adopt(id: number, next: SegmentedStage, capacity: number, keep: number, outputs: StageOutputs): SegmentCaches | undefined {
    const kept = this.caches.get(id);
    if (kept === undefined) {
      outputs.drop(id);
      return undefined;
    }
    this.caches.delete(id);
    const taken = new Set<number>();
    const caches = next.segments.map((s) => {
      const i = this.stage.segments.indexOf(s);
      const c = kept[i];
      if (c === undefined || c.capacity !== capacity || c.length < keep) return s.emptyCache(capacity);
      taken.add(i);
      rollbackCache(c, keep);
      return c;
    });
    kept.forEach((c, i) => taken.has(i) || freeCache(c));
    this.outputs.truncate(id, keep);
    if (!feeds(next, caches, keep, this.outputs.at, this.outputs.length(id))) {
      for (const c of caches) if (c.length > 0) rollbackCache(c, 0);
    }
    // The rows at next's end are rebuilt where its last segment runs again.
    if (outputs === this.outputs && caches[caches.length - 1]!.length < keep) outputs.truncate(id, 0);
    return caches;
  }

  /** Rows [from, to) of request `id` at the kept stage's end, where held. */
  rows(id: number, from: number, to: number): Float32Array | undefined {
    return this.outputs.get(id, from, to);
  }

  /** Frees what no request adopted (the request ended, or the next ring has it). */
  free(ids?: readonly number[]): void {
    for (const id of ids ?? [...this.caches.keys()]) {
      for (const c of this.caches.get(id) ?? []) freeCache(c);
      this.caches.delete(id);
    }
  }
}

/**
 * Runs a step's rows on `stage` and records what it sends on in `outputs`: a rebuilt row (one row
 * with `keep`) skips the segments that kept it, fed from `kept` (SegmentedStage.resumeForward).
 */
export async function forwardKeeping(
  stage: SegmentedStage,
  input: StageInput,
  caches: readonly SegmentCaches[],
  rows: ReadonlyArray<{ id: number; pos: number; keep?: number | undefined }>,
  store: { outputs: StageOutputs | undefined; kept: KeptStage | undefined },
  opts: { replay?: boolean } = {},
): Promise<StageOutput> {
  const { outputs, kept } = store;
  for (const r of rows) if (r.keep === undefined) outputs?.truncate(r.id, r.pos);
  const rebuilt = rows.length === 1 && rows[0]!.keep !== undefined ? rows[0]! : undefined;
  const out =
    rebuilt !== undefined
      ? await stage.resumeForward(input, caches[0]!, rebuilt.pos, kept && { at: kept.outputs.at, rows: (from, to) => kept.rows(rebuilt.id, from, to) }, opts)
      : await stage.forward(input, caches, opts);
  if (out.kind === 'hidden') rows.forEach((r, b) => outputs?.put(r.id, r.pos, input.seq, out.hidden, b * input.seq * stage.shape.hidden));
  return out;
}

/**
 * Whether every segment of `stage` that must run (its cache holds fewer than `keep` positions) can
 * be fed: from the stage's input (nothing before it was skipped), a segment run before it, or the
 * kept rows at layer `at` (holding `held` positions). The stage's output likewise.
 */
function feeds(stage: SegmentedStage, caches: SegmentCaches, keep: number, at: number, held: number): boolean {
  let live = stage.plan.start;
  const rowsAt = (layer: number): boolean => live === layer || (at === layer && held >= keep);
  for (let s = 0; s < stage.segments.length; s++) {
    const { start, end } = stage.segments[s]!.plan;
    if (caches[s]!.length >= keep) continue;
    if (!rowsAt(start)) return false;
    live = end;
  }
  return rowsAt(stage.plan.end);
}
