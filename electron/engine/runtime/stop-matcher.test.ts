// StopMatcher: finds a stop sequence however the text is cut into pieces, ends the generation only
// once the earliest stop in the text is settled, and keeps only a bounded tail.
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { StopMatcher } from './stop-matcher.js';

function firstHit(stops: readonly string[], pieces: readonly string[]): number {
  const m = new StopMatcher(stops);
  return pieces.findIndex((p) => m.push(p));
}

describe('StopMatcher', () => {
  test('finds a stop sequence split across pieces at every boundary', () => {
    const text = 'Once upon a time Lily saw a cat';
    for (let a = 1; a < text.length; a++) {
      for (let b = a; b < text.length; b++) {
        const pieces = [text.slice(0, a), text.slice(a, b), text.slice(b)];
        const at = firstHit(['Lily saw'], pieces);
        // The piece that completes the match is the one holding its last character.
        const end = text.indexOf('Lily saw') + 'Lily saw'.length;
        expect(at).toBe(end <= a ? 0 : end <= b ? 1 : 2);
      }
    }
  });

  test('never holds more than the longest stop sequence minus one character', () => {
    const m = new StopMatcher(['abcdef', 'xy']);
    for (let i = 0; i < 10_000; i++) {
      expect(m.push('the quick brown fox ')).toBe(false);
      expect(m.heldChars).toBeLessThanOrEqual(5);
    }
    expect(m.push('abc')).toBe(false);
    expect(m.push('def')).toBe(true);
  });

  test('waits while a stop that began earlier can still complete', () => {
    const m = new StopMatcher(['b\n\n', '\n']);
    expect(m.push('ab\n')).toBe(false); // "\n" matched, but "b\n\n" is open
    expect(m.push('c')).toBe(true); // it did not complete: the cut is at "\n"
    const n = new StopMatcher(['b\n\n', '\n']);
    expect(n.push('ab\n')).toBe(false);
    expect(n.push('\n')).toBe(true); // it did: the cut is at "b\n\n"
  });

  test('ignores empty stop strings and empty pieces', () => {
    const m = new StopMatcher(['']);
    expect(m.active).toBe(false);
    expect(m.push('anything')).toBe(false);
    const n = new StopMatcher(['ab']);
    expect(n.push('a')).toBe(false);
    expect(n.push('')).toBe(false);
    expect(n.push('b')).toBe(true);
  });

  test('any cut of a text reports the stop at the piece where the whole text first contains it', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: fc.constantFrom('a', 'b', 'c'), maxLength: 40 }),
        fc.array(fc.nat(40), { maxLength: 8 }),
        fc.array(fc.string({ unit: fc.constantFrom('a', 'b', 'c'), minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 3 }),
        (text, cuts, stops) => {
        const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((x, y) => x - y);
        const pieces: string[] = [];
        let at = 0;
        for (const p of [...points, text.length]) {
          pieces.push(text.slice(at, p));
          at = p;
        }
        // Reference, by brute force: the first piece after which the accumulated text contains a
        // stop sequence and no stop that begins before the earliest one found is still open (the
        // rest of the text from there a proper beginning of a longer stop).
        let acc = '';
        const reference = pieces.findIndex((p) => {
          acc += p;
          if (p === '') return false;
          const hits = stops.map((s) => acc.indexOf(s)).filter((i) => i >= 0);
          if (hits.length === 0) return false;
          const first = Math.min(...hits);
          for (let j = 0; j < first; j++) if (stops.some((s) => s.length > acc.length - j && s.startsWith(acc.slice(j)))) return false;
          return true;
        });
        const hit = firstHit(stops, pieces);
        expect(hit).toBe(reference);
        // Where it stops, the cut is final: the earliest stop so far is the earliest in the whole text.
        if (hit >= 0) {
          const sofar = pieces.slice(0, hit + 1).join('');
          const earliest = (t: string) => Math.min(...stops.map((s) => t.indexOf(s)).filter((i) => i >= 0));
          expect(earliest(sofar)).toBe(earliest(text));
        }
        },
      ),
    );
  });
});
