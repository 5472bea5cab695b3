// Byte-level BPE pre-tokenization: splits text into words exactly as llama.cpp's unicode_regex_split
// does (src/unicode.cpp). The common regexes run as hand-written scanners (as in llama.cpp); any
// other regex runs as a JS RegExp over llama.cpp's "collapsed" text, where every non-ASCII code point
// is replaced by one char naming its category, so that \p{L}, \p{N}, \s... mean exactly what they
// mean to llama.cpp (std::regex in the C locale) rather than what the JS engine's Unicode tables say.
import { KiwiError } from '../../errors.js';
import {
  FLAG_ACCENT_MARK,
  FLAG_LETTER,
  FLAG_NUMBER,
  FLAG_PUNCTUATION,
  FLAG_SYMBOL,
  FLAG_WHITESPACE,
  MASK_CATEGORIES,
  codePointFlags,
  toCodePoints,
} from './unicode.js';

const GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const LLAMA3_REGEX_ORIGINAL =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const LLAMA3_REGEX =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_REGEX =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN35_REGEX =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const PORO_REGEX = ' ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+';
const GPT4O_REGEX =
  "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/**
 * The regex lists of llama.cpp's llm_tokenizer_bpe constructor (src/llama-vocab.cpp), by pre-type.
 * Strings are copied verbatim: the scanners below are chosen by exact string equality, as there.
 */
export const PRE_TOKENIZER_REGEXES = {
  default: [
    '[\\p{P}\\$\\+<=>\\^~\\|]+',
    GPT2_REGEX,
    '\\p{N}+',
    '[0-9][0-9][0-9]',
  ],
  llama3: [LLAMA3_REGEX],
  'deepseek-llm': [
    '[\r\n]',
    '\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+',
    '\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+',
    '\\s+$',
    '[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+',
    '\\p{N}+',
  ],
  'deepseek-v3': [
    '\\p{N}{1,3}',
    '[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+',
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
  ],
  'deepseek-coder': ['[\r\n]', '\\s?\\p{L}+', '\\s?\\p{P}+', '[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+', '\\p{N}'],
  falcon: [
    '[\\p{P}\\$\\+<=>\\^~\\|`]+',
    GPT2_REGEX,
    '[0-9][0-9][0-9]',
  ],
  starcoder: ['\\p{N}', GPT2_REGEX],
  gpt2: [GPT2_REGEX],
  qwen2: [QWEN2_REGEX],
  qwen35: [QWEN35_REGEX],
  poro: [PORO_REGEX],
  viking: [PORO_REGEX, '\\p{N}'],
  tekken: [
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  ],
  chameleon: [
    '<sentinel:[0-9]+>',
    '(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z',
    '([\\t\\n]|    |  )',
    '\\p{N}',
    '[\\p{P}!-/:-@\\[-`{-~]',
    GPT2_REGEX,
  ],
  gpt4o: [GPT4O_REGEX],
  'seed-coder': [
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  ],
  bailingmoe: [
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
  ],
  minicpm5: [
    '\\p{N}{1,3}',
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  ],
} as const satisfies Record<string, readonly string[]>;

export type PreTokenizerKind = keyof typeof PRE_TOKENIZER_REGEXES;

type Splitter = (cpts: Uint32Array, offsets: number[]) => number[];

// Collapsed-text category chars (llama.cpp k_ucat_cpt) and the ASCII members of each category
// (k_ucat_map), so a \p{..} class also matches the ASCII code points that keep their own char.
const UCAT_CHAR: ReadonlyMap<number, string> = new Map([
  [FLAG_NUMBER, '\u00d1'],
  [FLAG_LETTER, '\u00d2'],
  [FLAG_PUNCTUATION, '\u00d3'],
  [FLAG_ACCENT_MARK, '\u00d4'],
  [FLAG_SYMBOL, '\u00d5'],
]);
const UCAT_ENUM: ReadonlyMap<string, number> = new Map([
  ['\\p{N}', FLAG_NUMBER],
  ['\\p{L}', FLAG_LETTER],
  ['\\p{P}', FLAG_PUNCTUATION],
  ['\\p{M}', FLAG_ACCENT_MARK],
  ['\\p{S}', FLAG_SYMBOL],
  ['\\p{Lu}', FLAG_LETTER],
  ['\\p{Ll}', FLAG_LETTER],
  ['\\p{Lt}', FLAG_LETTER],
  ['\\p{Lm}', FLAG_LETTER],
  ['\\p{Lo}', FLAG_LETTER],
]);
const UCAT_ASCII: ReadonlyMap<number, string> = new Map([
  [FLAG_NUMBER, '0-9'],
  [FLAG_LETTER, 'A-Za-z'],
  [FLAG_PUNCTUATION, '!-#%-*,-/:-;?-@\\[-\\]_\\{\\}'],
  [FLAG_ACCENT_MARK, ''],
  [FLAG_SYMBOL, '\\$\\+<->^`\\|\\~'],
]);

