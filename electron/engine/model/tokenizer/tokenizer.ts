// Text <-> token ids for a GGUF model, reproducing llama.cpp's llama_tokenize / llama_detokenize
// (src/llama-vocab.cpp): special-token partitioning, the SentencePiece bigram merge with byte
// fallback, byte-level BPE with merge ranks and pre-tokenizer regexes, BERT WordPiece, and piece
// decoding with llama.cpp's space clean-up. Invariant: for the same vocabulary and flags, encode() returns the ids
// llama.cpp returns and decode() the text it returns. Pure: built from metadata, no I/O.
import { KiwiError } from '../../errors.js';
import type { GgufMetadata } from '../gguf/gguf-metadata.js';
import { Heap } from './heap.js';
import { PRE_TOKENIZER_REGEXES, PreTokenizer } from './pre-tokenizer.js';
import {
  FLAG_ACCENT_MARK,
  FLAG_CONTROL,
  FLAG_PUNCTUATION,
  FLAG_SYMBOL,
  FLAG_WHITESPACE,
  byteEncode,
  charToByte,
  codePointFlags,
  completeUtf8Length,
  nfdBaseCodePoint,
  toCodePoints,
  toLowerCodePoint,
  utf8Decode,
  utf8Encode,
} from './unicode.js';
import { utf8Length } from './vocab.js';
import { TokenAttr, loadVocab } from './vocab.js';
import type { Vocab, VocabType } from './vocab.js';

export interface EncodeOptions {
  /**
   * Prepend BOS. Default: the model's tokenizer.ggml.add_bos_token, else llama.cpp's default for the
   * vocab type. For WordPiece (BERT) this is llama.cpp's add_special: [CLS] before and [SEP] after.
   */
  addBos?: boolean;
  /** Append EOS. Default: the model's tokenizer.ggml.add_eos_token (usually false). */
  addEos?: boolean;
  /** Turn the text of control tokens (e.g. `<|im_start|>`) into those tokens. Default false. */
  parseSpecial?: boolean;
}

export interface DecodeOptions {
  /** Render control tokens as their text (llama.cpp's `special`/`unparse_special`). Default false. */
  special?: boolean;
}

/**
 * Turns generated ids into text piece by piece, holding back incomplete UTF-8 sequences. Pieces are
 * concatenated as llama.cpp's server streams them (token_to_piece): no leading-space removal and no
 * clean-up pass, which decode() applies to a whole sequence.
 */
export interface StreamDecoder {
  /** Text that became complete with this token ('' while a multi-byte character is unfinished). */
  push(id: number): string;
  /** Whatever is still held back, with U+FFFD for an unfinished sequence; resets the decoder. */
  flush(): string;
}

export interface Tokenizer {
  readonly type: VocabType;
  /** tokenizer.ggml.pre (BPE), undefined when absent. */
  readonly pre: string | undefined;
  readonly vocabSize: number;
  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  readonly eotId: number | undefined;
  readonly eomId: number | undefined;
  readonly unkId: number | undefined;
  readonly padId: number | undefined;
  /** Whether encode() adds BOS / EOS by default. */
  readonly addBos: boolean;
  readonly addEos: boolean;
  /** Every id that ends a generation (EOS, EOT, EOM, <|im_end|>, <|eot_id|>, <|end|>, ...). */
  readonly endOfGenerationIds: readonly number[];
  encode(text: string, options?: EncodeOptions): number[];
  decode(ids: readonly number[], options?: DecodeOptions): string;
  createStreamDecoder(options?: DecodeOptions): StreamDecoder;
  isEndOfGeneration(id: number): boolean;
  isControl(id: number): boolean;
  /** The raw vocabulary text of a token (e.g. `▁Hello`, `Ġworld`, `<0x0A>`). */
  tokenText(id: number): string;
  /** The id whose raw vocabulary text is exactly `text`, if any. */
  tokenId(text: string): number | undefined;
  /** The bytes llama.cpp's token_to_piece gives for one token. */
  tokenPiece(id: number, options?: DecodeOptions): Uint8Array;
}

export function createTokenizer(metadata: GgufMetadata): Tokenizer {
  return new LlamaTokenizer(loadVocab(metadata));
}

