// Standby layers (issue 15), the pure part: which layers a member keeps on disk beside its range,
// within the disk budget it chose (`kiwi join --standby-gb N`), and the byte spans of each. The
// layers next to its range come first, both sides in turn, growing outwards (the whole model where
// the budget holds it); the host's own blocks come last, since the host never leaves a ring. The
// selection stops at the first layer that does not fit, so what a member holds stays contiguous
// around its range. A layer's spans are those a stage of that one layer reads that the member's
// own stage does not (its blocks; the token embedding for layer 0), so they never repeat the
// header or the model-wide tensors the member already holds.
import { KiwiError } from '../errors.js';
import type { GgufFile } from '../model/gguf/gguf-reader.js';
import type { ModelSizes } from '../planner/fleet.js';
import type { LayerRange } from '../runtime/layer-range.js';
import { stageSpans, type Span } from './member-weights.js';

/** Layers outside `range`, nearest first, alternating after and before it; those below `hostEnd` (the host's own blocks) last. */
export function standbyOrder(range: LayerRange, blockCount: number, hostEnd = 0): number[] {
  const near: number[] = [];
  for (let d = 0; range.end + d < blockCount || range.start - 1 - d >= 0; d++) {
    if (range.end + d < blockCount) near.push(range.end + d);
    if (range.start - 1 - d >= 0) near.push(range.start - 1 - d);
  }
  return [...near.filter((L) => L >= hostEnd), ...near.filter((L) => L < hostEnd)];
}

/** Each layer's spans beyond what a stage of `range` reads. */
export function standbyLayerSpans(file: GgufFile, range: LayerRange, layer: number): Span[] {
  const own = new Set(stageSpans(file, range).map((s) => s.offset));
  return stageSpans(file, { start: layer, end: layer + 1 }).filter((s) => !own.has(s.offset));
}

export interface StandbyLayer {
  layer: number;
  spans: Span[];
  bytes: number;
}

/**
 * The layers a member of `range` keeps on standby within `budgetBytes` of disk, in the order it
 * fetches them (standbyOrder), stopping at the first that does not fit.
 */
export function selectStandby(file: GgufFile, range: LayerRange, blockCount: number, budgetBytes: number, hostEnd = 0): StandbyLayer[] {
  const out: StandbyLayer[] = [];
  let used = 0;
  for (const layer of standbyOrder(range, blockCount, hostEnd)) {
    const spans = standbyLayerSpans(file, range, layer);
    const bytes = spans.reduce((n, s) => n + s.bytes, 0);
    if (used + bytes > budgetBytes) break;
    used += bytes;
    out.push({ layer, spans, bytes });
  }
  return out;
}

/** Layer indices as sorted, merged half-open ranges. */
export function layerRanges(layers: Iterable<number>): LayerRange[] {
  const sorted = [...new Set(layers)].sort((a, b) => a - b);
  const out: LayerRange[] = [];
  for (const L of sorted) {
    const last = out[out.length - 1];
    if (last !== undefined && last.end === L) last.end = L + 1;
    else out.push({ start: L, end: L + 1 });
  }
  return out;
}

/** A standby disk budget given in GB (decimals allowed, 0 off) as bytes; undefined when not given. Throws USAGE. */
export function standbyBudgetBytes(gb: string | number | undefined, what: string): number | undefined {
  if (gb === undefined) return undefined;
  const n = typeof gb === 'number' ? gb : Number(gb.trim());
  if (!Number.isFinite(n) || n < 0 || n > 1_000_000 || (typeof gb === 'string' && gb.trim() === '')) {
    throw new KiwiError('USAGE', `${what} takes a number of GB between 0 and 1000000 (e.g. 20 or 0.5), not ${JSON.stringify(gb)}`);
  }
  return n === 0 ? undefined : Math.round(n * 1e9);
}

/**
 * GGUF bytes of standby layers that fit `budgetBytes` of disk once built: a built layer takes the
 * runtime's packed size (model-sizes.ts blockResidentBytes; Q4_0 about 1.3x its GGUF bytes).
 */
export function builtStandbyBudget(sizes: Pick<ModelSizes, 'blockBytes' | 'blockResidentBytes'>, budgetBytes: number): number {
  return Math.floor(budgetBytes * Math.min(1, sizes.blockBytes / (sizes.blockResidentBytes ?? sizes.blockBytes)));
}
