import { describe, expect, test } from 'vitest';
import { PromptLookupDrafter } from './prompt-lookup.js';

describe('prompt lookup drafting', () => {
  test('drafts what followed the latest earlier occurrence of the longest matching suffix', () => {
    const d = new PromptLookupDrafter({ maxNgram: 3, minNgram: 2 });
    // ... 5 6 7 [8 9] ... 5 6 7 [1 2] ... 5 6 7  -> the latest match of "5 6 7" is followed by 1 2
    const h = [5, 6, 7, 8, 9, 4, 5, 6, 7, 1, 2, 3, 5, 6, 7];
    expect(d.draft(h, 2)).toEqual([1, 2]);
    expect(d.draft(h, 5)).toEqual([1, 2, 3, 5, 6]);
  });

  test('falls back to shorter n-grams, never below minNgram, and drafts nothing without a match', () => {
    const d = new PromptLookupDrafter({ maxNgram: 4, minNgram: 2 });
    expect(d.draft([1, 2, 3, 9, 2, 3], 3)).toEqual([9, 2, 3]);
    expect(d.draft([1, 2, 3, 4, 5, 6], 3)).toEqual([]);
    expect(d.draft([7, 1, 8, 1], 3)).toEqual([]); // only a one-token match
    expect(new PromptLookupDrafter({ minNgram: 1 }).draft([7, 1, 8, 1], 3)).toEqual([8, 1]);
    expect(d.draft([1, 2, 1, 2], 0)).toEqual([]);
  });

  test('searches only the window of latest tokens', () => {
    const h = [1, 2, 3, ...Array.from({ length: 20 }, (_, i) => 100 + i), 1, 2];
    expect(new PromptLookupDrafter().draft(h, 1)).toEqual([3]);
    expect(new PromptLookupDrafter({ window: 10 }).draft(h, 1)).toEqual([]);
  });
});
