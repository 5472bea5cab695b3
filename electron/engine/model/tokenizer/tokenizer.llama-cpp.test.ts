// Kiwi's tokenizer against llama.cpp itself (node-llama-cpp 3.21.1, CPU build): stories260K.gguf
// and every SPM/BPE/WordPiece vocabulary of the test set, on fixed and random strings, both ways.
import fc from 'fast-check';
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';
import type { Llama, LlamaModel, Token } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testModelPath } from '../test-models.js';
import { tokenizerFromGguf } from './test-vectors.js';
import type { Tokenizer } from './tokenizer.js';

const VOCABS = [
  'vocab/ggml-vocab-bert-bge.gguf',
  'vocab/ggml-vocab-llama-spm.gguf',
  'vocab/ggml-vocab-phi-3.gguf',
  'vocab/ggml-vocab-gpt-2.gguf',
  'vocab/ggml-vocab-falcon.gguf',
  'vocab/ggml-vocab-mpt.gguf',
  'vocab/ggml-vocab-starcoder.gguf',
  'vocab/ggml-vocab-refact.gguf',
  'vocab/ggml-vocab-deepseek-llm.gguf',
  'vocab/ggml-vocab-deepseek-coder.gguf',
];

const FIXED_STRINGS = [
  '',
  ' ',
  'Once upon a time, there was a little girl named Lily.',
  'Hello world',
  ' Hello world',
  '   leading and trailing   ',
  'tabs\tand\nnew\r\nlines\n\n\n',
  '\n',
  'emoji 🦙👍🏽🇫🇷 end',
  'naïve café — “quotes” ½ ² Ⅻ',
  '中文字符 日本語のテキスト 한국어',
  'العربية עברית हिन्दी',
  "it's we're they've I'll I'd I'm DON'T",
  '12345678901 3.14159 1,000,000',
  '<s>not special</s> <unk> <|endoftext|>',
  'x'.repeat(300),
  '\u00a0\u3000\u2028\u0085\ufeff\u200b',
  'combining e\u0301 a\u0308',
];

const TRICKY = [
  ' ', '  ', '\n', '\r\n', '\t', '\r', "'s", "'T", "'", 'a', 'Z', 'é', 'ß', 'ǅ', '0', '12345', '٣', 'Ⅻ', '²', '½',
  '中', '文', 'ー', '한', '🦙', '👍🏽', '\u0301', '\u00a0', '\u3000', '\u0085', '\u2028', '\ufeff', '\u200b', '.', ',',
  '!', '?', '$', '+', '<', '>', '^', '~', '|', '`', '-', '_', '\u{e0001}', '\u{10fffd}', '\ufffd', '<s>', '</s>',
  '<unk>', '<|endoftext|>', '<|user|>', '<|end|>', '▁', '\u0000', '\u001f', 'Ⓐ', 'µ', 'Ω', 'K', '…', '。', '、',
];

const arbitraryText = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: fc.constantFrom(...TRICKY), maxLength: 30 }),
);

describe("tokenization equals llama.cpp's (node-llama-cpp)", () => {
  let llama: Llama;
  const models: LlamaModel[] = [];

  beforeAll(async () => {
    llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.disabled });
  });
  afterAll(async () => {
    for (const m of models) await m.dispose();
    await llama?.dispose();
  });

  async function load(name: string, vocabOnly: boolean): Promise<{ model: LlamaModel; tok: Tokenizer }> {
    const model = await llama.loadModel({ modelPath: await testModelPath(name), vocabOnly });
    models.push(model);
    return { model, tok: await tokenizerFromGguf(name) };
  }

  function expectSame(model: LlamaModel, tok: Tokenizer, text: string): void {
    for (const parseSpecial of [false, true]) {
      const ref = model.tokenize(text, parseSpecial) as number[];
      const refTokens = ref as Token[]; // node-llama-cpp brands its ids
      const ids = tok.encode(text, { addBos: false, addEos: false, parseSpecial });
      expect({ text, parseSpecial, ids }).toEqual({ text, parseSpecial, ids: ref });
      for (const special of [false, true]) {
        expect({ text, special, decoded: tok.decode(ids, { special }) }).toEqual({ text, special, decoded: model.detokenize(refTokens, special) });
      }
    }
  }

  it('tokenizes and detokenizes stories260K.gguf exactly as llama.cpp, BOS handling included', async () => {
    const { model, tok } = await load('stories260K.gguf', false);
    expect(tok.vocabSize).toBe(512);
    expect(tok.bosId).toBe(model.tokens.bos);
    expect(tok.eosId).toBe(model.tokens.eos);
    expect(tok.addBos).toBe(model.tokens.shouldPrependBosToken);
    expect(tok.addEos).toBe(model.tokens.shouldAppendEosToken);
    for (const text of FIXED_STRINGS) {
      expectSame(model, tok, text);
      // BOS by default, as llama_tokenize(add_special=true) adds it for this model.
      const withBos = tok.encode(text);
      expect(withBos).toEqual([model.tokens.bos, ...(model.tokenize(text, false) as number[])]);
      expect(tok.encode(text, { addBos: false })).toEqual(withBos.slice(1));
      // Byte fallback keeps every character, and decoding drops the space SPM put in front.
      expect(tok.decode(tok.encode(text, { addBos: false }))).toBe(text);
    }
    fc.assert(
      fc.property(arbitraryText, (text) => expectSame(model, tok, text)),
      { numRuns: 300, seed: 260 },
    );
  });

  for (const name of VOCABS) {
    it(`tokenizes, detokenizes and marks end-of-generation tokens as llama.cpp for ${name}`, async () => {
      const { model, tok } = await load(name, true);
      expect(tok.bosId ?? null).toBe(model.tokens.bos);
      expect(tok.eosId ?? null).toBe(model.tokens.eos);
      expect(tok.eotId ?? null).toBe(model.tokens.eot);
      expect(tok.addBos).toBe(model.tokens.shouldPrependBosToken);
      for (let id = 0; id < tok.vocabSize; id++) {
        const ref = model.isEogToken(id as Token);
        if (tok.isEndOfGeneration(id) !== ref) expect({ id, eog: tok.isEndOfGeneration(id) }).toEqual({ id, eog: ref });
      }
      for (const text of FIXED_STRINGS) expectSame(model, tok, text);
      fc.assert(
        fc.property(arbitraryText, (text) => expectSame(model, tok, text)),
        { numRuns: 150, seed: 42 },
      );
    });
  }
});