// C-locale isspace: what std::regex's \s means for the collapsed or widened text.
const SPACE_CLASS_BODY = '\\t\\n\\v\\f\\r ';

function usesCategories(expr: string): boolean {
  for (const key of UCAT_ENUM.keys()) if (expr.includes(key)) return true;
  return false;
}

/** Rewrites \s and \S as explicit C-locale classes (JS's \s also matches U+FEFF, U+00A0, ...). */
function rewriteSpaces(expr: string): string {
  let out = '';
  let inside = false;
  for (let i = 0; i < expr.length; i++) {
    const c = expr[i]!;
    if (c === '\\' && i + 1 < expr.length) {
      const n = expr[i + 1]!;
      if (n === 's') out += inside ? SPACE_CLASS_BODY : `[${SPACE_CLASS_BODY}]`;
      else if (n === 'S') {
        if (inside) throw new Error(`\\S inside a character class is not supported: ${expr}`);
        out += `[^${SPACE_CLASS_BODY}]`;
      } else out += c + n;
      i++;
      continue;
    }
    if (c === '[' && !inside) inside = true;
    else if (c === ']' && inside) inside = false;
    out += c;
  }
  return out;
}

/** llama.cpp's regex_expr_collapsed: each known \p{..} becomes its category char plus ASCII members. */
function collapseRegex(expr: string): string {
  for (let i = 0; i < expr.length; i++) {
    if (expr.charCodeAt(i) >= 128) {
      throw new KiwiError('TOKENIZER_UNSUPPORTED', `pre-tokenizer regex mixes Unicode categories and non-ASCII characters: ${expr}`);
    }
  }
  let out = '';
  let inside = false;
  for (let i = 0; i < expr.length; i++) {
    const c = expr[i]!;
    if (c === '[' && (i === 0 || expr[i - 1] !== '\\')) {
      out += '[';
      inside = true;
      continue;
    }
    if (inside && c === ']' && expr[i - 1] !== '\\') {
      out += ']';
      inside = false;
      continue;
    }
    if (c === '\\' && i + 3 < expr.length && expr[i + 1] === 'p' && expr[i + 2] === '{') {
      const close = expr.indexOf('}', i + 3);
      if (close !== -1 && close <= i + 10) {
        const flag = UCAT_ENUM.get(expr.slice(i, close + 1));
        if (flag !== undefined) {
          const body = UCAT_CHAR.get(flag)! + UCAT_ASCII.get(flag)!;
          out += inside ? body : `[${body}]`;
          i = close;
          continue;
        }
      }
    }
    out += c;
  }
  return out;
}

interface CompiledRegex {
  collapsed: boolean;
  re: RegExp;
}

function compile(expr: string): CompiledRegex {
  const collapsed = usesCategories(expr);
  const source = rewriteSpaces(collapsed ? collapseRegex(expr) : expr);
  try {
    return { collapsed, re: new RegExp(source, collapsed ? 'g' : 'gu') };
  } catch (err) {
    throw new KiwiError('TOKENIZER_UNSUPPORTED', `pre-tokenizer regex cannot be compiled: ${expr} (${String(err)})`);
  }
}

