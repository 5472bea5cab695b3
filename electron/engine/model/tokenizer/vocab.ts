// The vocabulary of a GGUF model as llama.cpp loads it (llama_vocab::impl::load in src/llama-vocab.cpp):
// token texts, scores and attributes, BPE merge ranks, special token ids, the end-of-generation set,
// the BOS/EOS/space-prefix flags and the pre-tokenizer. Invariant: every default and every
// text-based heuristic here is llama.cpp's, so the tokenizers built on it produce llama.cpp's ids.
import { KiwiError } from '../../errors.js';
import {
  metaBoolean,
  metaFloat32Array,
  metaInt32Array,
  metaInteger,
  metaString,
  metaStringArray,
} from '../gguf/gguf-metadata.js';
import type { GgufMetadata } from '../gguf/gguf-metadata.js';
import { PRE_TOKENIZER_REGEXES } from './pre-tokenizer.js';
import type { PreTokenizerKind } from './pre-tokenizer.js';

/** llama_token_attr bit flags (include/llama.h). */
export const TokenAttr = {
  UNDEFINED: 0,
  UNKNOWN: 1 << 0,
  UNUSED: 1 << 1,
  NORMAL: 1 << 2,
  CONTROL: 1 << 3,
  USER_DEFINED: 1 << 4,
  BYTE: 1 << 5,
  NORMALIZED: 1 << 6,
  LSTRIP: 1 << 7,
  RSTRIP: 1 << 8,
  SINGLE_WORD: 1 << 9,
} as const;

// llama_token_type (GGUF tokenizer.ggml.token_type) -> attribute; anything else is UNDEFINED.
const TYPE_TO_ATTR: readonly number[] = [
  TokenAttr.UNDEFINED, // 0 UNDEFINED
  TokenAttr.NORMAL, // 1 NORMAL
  TokenAttr.UNKNOWN, // 2 UNKNOWN
  TokenAttr.CONTROL, // 3 CONTROL
  TokenAttr.USER_DEFINED, // 4 USER_DEFINED
  TokenAttr.UNUSED, // 5 UNUSED
  TokenAttr.BYTE, // 6 BYTE
];

export type VocabType = 'spm' | 'bpe' | 'wpm';

export interface Vocab {
  type: VocabType;
  /** tokenizer.ggml.pre as written in the file (undefined when absent). */
  preName: string | undefined;
  preKind: PreTokenizerKind | undefined;
  tokens: string[];
  scores: Float32Array;
  attrs: Uint16Array;
  tokenToId: Map<string, number>;
  /** "left right" -> merge rank (BPE only). */
  bpeRanks: Map<string, number>;
  bosId: number | undefined;
  eosId: number | undefined;
  eotId: number | undefined;
  eomId: number | undefined;
  unkId: number | undefined;
  sepId: number | undefined;
  padId: number | undefined;
  maskId: number | undefined;
  fimPreId: number | undefined;
  fimSufId: number | undefined;
  fimMidId: number | undefined;
  fimPadId: number | undefined;
  fimRepId: number | undefined;
  fimSepId: number | undefined;
  addBos: boolean;
  addEos: boolean;
  addSpacePrefix: boolean;
  cleanSpaces: boolean;
  ignoreMerges: boolean;
  /** WordPiece normalizer (BertNormalizer) options. */
  lowercase: boolean;
  stripAccents: boolean;
  /** Longest token text in UTF-8 bytes (bounds WordPiece's longest-match search). */
  maxTokenBytes: number;
  eogIds: Set<number>;
  /** Control, user-defined and unknown tokens, longest text (in UTF-8 bytes) first. */
  specialTokens: number[];
}

interface PreConfig {
  kind: PreTokenizerKind;
  cleanSpaces?: boolean;
  ignoreMerges?: boolean;
  addBos?: boolean;
  noBos?: boolean;
}