type Fragment = string | number; // raw text, or a token id found by special-token partitioning

const SPACE_ESCAPE = '\u2581'; // ▁
const EMPTY = new Uint8Array(0);
const WORD_CACHE_LIMIT = 20_000;

/** C isspace() for the lstrip/rstrip of special tokens (bytes; only ASCII can match). */
function isCSpace(code: number): boolean {
  return code === 0x20 || (code >= 0x09 && code <= 0x0d);
}

interface MergeSymbol {
  start: number;
  len: number;
  prev: number;
  next: number;
}

interface SpmBigram {
  left: number;
  right: number;
  score: number;
  size: number;
}

interface BpeBigram {
  left: number;
  right: number;
  rank: number;
  size: number;
}

class LlamaTokenizer implements Tokenizer {
  readonly type: VocabType;
  readonly pre: string | undefined;
  readonly vocabSize: number;
  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  readonly eotId: number | undefined;
  readonly eomId: number | undefined;
  readonly unkId: number | undefined;
  readonly padId: number | undefined;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly endOfGenerationIds: readonly number[];

  private readonly preTokenizer: PreTokenizer | undefined;
  private readonly pieces: (Uint8Array | undefined)[];
  private readonly spmByteTokens: Int32Array;
  private readonly wordCache = new Map<string, number[]>();

  constructor(private readonly vocab: Vocab) {
    this.type = vocab.type;
    this.pre = vocab.preName;
    this.vocabSize = vocab.tokens.length;
    this.bosId = vocab.bosId;
    this.eosId = vocab.eosId;
    this.eotId = vocab.eotId;
    this.eomId = vocab.eomId;
    this.unkId = vocab.unkId;
    this.padId = vocab.padId;
    this.addBos = vocab.addBos;
    this.addEos = vocab.addEos;
    this.endOfGenerationIds = [...vocab.eogIds].sort((a, b) => a - b);
    this.preTokenizer = vocab.preKind !== undefined ? new PreTokenizer(PRE_TOKENIZER_REGEXES[vocab.preKind]) : undefined;
    this.pieces = new Array<Uint8Array | undefined>(this.vocabSize);

    // llama_vocab::byte_to_token for SPM: "<0xXX>", else the byte itself as a token; -1 when neither.
    this.spmByteTokens = new Int32Array(256).fill(-1);
    if (vocab.type === 'spm') {
      for (let b = 0; b < 256; b++) {
        const hex = `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`;
        const id = vocab.tokenToId.get(hex) ?? (b < 0x80 ? vocab.tokenToId.get(String.fromCharCode(b)) : undefined);
        if (id !== undefined) this.spmByteTokens[b] = id;
      }
    }
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const v = this.vocab;
    const addBos = options.addBos ?? v.addBos;
    const addEos = options.addEos ?? v.addEos;
    const out: number[] = [];
    if (addBos) {
      if (v.bosId === undefined) throw new KiwiError('TOKENIZER_UNSUPPORTED', 'this model has no BOS token; encode with addBos: false');
      out.push(v.bosId);
    }
    const fragments = text === '' ? [] : this.partition(text, options.parseSpecial ?? false);
    if (v.type === 'spm') {
      let prevSpecial = true; // llama.cpp prefixes a space to the first text and to text after a special token
      for (const f of fragments) {
        if (typeof f === 'number') {
          out.push(f);
          prevSpecial = true;
          continue;
        }
        const raw = v.addSpacePrefix && prevSpecial ? ` ${f}` : f;
        this.spmTokenize(raw.replaceAll(' ', SPACE_ESCAPE), out);
        prevSpecial = false;
      }
    } else if (v.type === 'bpe') {
      for (const f of fragments) {
        if (typeof f === 'number') out.push(f);
        else this.bpeTokenize(f, out);
      }
    } else {
      for (const f of fragments) {
        if (typeof f === 'number') out.push(f);
        else this.wpmTokenize(f, out);
      }
      if (addBos) {
        if (v.sepId === undefined) throw new KiwiError('TOKENIZER_UNSUPPORTED', 'this WordPiece model has no SEP token; encode with addBos: false');
        out.push(v.sepId);
      }
    }
    if (addEos) {
      if (v.eosId === undefined) throw new KiwiError('TOKENIZER_UNSUPPORTED', 'this model has no EOS token; encode with addEos: false');
      out.push(v.eosId);
    }
    return out;
  }