/** Runs one regex over each current piece, like llama.cpp's unicode_regex_split_stl. */
function splitWithRegex(units: string, unitToCp: Int32Array | undefined, cpToUnit: Int32Array | undefined, re: RegExp, offsets: number[]): number[] {
  const out: number[] = [];
  let startCp = 0;
  for (const len of offsets) {
    const endCp = startCp + len;
    const startU = cpToUnit ? cpToUnit[startCp]! : startCp;
    const endU = cpToUnit ? cpToUnit[endCp]! : endCp;
    const piece = units.slice(startU, endU);
    re.lastIndex = 0;
    let prevCp = 0; // relative to startCp
    for (;;) {
      const m = re.exec(piece);
      if (m === null) break;
      const mStartU = m.index;
      const mEndU = m.index + m[0].length;
      if (mEndU === mStartU) {
        // An empty match yields an empty word in llama.cpp, which tokenizes to nothing; step past it.
        re.lastIndex = mEndU + 1;
        if (re.lastIndex > piece.length) break;
        continue;
      }
      const mStart = unitToCp ? unitToCp[startU + mStartU]! - startCp : mStartU;
      const mEnd = unitToCp ? unitToCp[startU + mEndU]! - startCp : mEndU;
      if (mStart > prevCp) out.push(mStart - prevCp);
      out.push(mEnd - mStart);
      prevCp = mEnd;
    }
    if (prevCp < len) out.push(len - prevCp);
    startCp = endCp;
  }
  return out;
}

/** Shared state of the hand-written scanners for one piece [ini, end) of the code points. */
function scanPieces(cpts: Uint32Array, offsets: number[], scan: (s: Scanner) => void): number[] {
  const out: number[] = [];
  let start = 0;
  for (const len of offsets) {
    scan(new Scanner(cpts, start, start + len, out));
    start += len;
  }
  return out;
}

const OUT_OF_RANGE = 0xffffffff;

class Scanner {
  private prevEnd: number;
  constructor(
    private readonly cpts: Uint32Array,
    readonly ini: number,
    readonly end: number,
    private readonly out: number[],
  ) {
    this.prevEnd = ini;
  }
  cpt(pos: number): number {
    return pos >= this.ini && pos < this.end ? this.cpts[pos]! : OUT_OF_RANGE;
  }
  flags(pos: number): number {
    return pos >= this.ini && pos < this.end ? codePointFlags(this.cpts[pos]!) : 0;
  }
  addToken(end: number): number {
    const len = end - this.prevEnd;
    if (len > 0) this.out.push(len);
    this.prevEnd = end;
    return len;
  }
}

// ASCII-only lowering suffices: no non-ASCII code point lowercases to s, t, r, e, v, m, l or d.
function lowerAscii(cp: number): number {
  return cp >= 0x41 && cp <= 0x5a ? cp + 32 : cp;
}

const CH_APOS = 0x27;
const CH_SPACE = 0x20;
const CH_CR = 0x0d;
const CH_LF = 0x0a;
const C_S = 0x73;
const C_T = 0x74;
const C_M = 0x6d;
const C_D = 0x64;
const C_R = 0x72;
const C_E = 0x65;
const C_V = 0x76;
const C_L = 0x6c;

/** Matches 's 't 're 've 'm 'll 'd at pos; returns the token end or -1. */
function contraction(s: Scanner, pos: number, caseInsensitive: boolean): number {
  if (s.cpt(pos) !== CH_APOS || pos + 1 >= s.end) return -1;
  const lo = caseInsensitive ? lowerAscii : (c: number) => c;
  const next = lo(s.cpt(pos + 1));
  if (next === C_S || next === C_T || next === C_M || next === C_D) return pos + 2;
  if (pos + 2 < s.end) {
    const nn = lo(s.cpt(pos + 2));
    if ((next === C_R && nn === C_E) || (next === C_V && nn === C_E) || (next === C_L && nn === C_L)) return pos + 3;
  }
  return -1;
}

const isWs = (f: number): boolean => (f & FLAG_WHITESPACE) !== 0;
const isLetter = (f: number): boolean => (f & FLAG_LETTER) !== 0;
const isNumber = (f: number): boolean => (f & FLAG_NUMBER) !== 0;
const isMark = (f: number): boolean => (f & FLAG_ACCENT_MARK) !== 0;

/** Trailing whitespace handling shared by the llama3/qwen2 scanners: \s*[\r\n]+ | \s+(?!\S) | \s+ | any. */
function scanWhitespaceTail(s: Scanner, pos: number): number {
  let n = 0;
  let lastRN = 0;
  while (isWs(s.flags(pos + n))) {
    const c = s.cpt(pos + n);
    if (c === CH_CR || c === CH_LF) lastRN = pos + n + 1;
    n++;
  }
  if (lastRN > 0) {
    s.addToken(lastRN);
    return lastRN;
  }
  if (n > 1 && s.cpt(pos + n) !== OUT_OF_RANGE) {
    s.addToken(pos + n - 1);
    return pos + n - 1;
  }
  if (n > 0) {
    s.addToken(pos + n);
    return pos + n;
  }
  s.addToken(pos + 1);
  return pos + 1;
}

