// A prompt's size checked before tokenizing: no token covers more input bytes than the longest raw
// vocabulary text (byte-level BPE and SentencePiece spell each input byte with at least one byte,
// special tokens are their literal text), so a prompt of more than context x that many bytes cannot
// fit and is refused without spending the event loop on tokenizing it.
import { KiwiError } from '../errors.js';
import type { Tokenizer } from '../model/tokenizer/tokenizer.js';
import type { PromptInput } from './completion-backend.js';

const maxBytesByTokenizer = new WeakMap<Tokenizer, number>();

/** The most input bytes one token of `tok` can stand for (computed once per tokenizer). */
export function maxBytesPerToken(tok: Tokenizer): number {
  let max = maxBytesByTokenizer.get(tok);
  if (max === undefined) {
    max = 1;
    for (let id = 0; id < tok.vocabSize; id++) max = Math.max(max, Buffer.byteLength(tok.tokenText(id), 'utf8'));
    maxBytesByTokenizer.set(tok, max);
  }
  return max;
}

/** UTF-8 bytes of a prompt's text (for chat: the messages' contents, which the template only adds to). */
export function promptTextBytes(prompt: PromptInput): number {
  switch (prompt.kind) {
    case 'text':
      return Buffer.byteLength(prompt.text, 'utf8');
    case 'chat':
      return prompt.messages.reduce((n, m) => n + Buffer.byteLength(m.content, 'utf8'), 0);
    case 'ids':
      return 0;
  }
}

/** Throws CONTEXT_EXCEEDED when `prompt` certainly needs more than `contextTokens` tokens. */
export function checkPromptSize(tok: Tokenizer, prompt: PromptInput, contextTokens: number): void {
  const bytes = promptTextBytes(prompt);
  const perToken = maxBytesPerToken(tok);
  if (bytes <= contextTokens * perToken) return;
  throw new KiwiError(
    'CONTEXT_EXCEEDED',
    `this model's context holds ${contextTokens} tokens, but the prompt has ${bytes} bytes, more than ${contextTokens} tokens can hold (at most ${perToken} bytes each); shorten the prompt`,
    { param: prompt.kind === 'chat' ? 'messages' : 'prompt' },
  );
}