  /**
   * llama.cpp's tokenizer_st_partition: cuts the text at every occurrence of a special token's text,
   * longest tokens first. Control and unknown tokens only count with parseSpecial; user-defined
   * tokens always do. LSTRIP/RSTRIP tokens swallow the whitespace beside them.
   */
  private partition(text: string, parseSpecial: boolean): Fragment[] {
    const v = this.vocab;
    let fragments: Fragment[] = [text];
    for (const id of v.specialTokens) {
      const attr = v.attrs[id]!;
      if (!parseSpecial && (attr & (TokenAttr.CONTROL | TokenAttr.UNKNOWN)) !== 0) continue;
      const tok = v.tokens[id]!;
      let next: Fragment[] | undefined;
      for (let fi = 0; fi < fragments.length; fi++) {
        const frag = fragments[fi]!;
        if (typeof frag === 'number' || !frag.includes(tok)) {
          next?.push(frag);
          continue;
        }
        next ??= fragments.slice(0, fi);
        let base = 0;
        for (;;) {
          const match = frag.indexOf(tok, base);
          if (match === -1) {
            if (base < frag.length) next.push(frag.slice(base));
            break;
          }
          let leftEnd = match;
          if ((attr & TokenAttr.LSTRIP) !== 0) while (leftEnd > base && isCSpace(frag.charCodeAt(leftEnd - 1))) leftEnd--;
          if (leftEnd > base) next.push(frag.slice(base, leftEnd));
          next.push(id);
          base = match + tok.length;
          if ((attr & TokenAttr.RSTRIP) !== 0) while (base < frag.length && isCSpace(frag.charCodeAt(base))) base++;
          if (base >= frag.length) break;
        }
      }
      if (next !== undefined) fragments = next;
    }
    return fragments;
  }

  /** llm_tokenizer_spm_session::tokenize: merge the best-scoring adjacent pair until none is a token. */
  private spmTokenize(text: string, out: number[]): void {
    const v = this.vocab;
    const syms: MergeSymbol[] = [];
    for (let i = 0; i < text.length; ) {
      const c = text.charCodeAt(i);
      const len = c >= 0xd800 && c <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00 ? 2 : 1;
      syms.push({ start: i, len, prev: syms.length - 1, next: -1 });
      i += len;
    }
    for (let i = 0; i + 1 < syms.length; i++) syms[i]!.next = i + 1;

    const queue = new Heap<SpmBigram>((a, b) => a.score > b.score || (a.score === b.score && a.left < b.left));
    const tryAdd = (left: number, right: number): void => {
      if (left === -1 || right === -1) return;
      const l = syms[left]!;
      const r = syms[right]!;
      const id = v.tokenToId.get(text.substring(l.start, r.start + r.len));
      if (id === undefined) return;
      queue.push({ left, right, score: v.scores[id]!, size: l.len + r.len });
    };
    for (let i = 1; i < syms.length; i++) tryAdd(i - 1, i);

    for (let big = queue.pop(); big !== undefined; big = queue.pop()) {
      const l = syms[big.left]!;
      const r = syms[big.right]!;
      if (l.len === 0 || r.len === 0 || l.len + r.len !== big.size) continue; // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms[r.next]!.prev = big.left;
      tryAdd(l.prev, big.left);
      tryAdd(big.left, l.next);
    }

    for (let i = syms.length > 0 ? 0 : -1; i !== -1; i = syms[i]!.next) {
      const s = syms[i]!;
      const piece = text.substring(s.start, s.start + s.len);
      const id = v.tokenToId.get(piece);
      if (id !== undefined) {
        out.push(id);
        continue;
      }
      // Byte fallback. llama.cpp aborts when a byte has no token; Kiwi emits <unk> instead.
      for (const b of utf8Encode(piece)) {
        const bt = this.spmByteTokens[b]!;
        if (bt >= 0) out.push(bt);
        else if (v.unkId !== undefined) out.push(v.unkId);
      }
    }
  }