// llama.cpp unicode_regex_split_custom_gpt2
const splitGpt2: Splitter = (cpts, offsets) =>
  scanPieces(cpts, offsets, (s) => {
    for (let pos = s.ini; pos < s.end; ) {
      const cpt = s.cpt(pos);
      const flags = s.flags(pos);
      const c = contraction(s, pos, false);
      if (c >= 0) {
        pos += s.addToken(c);
        continue;
      }
      let flags2 = cpt === CH_SPACE ? s.flags(pos + 1) : flags;
      if (isLetter(flags2)) {
        pos += cpt === CH_SPACE ? 1 : 0;
        while (isLetter(flags2)) flags2 = s.flags(++pos);
        s.addToken(pos);
        continue;
      }
      if (isNumber(flags2)) {
        pos += cpt === CH_SPACE ? 1 : 0;
        while (isNumber(flags2)) flags2 = s.flags(++pos);
        s.addToken(pos);
        continue;
      }
      if (!(isWs(flags2) || isLetter(flags2) || isNumber(flags2)) && flags2 !== 0) {
        pos += cpt === CH_SPACE ? 1 : 0;
        while (!(isWs(flags2) || isLetter(flags2) || isNumber(flags2)) && flags2 !== 0) flags2 = s.flags(++pos);
        s.addToken(pos);
        continue;
      }
      let n = 0;
      while (isWs(s.flags(pos + n))) n++;
      if (n > 1 && s.cpt(pos + n) !== OUT_OF_RANGE) {
        pos += n - 1;
        s.addToken(pos);
        continue;
      }
      if (n > 0) {
        pos += n;
        s.addToken(pos);
        continue;
      }
      s.addToken(++pos);
    }
  });

/**
 * llama.cpp unicode_regex_split_custom_llama3 (digitRun 3), _qwen2 (digitRun 1) and _qwen35
 * (digitRun 1, letters also take combining marks).
 */
