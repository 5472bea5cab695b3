// Builds the GGUF tokenizer metadata (tokenizer.ggml.*) that llama.cpp's convert_hf_to_gguf.py would
// write for a Hugging Face byte-level BPE tokenizer.json (+ tokenizer_config.json). Lets Kiwi and its
// tests use a vocabulary shipped as tokenizer.json, e.g. to check Llama 3 / Qwen2 tokenization.
// Pure: takes parsed JSON, returns a metadata map.
import { KiwiError } from '../../errors.js';
import type { GgufValue } from '../gguf/gguf-types.js';

interface AddedToken {
  id: number;
  content: string;
  special?: boolean;
}

export interface HfTokenizerJson {
  model: { type: string; vocab: Record<string, number>; merges: (string | [string, string])[] };
  added_tokens?: AddedToken[];
}

export interface HfTokenizerConfig {
  bos_token?: string | { content: string } | null;
  eos_token?: string | { content: string } | null;
  add_bos_token?: boolean;
  add_eos_token?: boolean;
  chat_template?: string | { name: string; template: string }[];
}

export interface HfConversionOptions {
  /** tokenizer.ggml.pre to record (convert_hf_to_gguf.py picks it by hashing the tokenizer). */
  pre: string;
  /** Pad the vocabulary to this many tokens with [PAD<i>] entries (the model's vocab_size). */
  vocabSize?: number;
}

// llama.cpp TokenType values.
const NORMAL = 1;
const CONTROL = 3;
const USER_DEFINED = 4;

/** convert_hf_to_gguf.py's does_token_look_special. */
function looksSpecial(t: string): boolean {
  return (
    ['<pad>', '<mask>', '<2mass>', '[@BOS@]'].includes(t) ||
    (t.startsWith('<|') && t.endsWith('|>')) ||
    (t.startsWith('<\uff5c') && t.endsWith('\uff5c>')) ||
    (t.startsWith('<start_of_') && t.endsWith('>')) ||
    (t.startsWith('<end_of_') && t.endsWith('>'))
  );
}

function tokenContent(t: HfTokenizerConfig['bos_token']): string | undefined {
  if (t === undefined || t === null) return undefined;
  return typeof t === 'string' ? t : t.content;
}

export function ggufMetadataFromHfTokenizer(
  tokenizer: HfTokenizerJson,
  config: HfTokenizerConfig,
  options: HfConversionOptions,
): Map<string, GgufValue> {
  if (tokenizer.model.type !== 'BPE') {
    throw new KiwiError('TOKENIZER_UNSUPPORTED', `tokenizer.json model type '${tokenizer.model.type}' is not byte-level BPE`);
  }
  const added = new Map<number, AddedToken>();
  for (const a of tokenizer.added_tokens ?? []) added.set(a.id, a);
  const byId = new Map<number, string>();
  for (const [text, id] of Object.entries(tokenizer.model.vocab)) byId.set(id, text);
  for (const [id, a] of added) byId.set(id, a.content);
  let size = options.vocabSize ?? 0;
  for (const id of byId.keys()) size = Math.max(size, id + 1);

  const tokens: string[] = new Array<string>(size);
  const types = new Int32Array(size);
  for (let i = 0; i < size; i++) {
    const text = byId.get(i);
    const a = added.get(i);
    if (text === undefined) {
      tokens[i] = `[PAD${String(i)}]`;
      types[i] = USER_DEFINED;
    } else if (a !== undefined) {
      const control = a.special === true || looksSpecial(text);
      // The converter pre-normalizes user-defined tokens: SentencePiece's ▁ becomes a space.
      tokens[i] = control ? text : text.replaceAll('\u2581', ' ');
      types[i] = control ? CONTROL : USER_DEFINED;
    } else {
      tokens[i] = text;
      types[i] = NORMAL;
    }
  }
  const merges = tokenizer.model.merges.map((m) => (typeof m === 'string' ? m : `${m[0]} ${m[1]}`));

  const meta = new Map<string, GgufValue>([
    ['tokenizer.ggml.model', 'gpt2'],
    ['tokenizer.ggml.pre', options.pre],
    ['tokenizer.ggml.tokens', tokens],
    ['tokenizer.ggml.token_type', types],
    ['tokenizer.ggml.merges', merges],
  ]);
  const idOf = (text: string | undefined): number | undefined => {
    if (text === undefined) return undefined;
    for (const [id, a] of added) if (a.content === text) return id;
    return tokenizer.model.vocab[text];
  };
  const bos = idOf(tokenContent(config.bos_token));
  const eos = idOf(tokenContent(config.eos_token));
  if (bos !== undefined) meta.set('tokenizer.ggml.bos_token_id', bos);
  if (eos !== undefined) meta.set('tokenizer.ggml.eos_token_id', eos);
  if (config.add_bos_token !== undefined) meta.set('tokenizer.ggml.add_bos_token', config.add_bos_token);
  if (config.add_eos_token !== undefined) meta.set('tokenizer.ggml.add_eos_token', config.add_eos_token);
  const template = config.chat_template;
  if (typeof template === 'string') meta.set('tokenizer.chat_template', template);
  else if (Array.isArray(template)) {
    const def = template.find((t) => t.name === 'default');
    if (def !== undefined) meta.set('tokenizer.chat_template', def.template);
  }
  return meta;
}
