import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { isKiwiError } from '../errors.js';
import { CODE_WORD_COUNT, codePassword, formatSessionCode, generateSessionCode, parseSessionCode } from './session-code.js';
import { SESSION_WORDS } from './wordlist.js';

describe('session codes', () => {
  it('ships 256 distinct lower-case words', () => {
    expect(SESSION_WORDS).toHaveLength(256);
    expect(new Set(SESSION_WORDS).size).toBe(256);
    for (const w of SESSION_WORDS) expect(w).toMatch(/^[a-z]{3,8}$/);
  });

  it('parses the canonical form', () => {
    expect(parseSessionCode('42-orbit-velvet-kiwi')).toEqual({ nameplate: 42, words: ['orbit', 'velvet', 'kiwi'] });
  });

  it.each([
    ['  42-Orbit-VELVET-kiwi  '],
    ['42 orbit velvet kiwi'],
    ['42 - orbit - velvet - kiwi'],
    ['42-orbit velvet\tkiwi'],
  ])('tolerates case and spacing in %j', (input) => {
    expect(formatSessionCode(parseSessionCode(input))).toBe('42-orbit-velvet-kiwi');
  });

  it.each([
    ['', 'start with the session number'],
    ['orbit-velvet-kiwi', 'start with the session number'],
    ['042-orbit-velvet-kiwi', 'start with the session number'],
    ['0-orbit-velvet-kiwi', 'start with the session number'],
    ['10000-orbit-velvet-kiwi', 'start with the session number'],
    ['42-orbit-velvet', 'has 2 words'],
    ['42-orbit-velvet-kiwi-apple', 'has 4 words'],
    ['42-orbit-velvet-kiwii', "'kiwii' is not a word"],
    ['42--orbit-velvet-kiwi', 'empty part'],
    ['42-orbit-velvet-kiwi-', 'empty part'],
    ['42_orbit_velvet_kiwi', 'only digits, letters'],
    ['42-orbit-velvet-kïwi', 'only digits, letters'],
    ['4'.repeat(200), 'at most 128'],
  ])('refuses %j', (input, reason) => {
    let caught: unknown;
    try {
      parseSessionCode(input);
    } catch (err) {
      caught = err;
    }
    expect(isKiwiError(caught, 'SESSION_CODE_INVALID')).toBe(true);
    expect((caught as Error).message).toContain(reason);
  });

  it('uses only the words as the password', () => {
    expect(codePassword(parseSessionCode('7-apple-berry-cedar'))).toBe('apple-berry-cedar');
  });

  it('generates codes that format and parse back to themselves', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 9999 }), fc.array(fc.nat(255), { minLength: CODE_WORD_COUNT, maxLength: CODE_WORD_COUNT }), (plate, picks) => {
        let i = 0;
        const code = generateSessionCode(plate, () => picks[i++] ?? 0);
        expect(parseSessionCode(formatSessionCode(code))).toEqual(code);
      }),
    );
  });

  it('never throws anything but SESSION_CODE_INVALID on arbitrary input', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 200 }), (input) => {
        try {
          parseSessionCode(input);
        } catch (err) {
          expect(isKiwiError(err, 'SESSION_CODE_INVALID')).toBe(true);
        }
      }),
    );
  });
});
