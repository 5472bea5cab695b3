// A synthetic SentencePiece-style vocabulary (tokenizer.ggml.model = "llama") of any size >= 291:
// <unk>, <s>, </s>, the 256 byte-fallback tokens <0x00>..<0xFF>, then generated pieces with falling
// scores, so llama.cpp's SPM tokenizer can encode any text (unknown characters fall back to bytes).

/** llama.cpp token types (llama_token_type). */
export const TOKEN_TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, BYTE: 6 } as const;

export interface SynthVocab {
  tokens: string[];
  scores: Float32Array<ArrayBuffer>;
  types: Int32Array<ArrayBuffer>;
}

const SPACE = '\u2581'; // ▁, SentencePiece's word-boundary marker
const LETTERS = 'etaoinshrdlcumwfgypbvkjxqz';
const SINGLES = [...LETTERS, ...LETTERS.toUpperCase(), ...'0123456789', ...'.,!?\'"-:;()[]{}<>/\\@#$%^&*_+=|~`'];

/** Pieces in a fixed order: characters, ▁-prefixed characters, then letter strings of growing length. */
function* pieces(): Generator<string> {
  for (const c of SINGLES) yield c;
  yield SPACE;
  for (const c of SINGLES) yield SPACE + c;
  for (let len = 2; ; len++) {
    const idx = new Array<number>(len).fill(0);
    for (;;) {
      let s = '';
      for (const i of idx) s += LETTERS[i]!;
      yield SPACE + s;
      yield s;
      let k = len - 1;
      while (k >= 0 && idx[k] === LETTERS.length - 1) idx[k--] = 0;
      if (k < 0) break;
      idx[k]!++;
    }
  }
}

export function synthVocab(size: number): SynthVocab {
  if (!Number.isInteger(size) || size < 259 + 32) throw new RangeError(`vocabulary size ${String(size)} is too small (minimum 291)`);
  const tokens: string[] = ['<unk>', '<s>', '</s>'];
  const types: number[] = [TOKEN_TYPE.UNKNOWN, TOKEN_TYPE.CONTROL, TOKEN_TYPE.CONTROL];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(TOKEN_TYPE.BYTE);
  }
  const gen = pieces();
  while (tokens.length < size) {
    tokens.push(gen.next().value as string);
    types.push(TOKEN_TYPE.NORMAL);
  }
  const scores = new Float32Array(size);
  // Earlier (shorter) pieces score higher; specials and bytes score 0 as in llama.cpp's vocab files.
  for (let i = 259; i < size; i++) scores[i] = -(i - 259);
  return { tokens, scores, types: Int32Array.from(types) };
}
