// Unicode helpers shared by the tokenizers: llama.cpp's per-code-point category flags, UTF-8
// encoding/decoding, and GPT-2's bytes-to-unicode map. Invariant: every answer here equals what
// llama.cpp's src/unicode.cpp gives for the same code point or byte.
import { FLAG_WHITESPACE, LOWERCASE_ENCODED, NFD_ENCODED, RANGES_ENCODED, WHITESPACE_CODE_POINTS } from './unicode-data.js';

export {
  FLAG_ACCENT_MARK,
  FLAG_CONTROL,
  FLAG_LETTER,
  FLAG_NUMBER,
  FLAG_PUNCTUATION,
  FLAG_SEPARATOR,
  FLAG_SYMBOL,
  FLAG_UNDEFINED,
  FLAG_WHITESPACE,
  MASK_CATEGORIES,
} from './unicode-data.js';

export const MAX_CODE_POINT = 0x10ffff;

let flagTable: Uint16Array | undefined;

/** One u16 of flags per code point (2.2 MB), built on first use from the range table. */
function table(): Uint16Array {
  if (flagTable !== undefined) return flagTable;
  const t = new Uint16Array(MAX_CODE_POINT + 1);
  const pairs = RANGES_ENCODED.split(',');
  let start = 0;
  let prevStart = -1;
  let prevFlags = 0;
  for (const pair of pairs) {
    const dot = pair.indexOf('.');
    start += parseInt(pair.slice(0, dot), 36);
    const flags = parseInt(pair.slice(dot + 1), 36);
    if (prevStart >= 0) t.fill(prevFlags, prevStart, start);
    prevStart = start;
    prevFlags = flags;
  }
  for (const cp of WHITESPACE_CODE_POINTS) t[cp] = t[cp]! | FLAG_WHITESPACE;
  flagTable = t;
  return t;
}

/** llama.cpp's unicode_cpt_flags_from_cpt: category bits plus the whitespace bit; 0 past U+10FFFF. */
export function codePointFlags(cp: number): number {
  return cp <= MAX_CODE_POINT ? table()[cp]! : 0;
}

/** Code points of a JS string; a lone surrogate becomes U+FFFD, as its UTF-8 encoding would. */
export function toCodePoints(text: string): Uint32Array {
  const out = new Uint32Array(text.length);
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        out[n++] = ((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000;
        i++;
        continue;
      }
    }
    out[n++] = c >= 0xd800 && c <= 0xdfff ? 0xfffd : c;
  }
  return out.subarray(0, n);
}

let lowercase: Map<number, number> | undefined;

/** llama.cpp's unicode_tolower: its simple lower-case mapping, else the code point itself. */
export function toLowerCodePoint(cp: number): number {
  if (lowercase === undefined) {
    lowercase = new Map();
    let from = 0;
    for (const pair of LOWERCASE_ENCODED.split(',')) {
      const [delta, offset] = pair.split('.');
      from += parseInt(delta!, 36);
      lowercase.set(from, from + parseInt(offset!, 36));
    }
  }
  return lowercase.get(cp) ?? cp;
}

let nfd: { first: Uint32Array; last: Uint32Array; base: Uint32Array } | undefined;

/** llama.cpp's unicode_cpts_normalize_nfd for one code point: the first code point of its decomposition. */
export function nfdBaseCodePoint(cp: number): number {
  if (nfd === undefined) {
    const parts = NFD_ENCODED.split(',');
    const t = { first: new Uint32Array(parts.length), last: new Uint32Array(parts.length), base: new Uint32Array(parts.length) };
    let first = 0;
    parts.forEach((part, i) => {
      const [delta, length, offset] = part.split('.');
      first += parseInt(delta!, 36);
      t.first[i] = first;
      t.last[i] = first + parseInt(length!, 36);
      t.base[i] = first + parseInt(offset!, 36);
    });
    nfd = t;
  }
  // The last range starting at or before cp (the table starts at 0).
  let lo = 0;
  let hi = nfd.first.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (nfd.first[mid]! <= cp) lo = mid;
    else hi = mid - 1;
  }
  return cp <= nfd.last[lo]! ? nfd.base[lo]! : cp;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

export function utf8Encode(text: string): Uint8Array {
  return encoder.encode(text);
}

/** Bytes to text; invalid sequences become U+FFFD (as V8 does for llama.cpp's output in node-llama-cpp). */
export function utf8Decode(bytes: Uint8Array): string {
  return decoder.decode(bytes);
}

/**
 * Length of the longest prefix of `bytes` that ends on a complete UTF-8 sequence boundary. Bytes
 * that can never start or continue a valid sequence count as complete (they decode to U+FFFD),
 * so only a truly unfinished trailing sequence is held back.
 */
export function completeUtf8Length(bytes: Uint8Array, length: number = bytes.length): number {
  // Look at most 3 bytes back for the start of an unfinished sequence.
  for (let back = 1; back <= 3 && back <= length; back++) {
    const b = bytes[length - back]!;
    if ((b & 0xc0) === 0x80) continue; // continuation byte: keep looking for the lead
    let need = 0;
    if ((b & 0xe0) === 0xc0) need = 2;
    else if ((b & 0xf0) === 0xe0) need = 3;
    else if ((b & 0xf8) === 0xf0) need = 4;
    if (need > back) {
      // Only hold back if the bytes seen so far could still become a valid sequence.
      if (isValidPrefix(bytes, length - back, back)) return length - back;
    }
    return length;
  }
  return length;
}

function isValidPrefix(bytes: Uint8Array, start: number, n: number): boolean {
  const b0 = bytes[start]!;
  if (b0 === 0xc0 || b0 === 0xc1 || b0 > 0xf4) return false;
  if (n >= 2) {
    const b1 = bytes[start + 1]!;
    // Second-byte ranges from the Unicode "well-formed UTF-8" table.
    if (b0 === 0xe0 && b1 < 0xa0) return false;
    if (b0 === 0xed && b1 > 0x9f) return false;
    if (b0 === 0xf0 && b1 < 0x90) return false;
    if (b0 === 0xf4 && b1 > 0x8f) return false;
  }
  return true;
}

// GPT-2 bytes_to_unicode(): printable latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order (llama.cpp unicode_byte_to_utf8_map).
const BYTE_TO_CHAR: string[] = [];
const CHAR_TO_BYTE = new Map<number, number>();
{
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    const cp = printable ? b : 256 + n++;
    BYTE_TO_CHAR.push(String.fromCharCode(cp));
    CHAR_TO_BYTE.set(cp, b);
  }
}

/** GPT-2 byte-level encoding of a string's UTF-8 bytes: one BMP char per byte. */
export function byteEncode(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += BYTE_TO_CHAR[b]!;
  return s;
}

export function byteToChar(b: number): string {
  return BYTE_TO_CHAR[b]!;
}

/** The byte a GPT-2 byte-level char stands for, or undefined for a char outside the map. */
export function charToByte(cp: number): number | undefined {
  return CHAR_TO_BYTE.get(cp);
}
