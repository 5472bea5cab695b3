// Integer half-open layer ranges { start, end } and the `--split 0-4,4-8` syntax. Pure.
import { KiwiError } from '../errors.js';

export interface LayerRange {
  start: number;
  end: number;
}

/** Checks that `ranges` tile [0, blockCount) in order with no gap, overlap or empty stage. */
export function validateSplit(ranges: readonly LayerRange[], blockCount: number): void {
  let next = 0;
  for (const r of ranges) {
    if (!Number.isInteger(r.start) || !Number.isInteger(r.end) || r.start < 0 || r.end > blockCount || r.start >= r.end) {
      throw new KiwiError(
        'RANGE_OUT_OF_MODEL',
        `layer range ${r.start}-${r.end} is outside the model's ${blockCount} layers (valid: start < end, within 0-${blockCount})`,
        { start: r.start, end: r.end, blockCount },
      );
    }
    if (r.start !== next) {
      throw new KiwiError('RANGE_OUT_OF_MODEL', `layer ranges must follow each other without gaps or overlap: expected a range starting at ${next}, got ${r.start}-${r.end}`);
    }
    next = r.end;
  }
  if (next !== blockCount) {
    throw new KiwiError('RANGE_OUT_OF_MODEL', `layer ranges end at ${next} but the model has ${blockCount} layers; the last range must end at ${blockCount}`);
  }
}

/** Parses '0-4,4-8' into ranges (not yet checked against a model). */
export function parseSplit(text: string): LayerRange[] {
  return text.split(',').map((part) => {
    const m = /^\s*(\d+)\s*-\s*(\d+)\s*$/.exec(part);
    if (m === null) throw new KiwiError('USAGE', `cannot read layer range '${part}'; write ranges like 0-4,4-8`);
    return { start: Number(m[1]), end: Number(m[2]) };
  });
}
