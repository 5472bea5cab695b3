// Stop sequences in streamed text: what is released, what is held back, and where text is cut.
import { describe, expect, test } from 'vitest';
import fc from 'fast-check';
import { StopSequenceFilter } from './stop-sequences.js';

function run(stops: string[], pieces: string[]): { out: string; stopped: boolean } {
  const f = new StopSequenceFilter(stops);
  let out = '';
  for (const p of pieces) {
    const r = f.push(p);
    out += r.text;
    if (r.stopped) return { out, stopped: true };
  }
  out += f.flush();
  return { out, stopped: f.stopped };
}

describe('StopSequenceFilter', () => {
  test('passes text straight through without stop sequences', () => {
    const f = new StopSequenceFilter([]);
    expect(f.push('Hello')).toEqual({ text: 'Hello', stopped: false });
    expect(f.flush()).toBe('');
  });

  test('holds back text that could be the start of a stop string', () => {
    const f = new StopSequenceFilter(['END']);
    expect(f.push('the E')).toEqual({ text: 'the ', stopped: false });
    expect(f.push('N')).toEqual({ text: '', stopped: false });
    expect(f.push('x')).toEqual({ text: 'ENx', stopped: false });
  });

  test('cuts the text right before a stop string split across pieces', () => {
    expect(run(['END'], ['a E', 'N', 'D and more'])).toEqual({ out: 'a ', stopped: true });
  });

  test('stops at the earliest of several stop strings', () => {
    expect(run(['world', 'lo'], ['hello world'])).toEqual({ out: 'hel', stopped: true });
  });

  test('releases a held-back partial match at the end when no stop came', () => {
    expect(run(['\n\n'], ['one\n'])).toEqual({ out: 'one\n', stopped: false });
  });

  test('waits for an earlier stop that may still complete before cutting at a later one', () => {
    // "\n" matched at 2, but "b\n\n" began at 1: the next piece decides (fast-check's counterexample).
    expect(run(['b\n\n', '\n'], ['ab\n', '\n'])).toEqual({ out: 'a', stopped: true });
    expect(run(['b\n\n', '\n'], ['ab\n', 'c'])).toEqual({ out: 'ab', stopped: true });
    // Generation ended while it waited: the stop found still cuts the text.
    const f = new StopSequenceFilter(['b\n\n', '\n']);
    expect(f.push('ab\n')).toEqual({ text: 'a', stopped: false });
    expect([f.flush(), f.stopped]).toEqual(['b', true]);
  });

  test('any split of the text gives what cutting the whole text gives', () => {
    fc.assert(
      fc.property(fc.string({ unit: fc.constantFrom('a', 'b', 'c', '\n') }), fc.array(fc.string({ unit: fc.constantFrom('a', 'b', '\n'), minLength: 1, maxLength: 3 }), { minLength: 1, maxLength: 3 }), fc.array(fc.nat(20), { maxLength: 6 }), (text, stops, cuts) => {
        const points = [...new Set(cuts.map((c) => Math.min(c, text.length)))].sort((x, y) => x - y);
        const pieces: string[] = [];
        let at = 0;
        for (const p of [...points, text.length]) {
          pieces.push(text.slice(at, p));
          at = p;
        }
        const firstStop = Math.min(...stops.map((s) => text.indexOf(s)).filter((i) => i >= 0));
        const expected = Number.isFinite(firstStop) ? { out: text.slice(0, firstStop), stopped: true } : { out: text, stopped: false };
        expect(run(stops, pieces)).toEqual(expected);
      }),
    );
  });
});
