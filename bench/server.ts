// The OpenAI server's cost over the runtime: time to first token and tokens/s of one greedy stream
// through HTTP + SSE against the same generation called directly, and aggregate tokens/s of 1, 4
// and 16 concurrent streams. Model: $KIWI_MODEL, else stories260K (tiny, so per-token server
// overhead is what shows). Run: npx tsx bench/server.ts
// Prints a table and writes bench/results/server.json.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { testModelPath } from '../electron/engine/model/test-models.js';
import { generate } from '../electron/engine/runtime/generation.js';
import { openLocalModel } from '../electron/engine/runtime/local-model.js';
import { DEFAULT_SAMPLING, Sampler } from '../electron/engine/runtime/sampling.js';
import { startOpenAiServer } from '../electron/engine/server/http-server.js';
import { LocalBackend } from '../electron/engine/server/local-backend.js';

const TOKENS = Number(process.env.KIWI_BENCH_TOKENS ?? 256);
const THREADS = Number(process.env.KIWI_BENCH_THREADS ?? 1);
const PROMPT = 'Once upon a time';

const modelPath = process.env.KIWI_MODEL ?? (await testModelPath('stories260K.gguf'));

interface Row {
  case: string;
  streams: number;
  ttftMs: number;
  tokensPerS: number;
}
const rows: Row[] = [];

// Direct: the runtime's generate() with nothing around it.
{
  const model = await openLocalModel(modelPath, { threads: THREADS });
  const tok = model.tokenizer;
  const params = () => ({ promptIds: tok.encode(PROMPT), maxTokens: TOKENS, sampler: new Sampler(DEFAULT_SAMPLING), isEndOfGeneration: () => false });
  await generate(model.chain, params()); // warm-up
  const r = await generate(model.chain, params());
  rows.push({ case: 'runtime generate()', streams: 1, ttftMs: r.ttftMs, tokensPerS: ((r.ids.length - 1) * 1000) / r.decodeMs });
  await model.dispose();
}

const backend = await LocalBackend.open(modelPath, { threads: THREADS, maxBatch: 16 });
const server = await startOpenAiServer(backend, { port: 0, maxActive: 16 });

/** One greedy stream; ignore_eos is not an OpenAI field, so a stream may end early at EOS: count what came. */
async function stream(): Promise<{ ttftMs: number; tokens: number; ms: number }> {
  const t0 = performance.now();
  const res = await fetch(`${server.url}/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: PROMPT, max_tokens: TOKENS, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let ttftMs = -1;
  let text = '';
  for (let r = await reader.read(); !r.done; r = await reader.read()) {
    if (ttftMs < 0) ttftMs = performance.now() - t0;
    text += decoder.decode(r.value, { stream: true });
  }
  const usage = /"completion_tokens":(\d+)/.exec(text);
  return { ttftMs, tokens: Number(usage?.[1] ?? 0), ms: performance.now() - t0 };
}

await stream(); // warm-up
for (const n of [1, 4, 16]) {
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: n }, () => stream()));
  const wall = performance.now() - t0;
  const tokens = results.reduce((s, r) => s + r.tokens, 0);
  rows.push({
    case: 'HTTP + SSE stream',
    streams: n,
    ttftMs: results.reduce((s, r) => s + r.ttftMs, 0) / n,
    tokensPerS: (tokens * 1000) / wall,
  });
}
await server.close();
await backend.close();

const fmt = (x: number) => x.toFixed(1);
console.log(`model ${modelPath}, ${TOKENS} tokens per stream, ${THREADS} thread(s)`);
console.log('| case | streams | mean TTFT ms | aggregate tokens/s |\n| --- | ---: | ---: | ---: |');
for (const r of rows) console.log(`| ${r.case} | ${r.streams} | ${fmt(r.ttftMs)} | ${fmt(r.tokensPerS)} |`);
const out = join(import.meta.dirname, 'results');
await mkdir(out, { recursive: true });
await writeFile(join(out, 'server.json'), `${JSON.stringify({ model: modelPath, tokens: TOKENS, threads: THREADS, rows }, null, 2)}\n`);
