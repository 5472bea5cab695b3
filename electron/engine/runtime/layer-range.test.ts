import { describe, expect, test } from 'vitest';
import { isKiwiError } from '../errors.js';
import { parseSplit, validateSplit } from './layer-range.js';

describe('layer ranges', () => {
  test('parses a --split list into half-open ranges', () => {
    expect(parseSplit('0-4,4-8')).toEqual([{ start: 0, end: 4 }, { start: 4, end: 8 }]);
    expect(parseSplit(' 0 - 2 ')).toEqual([{ start: 0, end: 2 }]);
  });

  test.each(['0-4;4-8', '0-', 'a-b', '-1-3', ''])('rejects %j with a usage error', (text) => {
    expect(() => parseSplit(text)).toThrow(/cannot read layer range/);
  });

  test.each<[string, Array<{ start: number; end: number }>]>([
    ['a range past the last layer', [{ start: 0, end: 9 }]],
    ['an empty range', [{ start: 0, end: 0 }, { start: 0, end: 8 }]],
    ['a gap', [{ start: 0, end: 3 }, { start: 4, end: 8 }]],
    ['an overlap', [{ start: 0, end: 5 }, { start: 4, end: 8 }]],
    ['ranges that stop short', [{ start: 0, end: 7 }]],
  ])('refuses %s with RANGE_OUT_OF_MODEL', (_name, ranges) => {
    let err: unknown;
    try {
      validateSplit(ranges, 8);
    } catch (e) {
      err = e;
    }
    expect(isKiwiError(err, 'RANGE_OUT_OF_MODEL')).toBe(true);
  });

  test('accepts ranges that tile the model', () => {
    expect(() => validateSplit(parseSplit('0-1,1-5,5-8'), 8)).not.toThrow();
  });
});
