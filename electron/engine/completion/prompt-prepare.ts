// preparePrompt (backend-stream.ts) with its long texts tokenized on a worker thread: a first pass
// renders the prompt with a tokenizer that only notes what it would encode, the worker encodes
// those texts, and a second pass renders again with their ids at hand. The result is exactly
// preparePrompt's; only the waiting moves off the event loop.
import type { ChatTemplate } from '../model/chat-template.js';
import type { OffThreadEncoder } from '../model/tokenizer/off-thread-encoder.js';
import { OFF_THREAD_MIN_CHARS } from '../model/tokenizer/off-thread-encoder.js';
import type { EncodeOptions, Tokenizer } from '../model/tokenizer/tokenizer.js';
import { preparePrompt } from './backend-stream.js';
import type { PreparedPrompt, PromptInput } from './completion-backend.js';

/** `tok` with encode() replaced (every other member is the tokenizer's own). */
function withEncode(tok: Tokenizer, encode: (text: string, options?: EncodeOptions) => number[]): Tokenizer {
  return new Proxy(tok, {
    get(target, prop) {
      if (prop === 'encode') return encode;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

const keyOf = (text: string, options: EncodeOptions | undefined): string => `${JSON.stringify(options ?? {})}\u0000${text}`;

export async function prepareOffThread(tok: Tokenizer, template: ChatTemplate, prompt: PromptInput, encoder: OffThreadEncoder): Promise<PreparedPrompt> {
  const wanted = new Map<string, { text: string; options: EncodeOptions | undefined }>();
  preparePrompt(withEncode(tok, (text, options) => {
    if (text.length < OFF_THREAD_MIN_CHARS) return tok.encode(text, options);
    wanted.set(keyOf(text, options), { text, options });
    return [0]; // a stand-in: this pass's result is thrown away
  }), template, prompt);
  if (wanted.size === 0) return preparePrompt(tok, template, prompt);
  const encoded = new Map<string, number[]>();
  for (const [key, { text, options }] of wanted) encoded.set(key, await encoder.encode(text, options));
  return preparePrompt(withEncode(tok, (text, options) => {
    const ids = encoded.get(keyOf(text, options));
    return ids !== undefined ? [...ids] : tok.encode(text, options);
  }), template, prompt);
}
