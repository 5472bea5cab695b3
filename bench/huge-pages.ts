// Huge pages for the packed weights (device/huge-pages.ts): `kiwi generate` as a user runs it
// (restarting itself with glibc.malloc.hugetlb=1) against KIWI_HUGE_PAGES=0, alternating, in
// one run. Per model and variant, medians over the rounds and the per-round spread of:
//   start -> exit   the whole process: node's start, opening the stage from the shard cache
//                   (onnxruntime's session creation and prepacking: the part huge pages speed up),
//                   the prompt and the tokens;
//   ttft, decode    time to first token and decode tokens/s, as `kiwi generate --json` reports.
// The shard cache is filled first (one untimed run), so every round opens from it.
// Run: npx tsx bench/huge-pages.ts   Env: KIWI_MODELS (comma-separated GGUFs; default `kiwi synth`
//      Llama-3.2-1B q4_0 and q8_0 in KIWI_BENCH_DIR, default /tmp/kiwi-huge-pages),
//      KIWI_BENCH_ROUNDS (default 5), KIWI_BENCH_TOKENS (default 64).
// Prints a table and writes bench/results/huge-pages.json.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { median } from '../electron/engine/median.js';
import { kiwiEntry, repoRoot } from '../electron/engine/test-support/processes.js';

const run = promisify(execFile);
const DIR = process.env.KIWI_BENCH_DIR ?? '/tmp/kiwi-huge-pages';
const ROUNDS = Number(process.env.KIWI_BENCH_ROUNDS ?? 5);
const TOKENS = Number(process.env.KIWI_BENCH_TOKENS ?? 64);
const PROMPT = 'Once upon a time there was a little dog who lived in a small house near the park, and every day';
const VARIANTS = [
  { name: 'huge pages', env: {} },
  { name: '4 KiB pages', env: { KIWI_HUGE_PAGES: '0' } },
] as const;

async function models(): Promise<string[]> {
  if (process.env.KIWI_MODELS !== undefined) return process.env.KIWI_MODELS.split(',');
  await mkdir(DIR, { recursive: true });
  const out: string[] = [];
  for (const quant of ['q4_0', 'q8_0']) {
    const path = join(DIR, `llama-3.2-1b-${quant}.gguf`);
    if (!existsSync(path)) await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', 'llama-3.2-1b', '--quant', quant, '--out', path, '--seed', '1', '--json'], { cwd: repoRoot });
    out.push(path);
  }
  return out;
}

interface Sample {
  wallMs: number;
  ttftMs: number;
  tokensPerS: number;
}

/** One `kiwi generate`, timed from its start to its exit. */
async function generate(model: string, env: Record<string, string>): Promise<Sample> {
  const started = performance.now();
  const { stdout } = await run(process.execPath, [...kiwiEntry(), 'generate', '--model', model, '--prompt', PROMPT, '--max-tokens', String(TOKENS), '--json'], {
    cwd: repoRoot,
    env: { ...process.env, ...env, KIWI_CACHE_DIR: join(DIR, 'cache') },
    maxBuffer: 1 << 24,
  });
  const wallMs = performance.now() - started;
  const out = JSON.parse(stdout.trim().split('\n').pop() as string) as { ttft_ms: number; tokens_per_s: number };
  return { wallMs, ttftMs: out.ttft_ms, tokensPerS: out.tokens_per_s };
}

const rows: Array<{ model: string; variant: string; samples: Sample[] }> = [];
for (const model of await models()) {
  await generate(model, {}); // fills the shard cache
  const samples = VARIANTS.map(() => [] as Sample[]);
  for (let r = 0; r < ROUNDS; r++) {
    // Alternate which variant goes first, so a neighbour's load falls on both.
    const order = r % 2 === 0 ? [0, 1] : [1, 0];
    for (const v of order) (samples[v] as Sample[]).push(await generate(model, (VARIANTS[v] as (typeof VARIANTS)[number]).env));
    console.error(`${basename(model)}: round ${r + 1}/${ROUNDS}`);
  }
  VARIANTS.forEach((v, i) => rows.push({ model: basename(model), variant: v.name, samples: samples[i] as Sample[] }));
}

const stat = (xs: number[], digits: number): string => `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)})`;
console.log(`| model | pages | start -> exit ms | ttft ms | decode tok/s |`);
console.log(`| --- | --- | --- | --- | --- |`);
for (const r of rows) {
  const pick = (k: keyof Sample): number[] => r.samples.map((s) => s[k]);
  console.log(`| ${r.model} | ${r.variant} | ${stat(pick('wallMs'), 0)} | ${stat(pick('ttftMs'), 0)} | ${stat(pick('tokensPerS'), 1)} |`);
}
await mkdir(join(repoRoot, 'bench/results'), { recursive: true });
await writeFile(join(repoRoot, 'bench/results/huge-pages.json'), `${JSON.stringify({ rounds: ROUNDS, tokens: TOKENS, rows }, null, 2)}\n`);
