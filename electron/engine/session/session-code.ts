// Session codes read aloud and typed by people: `42-orbit-velvet-kiwi`. The number is the
// nameplate (it finds the session on the rendezvous); the words are the PAKE password and never
// leave this machine. Pure: parsing is tolerant of case and spacing, strict about everything else.
import { randomInt } from 'node:crypto';
import { KiwiError } from '../errors.js';
import { SESSION_WORDS } from './wordlist.js';

/** Words per code: 3 words of 256 give 24 bits, enough because guesses can only be made online. */
export const CODE_WORD_COUNT = 3;
export const MAX_NAMEPLATE = 9999;
/** Anything longer than this cannot be a code; refused before any other work. */
const MAX_CODE_CHARS = 128;

export interface SessionCode {
  /** 1..MAX_NAMEPLATE, shown without leading zeros. */
  nameplate: number;
  /** CODE_WORD_COUNT words from SESSION_WORDS, lower case. */
  words: string[];
}

const WORD_INDEX = new Map(SESSION_WORDS.map((w, i) => [w, i] as const));

export function formatSessionCode(code: SessionCode): string {
  assertValidParts(code);
  return [String(code.nameplate), ...code.words].join('-');
}

/** The PAKE password: the words only (the nameplate is public, it travels to the rendezvous). */
export function codePassword(code: SessionCode): string {
  return code.words.join('-');
}

/** A fresh random code for a nameplate handed out by the rendezvous. */
export function generateSessionCode(nameplate: number, pick: (n: number) => number = randomInt): SessionCode {
  const words: string[] = [];
  for (let i = 0; i < CODE_WORD_COUNT; i++) {
    const word = SESSION_WORDS[pick(SESSION_WORDS.length)];
    if (word === undefined) throw new Error('word picker returned an index outside the word list');
    words.push(word);
  }
  const code = { nameplate, words };
  assertValidParts(code);
  return code;
}

/**
 * Parses what a person typed. Accepted: any case, spaces or hyphens (or both) between the parts,
 * surrounding whitespace. Refused: unknown words, a wrong number of words, a nameplate that is
 * not a plain number in range, any other character.
 */
export function parseSessionCode(input: string): SessionCode {
  if (input.length > MAX_CODE_CHARS) {
    throw invalid(`a session code is at most ${MAX_CODE_CHARS} characters`);
  }
  const trimmed = input.trim().toLowerCase();
  if (trimmed === '') throw invalid(`the code is empty; it must start with the session number (1-${MAX_NAMEPLATE}), e.g. 42-orbit-velvet-kiwi`);
  if (!/^[0-9a-z\s-]*$/.test(trimmed)) {
    throw invalid('a session code contains only digits, letters, spaces and hyphens');
  }
  // A separator is a run of spaces with at most one hyphen in it ("42 - orbit", "42-orbit").
  const parts = trimmed.split(/\s*-\s*|\s+/);
  if (parts.some((p) => p === '')) throw invalid('the code has an empty part (two hyphens in a row, or one at an end)');
  const [plate, ...words] = parts;
  if (plate === undefined || !/^[1-9][0-9]{0,3}$/.test(plate)) {
    throw invalid(`the code must start with the session number (1-${MAX_NAMEPLATE}), e.g. 42-orbit-velvet-kiwi`);
  }
  if (words.length !== CODE_WORD_COUNT) {
    throw invalid(`the code has ${words.length} word${words.length === 1 ? '' : 's'} after the number; it needs ${CODE_WORD_COUNT}`);
  }
  for (const word of words) {
    if (!WORD_INDEX.has(word)) throw invalid(`'${word}' is not a word used in session codes; check the spelling`);
  }
  return { nameplate: Number(plate), words };
}

function assertValidParts(code: SessionCode): void {
  if (!Number.isInteger(code.nameplate) || code.nameplate < 1 || code.nameplate > MAX_NAMEPLATE) {
    throw invalid(`nameplate ${code.nameplate} is outside 1-${MAX_NAMEPLATE}`);
  }
  if (code.words.length !== CODE_WORD_COUNT || code.words.some((w) => !WORD_INDEX.has(w))) {
    throw invalid(`a code needs ${CODE_WORD_COUNT} words from the session word list`);
  }
}

function invalid(reason: string): KiwiError {
  return new KiwiError('SESSION_CODE_INVALID', `Invalid session code: ${reason}. Ask the host to read the code again.`);
}