// tokenizer.ggml.pre -> pre-tokenizer and flags, as in the `tokenizer_pre == ...` chain of
// llama_vocab::impl::load. Names llama.cpp knows but Kiwi does not implement are refused below.
const PRE_CONFIGS: ReadonlyMap<string, PreConfig> = new Map<string, PreConfig>([
  ['default', { kind: 'default' }],
  ...['llama3', 'llama-v3', 'llama-bpe', 'falcon3', 'falcon-h1', 'pixtral', 'midm-2.0', 'lfm2', 'jina-v5-nano'].map(
    (n): [string, PreConfig] => [n, { kind: 'llama3', ignoreMerges: true, addBos: true }],
  ),
  ['deepseek-llm', { kind: 'deepseek-llm', cleanSpaces: false }],
  ['deepseek-coder', { kind: 'deepseek-coder', cleanSpaces: false }],
  ['deepseek-v3', { kind: 'deepseek-v3', cleanSpaces: false }],
  ['falcon', { kind: 'falcon' }],
  ['mpt', { kind: 'gpt2' }],
  ['starcoder', { kind: 'starcoder' }],
  ...['gpt-2', 'phi-2', 'jina-es', 'jina-de', 'gigachat', 'jina-v2-es', 'jina-v2-de', 'a.x-4.0', 'mellum', 'modern-bert'].map(
    (n): [string, PreConfig] => [n, { kind: 'gpt2' }],
  ),
  ...['jina-v1-en', 'jina-v2-code', 'roberta-bpe'].map((n): [string, PreConfig] => [n, { kind: 'gpt2' }]),
  ['refact', { kind: 'starcoder' }],
  ['command-r', { kind: 'starcoder', cleanSpaces: false }],
  ...['qwen2', 'deepseek-r1-qwen', 'kormo', 'f2llmv2'].map((n): [string, PreConfig] => [n, { kind: 'qwen2', cleanSpaces: false }]),
  ['qwen35', { kind: 'qwen35', cleanSpaces: false }],
  ['stablelm2', { kind: 'qwen2' }],
  ['olmo', { kind: 'gpt2' }],
  ['dbrx', { kind: 'llama3' }],
  ['smaug-bpe', { kind: 'llama3' }],
  ['poro-chat', { kind: 'poro', cleanSpaces: false }],
  ['glm4', { kind: 'llama3', noBos: true }],
  ['chatglm-bpe', { kind: 'llama3', noBos: true }],
  ['viking', { kind: 'viking', cleanSpaces: false }],
  ['jais', { kind: 'gpt2' }],
  ['tekken', { kind: 'tekken', cleanSpaces: false, ignoreMerges: true, addBos: true }],
  ['smollm', { kind: 'starcoder', cleanSpaces: false }],
  ['codeshell', { kind: 'starcoder' }],
  ['bloom', { kind: 'poro' }],
  ['gpt3-finnish', { kind: 'poro' }],
  ['exaone', { kind: 'starcoder' }],
  ['exaone4', { kind: 'gpt2' }],
  ['chameleon', { kind: 'chameleon', addBos: true, cleanSpaces: false }],
  ['minerva-7b', { kind: 'starcoder' }],
  ['megrez', { kind: 'qwen2' }],
  ...['gpt-4o', 'llama4', 'kanana2', 'talkie'].map((n): [string, PreConfig] => [n, { kind: 'gpt4o', cleanSpaces: false }]),
  ['trillion', { kind: 'gpt2', cleanSpaces: false }],
  ['granite-docling', { kind: 'gpt2', cleanSpaces: false }],
  ...['bailingmoe', 'bailingmoe2', 'llada-moe'].map((n): [string, PreConfig] => [n, { kind: 'bailingmoe', cleanSpaces: false }]),
  ['seed-coder', { kind: 'seed-coder', cleanSpaces: false }],
  ['hunyuan', { kind: 'qwen2', cleanSpaces: false }],
  ...['hunyuan-dense', 'joyai-llm'].map((n): [string, PreConfig] => [n, { kind: 'deepseek-v3', cleanSpaces: false }]),
  ['grok-2', { kind: 'qwen2', cleanSpaces: false }],
  ['solar-open', { kind: 'qwen2', cleanSpaces: false }],
  ['mellum2', { kind: 'starcoder' }],
  ['minicpm5', { kind: 'minicpm5', ignoreMerges: true }],
]);

