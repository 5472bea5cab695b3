import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../../errors.js';
import { ggufMetadataFromHfTokenizer } from './hf-tokenizer-json.js';

const json = {
  model: { type: 'BPE', vocab: { a: 0, b: 1, ab: 2 }, merges: [['a', 'b'] as [string, string]] },
  added_tokens: [
    { id: 3, content: '<|im_start|>', special: true },
    { id: 4, content: '<think>', special: false },
    { id: 5, content: '<|tool|>', special: false },
  ],
};

describe('ggufMetadataFromHfTokenizer', () => {
  it('writes the token list, types and merges as convert_hf_to_gguf.py does', () => {
    const meta = ggufMetadataFromHfTokenizer(json, { bos_token: null, eos_token: { content: '<|im_start|>' }, add_bos_token: false }, { pre: 'qwen2', vocabSize: 8 });
    expect(meta.get('tokenizer.ggml.model')).toBe('gpt2');
    expect(meta.get('tokenizer.ggml.pre')).toBe('qwen2');
    expect(meta.get('tokenizer.ggml.tokens')).toEqual(['a', 'b', 'ab', '<|im_start|>', '<think>', '<|tool|>', '[PAD6]', '[PAD7]']);
    // normal, control, user-defined; <|...|> looks special even when not marked so; padding is user-defined
    expect(Array.from(meta.get('tokenizer.ggml.token_type') as Int32Array)).toEqual([1, 1, 1, 3, 4, 3, 4, 4]);
    expect(meta.get('tokenizer.ggml.merges')).toEqual(['a b']);
    expect(meta.get('tokenizer.ggml.eos_token_id')).toBe(3);
    expect(meta.has('tokenizer.ggml.bos_token_id')).toBe(false);
    expect(meta.get('tokenizer.ggml.add_bos_token')).toBe(false);
  });

  it('refuses a tokenizer.json that is not BPE', () => {
    let caught: unknown;
    try {
      ggufMetadataFromHfTokenizer({ ...json, model: { ...json.model, type: 'WordPiece' } }, {}, { pre: 'default' });
    } catch (err) {
      caught = err;
    }
    expect(isKiwiError(caught, 'TOKENIZER_UNSUPPORTED')).toBe(true);
  });
});
