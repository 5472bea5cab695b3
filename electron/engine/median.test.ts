import { describe, expect, it } from 'vitest';
import { median } from './median.js';

describe('median', () => {
  it('is the middle sample, or the mean of the two middle ones, whatever the order', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([7])).toBe(7);
    expect(median([5, 5, 100])).toBe(5);
  });

  it('refuses no samples instead of answering NaN', () => {
    expect(() => median([])).toThrow(RangeError);
  });
});