// Texts llama.cpp uses to find special tokens the metadata does not name, in its order of mention.
const EOT_TEXTS = [
  '<|eot_id|>',
  '<|im_end|>',
  '<|end|>',
  '<end_of_turn>',
  '<|endoftext|>',
  '<|end_of_text|>',
  '<EOT>',
  '_<EOT>',
  '[EOT]',
  '<｜end▁of▁sentence｜>',
  '<end_of_utterance>',
];
const EOM_TEXTS = ['<|eom_id|>'];
const FIM_PRE_TEXTS = ['<|fim_prefix|>', '<fim-prefix>', '<fim_prefix>', '<｜fim▁begin｜>', '<PRE>', '▁<PRE>', '<|code_prefix|>', '<|prefix|>'];
const FIM_SUF_TEXTS = ['<|fim_suffix|>', '<fim-suffix>', '<fim_suffix>', '<｜fim▁hole｜>', '<SUF>', '▁<SUF>', '<|code_suffix|>', '<|suffix|>'];
const FIM_MID_TEXTS = ['<|fim_middle|>', '<fim-middle>', '<fim_middle>', '<｜fim▁end｜>', '<MID>', '▁<MID>', '<|code_middle|>', '<|middle|>'];
const FIM_PAD_TEXTS = ['<|fim_pad|>', '<fim-pad>', '<fim_pad>', '<PAD>', '[PAD]'];
const FIM_REP_TEXTS = ['<|fim_repo|>', '<|repo_name|>', '<fim-repo>', '<REPO>', '<reponame>'];
const FIM_SEP_TEXTS = ['<|file_sep|>'];
const EOG_TEXTS = new Set([
  '<|eot_id|>',
  '<|im_end|>',
  '<|end|>',
  '<|return|>',
  '<|call|>',
  '<|flush|>',
  '<|calls|>',
  '<end_of_turn>',
  '<|endoftext|>',
  '</s>',
  '<|eom_id|>',
  '<EOT>',
  '_<EOT>',
  '[EOT]',
  '[EOS]',
  '<|end_of_text|>',
  '<end_of_utterance>',
  '<eos>',
  '<turn|>',
  '<|tool_response>',
  '<｜end▁of▁sentence｜>',
  '[e~[',
]);

/** UTF-8 byte length of a string without allocating. */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

function unsupported(message: string): KiwiError {
  return new KiwiError('TOKENIZER_UNSUPPORTED', message);
}