function makeLlama3Like(digitRun: number, withMarks: boolean): Splitter {
  const wordChar = withMarks ? (f: number) => isLetter(f) || isMark(f) : isLetter;
  const punctExcluded = withMarks
    ? (f: number) => isWs(f) || isLetter(f) || isMark(f) || isNumber(f)
    : (f: number) => isWs(f) || isLetter(f) || isNumber(f);
  return (cpts, offsets) =>
    scanPieces(cpts, offsets, (s) => {
      for (let pos = s.ini; pos < s.end; ) {
        const cpt = s.cpt(pos);
        const flags = s.flags(pos);
        const c = contraction(s, pos, true);
        if (c >= 0) {
          pos += s.addToken(c);
          continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if (!(cpt === CH_CR || cpt === CH_LF || isNumber(flags))) {
          if (wordChar(flags) || wordChar(s.flags(pos + 1))) {
            pos++;
            while (wordChar(s.flags(pos))) pos++;
            s.addToken(pos);
            continue;
          }
        }
        // \p{N}{1,digitRun}
        if (isNumber(flags)) {
          if (digitRun === 1) {
            pos++;
            s.addToken(pos);
            continue;
          }
          let ini = pos;
          while (isNumber(s.flags(pos))) {
            if (++pos - ini >= digitRun) {
              s.addToken(pos);
              ini = pos;
            }
          }
          s.addToken(pos);
          continue;
        }
        // <space>?[^\s\p{L}\p{N}]+[\r\n]*  (note: llama.cpp tests `flags`, not `flags2`, for non-zero)
        let flags2 = cpt === CH_SPACE ? s.flags(pos + 1) : flags;
        if (!punctExcluded(flags2) && flags !== 0) {
          pos += cpt === CH_SPACE ? 1 : 0;
          while (!punctExcluded(flags2) && flags2 !== 0) flags2 = s.flags(++pos);
          let c2 = s.cpt(pos);
          while (c2 === CH_CR || c2 === CH_LF) c2 = s.cpt(++pos);
          s.addToken(pos);
          continue;
        }
        pos = scanWhitespaceTail(s, pos);
      }
    });
}

const CUSTOM_SPLITTERS: ReadonlyMap<string, Splitter> = new Map([
  [GPT2_REGEX, splitGpt2],
  [LLAMA3_REGEX_ORIGINAL, makeLlama3Like(3, false)],
  [LLAMA3_REGEX, makeLlama3Like(3, false)],
  [QWEN2_REGEX, makeLlama3Like(1, false)],
  [QWEN35_REGEX, makeLlama3Like(1, true)],
]);

function collapsedText(cpts: Uint32Array): string {
  const chars: string[] = new Array<string>(cpts.length);
  for (let i = 0; i < cpts.length; i++) {
    const cp = cpts[i]!;
    if (cp < 128) {
      chars[i] = String.fromCharCode(cp);
      continue;
    }
    const flags = codePointFlags(cp);
    if (isWs(flags)) chars[i] = '\u000b';
    else chars[i] = UCAT_CHAR.get(flags & MASK_CATEGORIES) ?? '\u00d0';
  }
  return chars.join('');
}

interface WideText {
  text: string;
  unitToCp: Int32Array;
  cpToUnit: Int32Array;
}

/** The code points as a string, non-ASCII whitespace turned into \v as llama.cpp's wtext does. */
function wideText(cpts: Uint32Array): WideText {
  const parts: string[] = new Array<string>(cpts.length);
  const cpToUnit = new Int32Array(cpts.length + 1);
  let units = 0;
  for (let i = 0; i < cpts.length; i++) {
    let cp = cpts[i]!;
    if (cp > 0x7f && isWs(codePointFlags(cp))) cp = 0x0b;
    parts[i] = String.fromCodePoint(cp);
    cpToUnit[i] = units;
    units += cp > 0xffff ? 2 : 1;
  }
  cpToUnit[cpts.length] = units;
  const unitToCp = new Int32Array(units + 1);
  for (let i = 0; i < cpts.length; i++) {
    unitToCp[cpToUnit[i]!] = i;
    if (cpToUnit[i + 1]! - cpToUnit[i]! === 2) unitToCp[cpToUnit[i]! + 1] = i;
  }
  unitToCp[units] = cpts.length;
  return { text: parts.join(''), unitToCp, cpToUnit };
}

/** A compiled pre-tokenizer: llama.cpp's unicode_regex_split for one list of regexes. */
export class PreTokenizer {
  private readonly steps: ({ kind: 'custom'; split: Splitter } | { kind: 'regex'; compiled: CompiledRegex })[];

  constructor(readonly regexes: readonly string[]) {
    this.steps = regexes.map((expr) => {
      const custom = CUSTOM_SPLITTERS.get(expr);
      return custom !== undefined ? { kind: 'custom' as const, split: custom } : { kind: 'regex' as const, compiled: compile(expr) };
    });
  }

  /** Splits `text` into words (JS strings, before any byte-level encoding). */
  split(text: string): string[] {
    const cpts = toCodePoints(text);
    if (cpts.length === 0) return [];
    let offsets = [cpts.length];
    let collapsed: string | undefined;
    let wide: WideText | undefined;
    for (const step of this.steps) {
      if (step.kind === 'custom') {
        offsets = step.split(cpts, offsets);
      } else if (step.compiled.collapsed) {
        collapsed ??= collapsedText(cpts);
        offsets = splitWithRegex(collapsed, undefined, undefined, step.compiled.re, offsets);
      } else {
        wide ??= wideText(cpts);
        offsets = splitWithRegex(wide.text, wide.unitToCp, wide.cpToUnit, step.compiled.re, offsets);
      }
    }
    // Cut the words from the original text: a lone surrogate there encodes to the same UTF-8 bytes
    // (those of U+FFFD) as the code point llama.cpp sees.
    const words: string[] = new Array<string>(offsets.length);
    let cp = 0;
    let unit = 0;
    for (let i = 0; i < offsets.length; i++) {
      const startUnit = unit;
      for (const end = cp + offsets[i]!; cp < end; cp++) unit += cpts[cp]! > 0xffff ? 2 : 1;
      words[i] = text.slice(startUnit, unit);
    }
    return words;
  }
}
