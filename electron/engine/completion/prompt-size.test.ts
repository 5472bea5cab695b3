import { describe, expect, it } from 'vitest';
import { isKiwiError } from '../errors.js';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { createTokenizer, type Tokenizer } from '../model/tokenizer/tokenizer.js';
import { checkPromptSize, maxBytesPerToken, promptTextBytes } from './prompt-size.js';

async function tokenizer(path: string): Promise<Tokenizer> {
  return createTokenizer((await openGguf(await testModelPath(path))).metadata);
}

const SAMPLES = [
  'Once upon a time there was a little girl named Lily.',
  '    indented\n\n\ttabs and\r\nnewlines      and long     runs of spaces                                ',
  'ünïcödé – “quotes” and emoji 🥝🥝🥝 and CJK 猕猴桃',
  '<s></s><unk> special-looking text <|endoftext|>',
  'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
];

describe('the prompt size bound', () => {
  it.each(['stories260K.gguf', 'vocab/ggml-vocab-llama-spm.gguf', 'vocab/ggml-vocab-gpt-2.gguf'])('holds for %s: no token stands for more bytes than the bound', async (path) => {
    const tok = await tokenizer(path);
    const perToken = maxBytesPerToken(tok);
    expect(perToken).toBeGreaterThan(1);
    for (const text of SAMPLES) {
      const ids = tok.encode(text, { parseSpecial: true, addBos: false });
      expect(Buffer.byteLength(text, 'utf8')).toBeLessThanOrEqual(ids.length * perToken);
    }
  });

  it('refuses a prompt longer than the context can hold before tokenizing, and lets one that may fit through', async () => {
    const tok = await tokenizer('stories260K.gguf');
    const limit = 512 * maxBytesPerToken(tok);
    expect(() => checkPromptSize(tok, { kind: 'text', text: 'a'.repeat(limit) }, 512)).not.toThrow();
    let caught: unknown;
    try {
      checkPromptSize(tok, { kind: 'chat', messages: [{ role: 'user', content: 'a'.repeat(limit - 1) }, { role: 'user', content: 'bb' }] }, 512);
    } catch (err) {
      caught = err;
    }
    expect(isKiwiError(caught, 'CONTEXT_EXCEEDED')).toBe(true);
    expect((caught as Error).message).toMatch(/holds 512 tokens, but the prompt has \d+ bytes/);
    expect((caught as { details: { param: string } }).details.param).toBe('messages');
  });

  it('counts UTF-8 bytes of the text or of every message, and nothing for token ids', () => {
    expect(promptTextBytes({ kind: 'text', text: '🥝' })).toBe(4);
    expect(promptTextBytes({ kind: 'chat', messages: [{ role: 'system', content: 'ab' }, { role: 'user', content: 'ü' }] })).toBe(4);
    expect(promptTextBytes({ kind: 'ids', ids: [1, 2, 3] })).toBe(0);
  });
});