  /** llm_tokenizer_bpe_session::tokenize over the pre-tokenizer's words. */
  private bpeTokenize(text: string, out: number[]): void {
    for (const word of this.preTokenizer!.split(text)) {
      const encoded = byteEncode(utf8Encode(word));
      let ids = this.wordCache.get(encoded);
      if (ids === undefined) {
        ids = this.bpeWord(encoded);
        if (this.wordCache.size >= WORD_CACHE_LIMIT) this.wordCache.clear();
        this.wordCache.set(encoded, ids);
      }
      for (const id of ids) out.push(id);
    }
  }

  private bpeWord(word: string): number[] {
    const v = this.vocab;
    if (v.ignoreMerges) {
      const whole = v.tokenToId.get(word);
      if (whole !== undefined) return [whole];
    }
    // Every char of a byte-encoded word is one BMP code unit, so symbols are single code units.
    const syms: MergeSymbol[] = [];
    for (let i = 0; i < word.length; i++) syms.push({ start: i, len: 1, prev: i - 1, next: i + 1 < word.length ? i + 1 : -1 });

    const queue = new Heap<BpeBigram>((a, b) => a.rank < b.rank || (a.rank === b.rank && a.left < b.left));
    const tryAdd = (left: number, right: number): void => {
      if (left === -1 || right === -1) return;
      const l = syms[left]!;
      const r = syms[right]!;
      const key = `${word.substring(l.start, l.start + l.len)} ${word.substring(r.start, r.start + r.len)}`;
      const rank = v.bpeRanks.get(key);
      if (rank === undefined) return;
      queue.push({ left, right, rank, size: l.len + r.len });
    };
    for (let i = 1; i < syms.length; i++) tryAdd(i - 1, i);

    for (let big = queue.pop(); big !== undefined; big = queue.pop()) {
      const l = syms[big.left]!;
      const r = syms[big.right]!;
      // Symbols only grow, so equal sizes mean the pair is unchanged (llama.cpp compares the text).
      if (l.len === 0 || r.len === 0 || l.next !== big.right || l.len + r.len !== big.size) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms[r.next]!.prev = big.left;
      tryAdd(l.prev, big.left);
      tryAdd(big.left, l.next);
    }

    const ids: number[] = [];
    for (const s of syms) {
      if (s.len === 0) continue;
      const piece = word.substring(s.start, s.start + s.len);
      const id = v.tokenToId.get(piece);
      if (id !== undefined) {
        ids.push(id);
        continue;
      }
      // llama.cpp then looks up each UTF-8 byte of the piece as a one-byte token: only ASCII can match.
      for (let i = 0; i < piece.length; i++) {
        const c = piece.charCodeAt(i);
        if (c < 0x80) {
          const bid = v.tokenToId.get(piece[i]!);
          if (bid !== undefined) ids.push(bid);
        }
      }
    }
    return ids;
  }

  /** llm_tokenizer_wpm_session::tokenize: greedy longest-match WordPiece over normalized words. */
  private wpmTokenize(text: string, out: number[]): void {
    const v = this.vocab;
    for (const word of wpmPreprocess(text, v.lowercase, v.stripAccents)) {
      const w = SPACE_ESCAPE + word; // the phantom space that marks a word start
      // Code unit and UTF-8 byte offsets of each code point boundary.
      const units: number[] = [0];
      const bytes: number[] = [0];
      for (const ch of w) {
        units.push(units.at(-1)! + ch.length);
        bytes.push(bytes.at(-1)! + utf8Length(ch));
      }
      const n = units.length - 1;
      const start = out.length;
      for (let i = 0; i < n; ) {
        let matched = -1;
        let j = n;
        while (j > i && bytes[j]! - bytes[i]! > v.maxTokenBytes) j--;
        for (; j > i; j--) {
          const id = v.tokenToId.get(w.slice(units[i], units[j]));
          if (id !== undefined) {
            out.push(id);
            matched = j;
            break;
          }
        }
        if (matched < 0) {
          out.length = start; // one unmatched position discards the whole word
          break;
        }
        i = matched;
      }
      if (out.length === start && v.unkId !== undefined) out.push(v.unkId);
    }
  }