/** Reads the vocabulary from GGUF metadata; throws TOKENIZER_UNSUPPORTED for vocab kinds Kiwi lacks. */
export function loadVocab(meta: GgufMetadata): Vocab {
  const model = metaString(meta, 'tokenizer.ggml.model');
  if (model === undefined) {
    throw new KiwiError('GGUF_INVALID', "the model has no tokenizer (metadata key 'tokenizer.ggml.model' is missing)");
  }
  const preName = metaString(meta, 'tokenizer.ggml.pre');

  let type: VocabType;
  // Defaults before metadata, per vocab type (llama_vocab::impl::load).
  let bosId: number | undefined;
  let eosId: number | undefined;
  let unkId: number | undefined;
  let sepId: number | undefined;
  let padId: number | undefined;
  let maskId: number | undefined;
  let addBos = false;
  let addEos = false;
  let addSpacePrefix = false;
  let cleanSpaces = false;
  let ignoreMerges = false;
  let preKind: PreTokenizerKind | undefined;
  const bpeRanks = new Map<string, number>();

  if (model === 'llama') {
    type = 'spm';
    bosId = 1;
    eosId = 2;
    unkId = 0;
    addSpacePrefix = true;
    addBos = true;
  } else if (model === 'bert') {
    type = 'wpm';
    bosId = 101;
    unkId = 100;
    sepId = 102;
    padId = 0;
    maskId = 103;
    addBos = true;
    cleanSpaces = true;
  } else if (model === 'gpt2') {
    type = 'bpe';
    bosId = 11;
    eosId = 11;
    cleanSpaces = true;
    const merges = metaStringArray(meta, 'tokenizer.ggml.merges');
    if (merges === undefined) throw new KiwiError('GGUF_INVALID', "the BPE vocabulary has no merges ('tokenizer.ggml.merges')");
    for (let i = 0; i < merges.length; i++) {
      const word = merges[i]!;
      const pos = word.indexOf(' ', 1);
      const key = pos === -1 ? ' ' : word;
      if (!bpeRanks.has(key)) bpeRanks.set(key, i);
    }
    const config = PRE_CONFIGS.get(preName === undefined || preName === '' ? 'default' : preName);
    if (config === undefined) {
      throw unsupported(
        `the BPE pre-tokenizer '${preName ?? ''}' is not supported by Kiwi; supported: ${[...PRE_CONFIGS.keys()].join(', ')}`,
      );
    }
    preKind = config.kind;
    if (config.cleanSpaces === false) cleanSpaces = false;
    if (config.ignoreMerges) ignoreMerges = true;
    if (config.addBos) addBos = true;
    if (config.noBos) bosId = undefined;
  } else {
    throw unsupported(
      `the tokenizer type '${model}' is not supported; Kiwi reads SentencePiece ('llama'), byte-level BPE ('gpt2') and WordPiece ('bert') vocabularies`,
    );
  }
  addSpacePrefix = metaBoolean(meta, 'tokenizer.ggml.add_space_prefix') ?? addSpacePrefix;

  const tokensRaw = metaStringArray(meta, 'tokenizer.ggml.tokens');
  if (tokensRaw === undefined) throw new KiwiError('GGUF_INVALID', "the model has no token list ('tokenizer.ggml.tokens')");
  const n = tokensRaw.length;

  let scores = new Float32Array(n); // optional: llama.cpp scores every token 0 without them
  const SCORES = 'tokenizer.ggml.scores';
  if (meta.has(SCORES)) {
    const s = meta.get(SCORES) instanceof Float32Array ? metaFloat32Array(meta, SCORES)! : Float32Array.from(metaInt32Array(meta, SCORES)!);
    if (s.length < n) throw new KiwiError('GGUF_INVALID', `${SCORES} has ${String(s.length)} entries for ${String(n)} tokens`);
    scores = s.length === n ? s : s.slice(0, n);
  }
  const types = metaInt32Array(meta, 'tokenizer.ggml.token_type');
  if (types !== undefined && types.length < n) {
    throw new KiwiError('GGUF_INVALID', `tokenizer.ggml.token_type has ${String(types.length)} entries for ${String(n)} tokens`);
  }

  const lowercase = metaBoolean(meta, 'tokenizer.ggml.normalizer.lowercase') ?? true;
  const stripAccents = metaBoolean(meta, 'tokenizer.ggml.normalizer.strip_accents') ?? lowercase;

  const tokens: string[] = new Array<string>(n);
  let maxTokenBytes = 0;
  const attrs = new Uint16Array(n);
  const tokenToId = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    let word = tokensRaw[i]!;
    if (word === '') word = `[EMPTY_${String(i)}]`;
    tokens[i] = word;
    tokenToId.set(word, i);
    if (type === 'wpm') maxTokenBytes = Math.max(maxTokenBytes, utf8Length(word));
    attrs[i] = types === undefined ? TokenAttr.NORMAL : (TYPE_TO_ATTR[types[i]!] ?? TokenAttr.UNDEFINED);
  }

  // Special ids: defaults outside the vocabulary are dropped, then valid metadata ids override
  // (the deprecated prefix/suffix/middle keys come last in llama.cpp's list, so they win).
  const readId = (key: string, fallback: number | undefined): number | undefined => {
    let id = fallback !== undefined && fallback >= n ? undefined : fallback;
    const v = metaInteger(meta, key);
    if (v !== undefined && v >= 0 && v < n) id = v;
    return id;
  };
  bosId = readId('tokenizer.ggml.bos_token_id', bosId);
  eosId = readId('tokenizer.ggml.eos_token_id', eosId);
  let eotId = readId('tokenizer.ggml.eot_token_id', undefined);
  let eomId = readId('tokenizer.ggml.eom_token_id', undefined);
  unkId = readId('tokenizer.ggml.unknown_token_id', unkId);
  sepId = readId('tokenizer.ggml.seperator_token_id', sepId);
  padId = readId('tokenizer.ggml.padding_token_id', padId);
  maskId = readId('tokenizer.ggml.mask_token_id', maskId);
  let fimPreId = readId('tokenizer.ggml.prefix_token_id', readId('tokenizer.ggml.fim_pre_token_id', undefined));
  let fimSufId = readId('tokenizer.ggml.suffix_token_id', readId('tokenizer.ggml.fim_suf_token_id', undefined));
  let fimMidId = readId('tokenizer.ggml.middle_token_id', readId('tokenizer.ggml.fim_mid_token_id', undefined));
  let fimPadId = readId('tokenizer.ggml.fim_pad_token_id', undefined);
  let fimRepId = readId('tokenizer.ggml.fim_rep_token_id', undefined);
  let fimSepId = readId('tokenizer.ggml.fim_sep_token_id', undefined);

  addBos = metaBoolean(meta, 'tokenizer.ggml.add_bos_token') ?? addBos;
  addEos = metaBoolean(meta, 'tokenizer.ggml.add_eos_token') ?? addEos;

  const forceControl = (id: number): void => {
    attrs[id] = attrs[id]! | TokenAttr.CONTROL;
  };
  // llama.cpp walks an unordered_map here, so with several candidates its pick is hash-order
  // dependent; Kiwi takes the first text in llama.cpp's list that the vocabulary has.
  const detect = (current: number | undefined, texts: readonly string[]): number | undefined => {
    if (current !== undefined) return current;
    for (const t of texts) {
      const id = tokenToId.get(t);
      if (id !== undefined) {
        forceControl(id);
        return id;
      }
    }
    return undefined;
  };
  eotId = detect(eotId, EOT_TEXTS);
  eomId = detect(eomId, EOM_TEXTS);
  fimPreId = detect(fimPreId, FIM_PRE_TEXTS);
  fimSufId = detect(fimSufId, FIM_SUF_TEXTS);
  fimMidId = detect(fimMidId, FIM_MID_TEXTS);
  fimPadId = detect(fimPadId, FIM_PAD_TEXTS);
  fimRepId = detect(fimRepId, FIM_REP_TEXTS);
  fimSepId = detect(fimSepId, FIM_SEP_TEXTS);

  // Control tokens whose text says "unused" are unused.
  for (let i = 0; i < n; i++) {
    if ((attrs[i]! & TokenAttr.CONTROL) !== 0 && tokens[i]!.includes('unused')) attrs[i] = attrs[i]! | TokenAttr.UNUSED;
  }

  const eogIds = new Set<number>();
  for (const id of [fimPadId, fimRepId, fimSepId]) if (id !== undefined) eogIds.add(id);
  for (const text of EOG_TEXTS) {
    const id = tokenToId.get(text);
    if (id !== undefined) {
      eogIds.add(id);
      forceControl(id);
    }
  }
  // gpt-oss: these always render, so they are user-defined rather than control.
  for (const text of ['<|channel|>', '<|message|>', '<|start|>', '<|constrain|>']) {
    const id = tokenToId.get(text);
    if (id !== undefined) attrs[id] = TokenAttr.USER_DEFINED;
  }
  for (const id of [eosId, eotId, eomId]) if (id !== undefined) eogIds.add(id);
  {
    const textsInEog = new Map<string, number>();
    for (const id of eogIds) textsInEog.set(tokens[id]!, id);
    const has = (t: string): boolean => textsInEog.has(t);
    const hasCall = has('<|call|>') || has('<|calls|>');
    if ((has('<|return|>') && hasCall && has('<|end|>')) || (hasCall && has('<|flush|>') && has('<|end|>'))) {
      const endId = textsInEog.get('<|end|>')!;
      eogIds.delete(endId);
      attrs[endId] = TokenAttr.USER_DEFINED;
    }
    if (has('<|tool_response>') && has('</s>')) {
      const sId = textsInEog.get('</s>')!;
      eogIds.delete(sId);
      attrs[sId] = TokenAttr.NORMAL;
    }
  }

  const specialAttr = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN;
  const specialTokens: number[] = [];
  for (let i = 0; i < n; i++) if ((attrs[i]! & specialAttr) !== 0) specialTokens.push(i);
  const byteLen = new Map<number, number>(specialTokens.map((id) => [id, utf8Length(tokens[id]!)]));
  specialTokens.sort((a, b) => byteLen.get(b)! - byteLen.get(a)! || a - b);

  // Per-model attributes llama.cpp sets by name after building the special-token cache.
  const name = (metaString(meta, 'general.name') ?? '').toLowerCase();
  const arch = metaString(meta, 'general.architecture') ?? '';
  const setAttr = (text: string, attr: number, on: boolean): void => {
    const id = tokenToId.get(text);
    if (id !== undefined) attrs[id] = on ? attrs[id]! | attr : attrs[id]! & ~attr;
  };
  const pre = preName ?? '';
  if (['jina-v2-de', 'jina-v2-es', 'jina-v2-code'].some((s) => pre.includes(s)) || ['nomic-bert-moe', 'jina-bert-v3'].some((s) => arch.includes(s))) {
    setAttr('<mask>', TokenAttr.LSTRIP, true);
  } else if (name.includes('phi-3') || name.includes('phi3')) {
    for (const id of specialTokens) attrs[id] = attrs[id]! | TokenAttr.RSTRIP;
    setAttr('</s>', TokenAttr.RSTRIP, true);
    for (const t of ['<unk>', '<s>', '<|endoftext|>']) setAttr(t, TokenAttr.RSTRIP, false);
  } else if (name.includes('modern-bert')) {
    setAttr('[MASK]', TokenAttr.LSTRIP, true);
  }

  if (preKind !== undefined && !(preKind in PRE_TOKENIZER_REGEXES)) throw unsupported(`no pre-tokenizer '${preKind}'`);

  return {
    type,
    preName,
    preKind,
    tokens,
    scores,
    attrs,
    tokenToId,
    bpeRanks,
    bosId,
    eosId,
    eotId,
    eomId,
    unkId,
    sepId,
    padId,
    maskId,
    fimPreId,
    fimSufId,
    fimMidId,
    fimPadId,
    fimRepId,
    fimSepId,
    addBos,
    addEos,
    addSpacePrefix,
    cleanSpaces,
    ignoreMerges,
    lowercase,
    stripAccents,
    maxTokenBytes,
    eogIds,
    specialTokens,
  };
}