  tokenPiece(id: number, options: DecodeOptions = {}): Uint8Array {
    const attr = this.checkedAttr(id);
    if (!options.special && (attr & (TokenAttr.UNKNOWN | TokenAttr.CONTROL)) !== 0) return EMPTY;
    let piece = this.pieces[id];
    if (piece === undefined) {
      piece = this.computePiece(id, attr);
      this.pieces[id] = piece;
    }
    return piece;
  }

  /** llama_vocab::impl::token_to_piece with special = true (callers drop control tokens first). */
  private computePiece(id: number, attr: number): Uint8Array {
    const text = this.vocab.tokens[id]!;
    if ((attr & (TokenAttr.UNKNOWN | TokenAttr.CONTROL | TokenAttr.USER_DEFINED)) !== 0) return utf8Encode(text);
    if ((attr & TokenAttr.NORMAL) !== 0) {
      if (this.vocab.type !== 'bpe') return utf8Encode(text.replaceAll(SPACE_ESCAPE, ' '));
      return gpt2DecodeText(text);
    }
    if ((attr & TokenAttr.BYTE) !== 0) return Uint8Array.of(parseHexByte(text));
    return EMPTY; // undefined or unused tokens render as nothing
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    const parts: Uint8Array[] = [];
    let total = 0;
    let removeSpace = this.vocab.addSpacePrefix; // llama_detokenize drops one leading space of the first piece
    for (const id of ids) {
      let piece = this.tokenPiece(id, options);
      if (removeSpace && piece.length > 0 && piece[0] === 0x20) piece = piece.subarray(1);
      removeSpace = false;
      parts.push(piece);
      total += piece.length;
    }
    let bytes: Uint8Array = new Uint8Array(total);
    let at = 0;
    for (const p of parts) {
      bytes.set(p, at);
      at += p.length;
    }
    if (this.vocab.cleanSpaces) bytes = cleanSpaces(bytes);
    return utf8Decode(bytes);
  }

  createStreamDecoder(options: DecodeOptions = {}): StreamDecoder {
    let pending = new Uint8Array(64);
    let used = 0;
    return {
      push: (id: number): string => {
        const piece = this.tokenPiece(id, options);
        if (used + piece.length > pending.length) {
          const grown = new Uint8Array(Math.max(pending.length * 2, used + piece.length));
          grown.set(pending.subarray(0, used));
          pending = grown;
        }
        pending.set(piece, used);
        used += piece.length;
        const complete = completeUtf8Length(pending, used);
        if (complete === 0) return '';
        const text = utf8Decode(pending.subarray(0, complete));
        pending.copyWithin(0, complete, used);
        used -= complete;
        return text;
      },
      flush: (): string => {
        const text = utf8Decode(pending.subarray(0, used));
        used = 0;
        return text;
      },
    };
  }

  isEndOfGeneration(id: number): boolean {
    return this.vocab.eogIds.has(id);
  }

  isControl(id: number): boolean {
    return (this.checkedAttr(id) & TokenAttr.CONTROL) !== 0;
  }

  tokenText(id: number): string {
    this.checkedAttr(id);
    return this.vocab.tokens[id]!;
  }

  tokenId(text: string): number | undefined {
    return this.vocab.tokenToId.get(text);
  }

  private checkedAttr(id: number): number {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new KiwiError('TOKEN_INVALID', `token id ${String(id)} is outside the vocabulary (0..${String(this.vocabSize - 1)})`, { id });
    }
    return this.vocab.attrs[id]!;
  }
}

/** llm_tokenizer_wpm_session::preprocess: BertNormalizer-style clean-up and split into words. */
function wpmPreprocess(text: string, lowercase: boolean, stripAccents: boolean): string[] {
  const words: string[] = [''];
  for (let cp of toCodePoints(text)) {
    if (stripAccents) cp = nfdBaseCodePoint(cp);
    const flags = codePointFlags(cp);
    if ((flags & FLAG_WHITESPACE) !== 0) {
      if (words.at(-1) !== '') words.push('');
      continue;
    }
    if (cp === 0 || cp === 0xfffd || (flags & FLAG_CONTROL) !== 0) continue;
    if (stripAccents && (flags & FLAG_ACCENT_MARK) !== 0) continue;
    const s = String.fromCodePoint(lowercase ? toLowerCodePoint(cp) : cp);
    if ((flags & FLAG_PUNCTUATION) !== 0 || (cp < 0x7f && (flags & FLAG_SYMBOL) !== 0) || isChineseChar(cp)) {
      if (words.at(-1) !== '') words.push('');
      words[words.length - 1] = s; // a word of its own
      words.push('');
    } else {
      words[words.length - 1] += s;
    }
  }
  if (words.at(-1) === '') words.pop();
  return words;
}

// llama.cpp's is_chinese_char (the CJK ranges of BERT's tokenizer, including its 0x2B920 quirk).
function isChineseChar(cp: number): boolean {
  return (
    (cp >= 0x4e00 && cp <= 0x9fff) ||
    (cp >= 0x3400 && cp <= 0x4dbf) ||
    (cp >= 0x20000 && cp <= 0x2a6df) ||
    (cp >= 0x2a700 && cp <= 0x2b73f) ||
    (cp >= 0x2b740 && cp <= 0x2b81f) ||
    (cp >= 0x2b920 && cp <= 0x2ceaf) ||
    (cp >= 0xf900 && cp <= 0xfaff) ||
    (cp >= 0x2f800 && cp <= 0x2fa1f)
  );
}

function parseHexByte(text: string): number {
  const b = parseInt(text.slice(3, 5), 16); // "<0xAB>"
  return Number.isNaN(b) ? 0 : b & 0xff;
}

/** llama_decode_text: GPT-2 byte-level chars back to bytes; unmapped chars are spelled out as llama.cpp does. */
function gpt2DecodeText(text: string): Uint8Array {
  const out: number[] = [];
  for (const ch of text) {
    const b = charToByte(ch.codePointAt(0)!);
    if (b !== undefined) {
      out.push(b);
      continue;
    }
    const hex = Array.from(utf8Encode(ch), (x) => x.toString(16).padStart(2, '0')).join('');
    out.push(...utf8Encode(`[UNK_BYTE_0x${hex}${text}]`));
  }
  return Uint8Array.from(out);
}

/**
 * The three clean-up passes of llama_vocab::impl::detokenize (clean_up_tokenization_spaces),
 * run in place over the bytes exactly as written there, quirks included.
 */
export function cleanSpaces(input: Uint8Array): Uint8Array {
  const text = input.slice();
  const SP = 0x20;
  const APOS = 0x27;
  // Pass 1: " ?", " !", " .", " ," lose the space.
  let total1 = text.length;
  let total = total1 ? 1 : 0;
  for (let i = 1; i < total1; i++) {
    const x = text[i]!;
    if (text[i - 1] === SP && (x === 0x3f || x === 0x21 || x === 0x2e || x === 0x2c)) total--;
    text[total++] = x;
  }
  // Pass 2: a lone apostrophe between spaces loses both spaces.
  const total2 = total;
  total = total ? 1 : 0;
  for (let i = 1; i < total2; i++) {
    const x = text[i]!;
    if (x === APOS && i + 1 < total2 && text[i - 1] === SP && text[i + 1] === SP) {
      total--;
      text[++i] = 0;
    }
    text[total++] = x;
  }
  // Pass 3: " 's", " 'm", " 're", " 've" lose the space.
  const total3 = total;
  total = total ? 1 : 0;
  for (let i = 1; i < total3; i++) {
    const x = text[i]!;
    if (text[i - 1] === SP && x === APOS && i + 1 < total3) {
      const x1 = text[i + 1]!;
      if (x1 === 0x73 || x1 === 0x6d) total--; // 's 'm
      else if (i + 2 < total3) {
        const x2 = text[i + 2]!;
        if ((x1 === 0x72 && x2 === 0x65) || (x1 === 0x76 && x2 === 0x65)) total--; // 're 've
      }
    }
    text[total++] = x;
  }
  total1 = total;
  return text.subarray(0, total1);
}
