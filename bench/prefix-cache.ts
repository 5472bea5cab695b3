// The prompt cache (issue 16, runtime/prefix-cache.ts): time to first token over a 10-turn chat,
// each turn resending the whole history plus a new user message through /v1/chat/completions (the
// model's chat template, streamed, greedy), with the cache (--prompt-cache-mb 256) and without it
// (0). One process (`kiwi serve`) and a 2-stage ring on loopback (rendezvous + `kiwi host` + one
// `kiwi join`, the host holding about half the layers), on stories260K and on a random-weight
// Llama-3.2-1B Q4_0 (`kiwi synth`, kept in $TMPDIR/kiwi-bench-prefix between runs). Also checks
// that every answer is the same with and without the cache, and reads the hits and tokens reused
// from GET /health.
//   KIWI_BENCH_MODELS (stories260K,llama-3.2-1b), KIWI_BENCH_THREADS (threads per process, 1),
//   KIWI_BENCH_TURNS (10), KIWI_BENCH_TOPOLOGIES (single,ring).
// Run: npx tsx bench/prefix-cache.ts   Prints a table and writes bench/results/prefix-cache.json.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { testModelPath } from '../electron/engine/model/test-models.js';
import { modelSizesFromGguf } from '../electron/engine/planner/model-sizes.js';
import { FaultRing } from '../electron/engine/test-support/fault-ring.js';
import { kiwiEntry, ProcessSet, repoRoot, waitEvent } from '../electron/engine/test-support/processes.js';

const run = promisify(execFile);
const THREADS = process.env.KIWI_BENCH_THREADS ?? '1';
const TURNS = Number(process.env.KIWI_BENCH_TURNS ?? 10);
const MODELS = (process.env.KIWI_BENCH_MODELS ?? 'stories260K,llama-3.2-1b').split(',');
const TOPOLOGIES = (process.env.KIWI_BENCH_TOPOLOGIES ?? 'single,ring').split(',');
const CACHE_MB = 256;

interface ModelCase {
  name: string;
  path: string;
  /** Context per request. */
  context: number;
  maxTokens: number;
  /** The user's message of turn t. */
  message: (t: number) => string;
}

interface Turn {
  ttftMs: number;
  promptTokens: number | null;
  text: string;
}

interface Row {
  model: string;
  topology: 'single' | 'ring';
  cacheMb: number;
  turns: Turn[];
  health: Record<string, unknown> | undefined;
}

const procs = new ProcessSet();

async function modelCase(name: string, dir: string): Promise<ModelCase> {
  if (name === 'stories260K') {
    // A tiny context (512): short turns so that ten fit.
    return { name, path: await testModelPath('stories260K.gguf'), context: 512, maxTokens: 10, message: (t) => `Tell me about the ${['cat', 'dog', 'ball', 'tree', 'sun', 'boat', 'bird', 'cake', 'park', 'moon'][t % 10]}.` };
  }
  if (name === 'llama-3.2-1b') {
    const path = join(dir, 'llama-3.2-1b-q4_0.gguf');
    if (!existsSync(path)) {
      console.error(`writing ${path} (kiwi synth)...`);
      await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', 'llama-3.2-1b', '--quant', 'q4_0', '--out', path, '--seed', '1'], { cwd: repoRoot, maxBuffer: 1 << 26 });
    }
    const words = 'the ring of friends shares layers of one model and each turn of this chat resends every earlier message again'.split(' ');
    return { name, path, context: 2048, maxTokens: 16, message: (t) => `Question ${t + 1}: ${words.map((w, i) => words[(i + t) % words.length]!).join(' ')}. ${words.slice(0, 8 + t).join(' ')}?` };
  }
  throw new Error(`unknown model ${name} (stories260K or llama-3.2-1b)`);
}

/** One streamed chat turn: the time from sending it to its first token's chunk, its prompt size and its answer. */
async function chatTurn(url: string, model: string, messages: Array<{ role: string; content: string }>, maxTokens: number): Promise<Turn> {
  const started = performance.now();
  const res = await fetch(`${url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok || res.body === null) throw new Error(`chat turn: HTTP ${res.status} ${await res.text()}`);
  let ttftMs: number | undefined;
  let text = '';
  let promptTokens: number | null = null;
  let buffer = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk as Uint8Array, { stream: true });
    let nl: number;
    while ((nl = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 2);
      const data = event.replace(/^data: /, '');
      if (data === '[DONE]' || data === '') continue;
      const msg = JSON.parse(data) as { choices?: Array<{ delta?: { content?: string; role?: string } }>; usage?: { prompt_tokens: number } | null };
      const delta = msg.choices?.[0]?.delta;
      // The stream opens with a role chunk at once; the first token comes after the prefill.
      if (delta?.content !== undefined && delta.role === undefined) {
        const piece = delta.content;
        ttftMs ??= performance.now() - started;
        text += piece;
      }
      if (msg.usage) promptTokens = msg.usage.prompt_tokens;
    }
  }
  return { ttftMs: ttftMs ?? performance.now() - started, promptTokens, text };
}

async function conversation(url: string, m: ModelCase, modelId: string): Promise<Turn[]> {
  const messages: Array<{ role: string; content: string }> = [{ role: 'system', content: 'You are a helpful assistant.' }];
  const turns: Turn[] = [];
  for (let t = 0; t < TURNS; t++) {
    messages.push({ role: 'user', content: m.message(t) });
    const turn = await chatTurn(url, modelId, messages, m.maxTokens);
    turns.push(turn);
    messages.push({ role: 'assistant', content: turn.text });
  }
  return turns;
}

async function health(url: string): Promise<Record<string, unknown> | undefined> {
  const res = await fetch(`${new URL(url).origin}/health`);
  return res.ok ? ((await res.json()) as Record<string, unknown>) : undefined;
}

async function single(m: ModelCase, cacheMb: number): Promise<Row> {
  const serve = procs.kiwi('serve', '--model', m.path, '--port', '0', '--threads', THREADS, '--prompt-cache-mb', String(cacheMb), '--json');
  try {
    const url = (await waitEvent(serve, (e) => e.event === 'serving', 'kiwi serve serving', 600_000)).url as string;
    const modelId = ((await (await fetch(`${url}/models`)).json()) as { data: Array<{ id: string }> }).data[0]!.id;
    const turns = await conversation(url, m, modelId);
    return { model: m.name, topology: 'single', cacheMb, turns, health: await health(url) };
  } finally {
    serve.child.kill('SIGINT');
    await serve.exited;
  }
}

async function ring(m: ModelCase, cacheMb: number, dir: string): Promise<Row> {
  // The host holds the head and about half the blocks, the member the rest: two stages.
  const file = await openGguf(m.path);
  const sizes = modelSizesFromGguf(file);
  const blocks = sizes.layers;
  const perBlock = sizes.blockResidentBytes! + sizes.kvBytesPerTokenPerLayer * m.context;
  const hostBlocks = Math.floor(blocks / 2);
  const caps = join(dir, 'capabilities-host.json');
  await writeFile(caps, JSON.stringify({ fleet_device: { memory_bytes: sizes.headResidentBytes + hostBlocks * perBlock + perBlock / 2 } }));
  const r = await FaultRing.start(procs, {
    model: m.path, dir, members: [{ name: 'm1', memoryBytes: (blocks - hostBlocks + 1) * perBlock, ownModel: true, args: ['--threads', THREADS] }],
    hostArgs: ['--capabilities', caps, '--threads', THREADS, '--context', String(m.context), '--prompt-cache-mb', String(cacheMb)],
    formTimeoutMs: 300_000,
  });
  try {
    const stages = (await r.status()).stages.map((s) => `${s.name}:${s.start}-${s.end}`).join(' ');
    console.error(`ring: ${stages}`);
    const modelId = ((await (await fetch(`${r.url}/models`)).json()) as { data: Array<{ id: string }> }).data[0]!.id;
    const turns = await conversation(r.url, m, modelId);
    return { model: m.name, topology: 'ring', cacheMb, turns, health: await health(r.url) };
  } finally {
    procs.killAll();
  }
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function main(): Promise<void> {
  const dir = join(tmpdir(), 'kiwi-bench-prefix');
  await mkdir(dir, { recursive: true });
  const rows: Row[] = [];
  for (const name of MODELS) {
    const m = await modelCase(name, dir);
    for (const topology of TOPOLOGIES) {
      for (const cacheMb of [0, CACHE_MB]) {
        console.error(`${name} ${topology} prompt cache ${cacheMb} MB...`);
        rows.push(topology === 'single' ? await single(m, cacheMb) : await ring(m, cacheMb, dir));
      }
    }
  }
  procs.killAll();

  const table = [['model', 'topology', 'cache', 'turn 1 ms', 'turn 10 ms', 'turns 2-10 median', 'all turns ms', 'speedup', 'same text', 'hits', 'tokens reused', 'prompt tokens (last)']];
  const summary = rows.map((r) => {
    const off = rows.find((x) => x.model === r.model && x.topology === r.topology && x.cacheMb === 0)!;
    const total = r.turns.reduce((a, t) => a + t.ttftMs, 0);
    const offTotal = off.turns.reduce((a, t) => a + t.ttftMs, 0);
    const cache = r.health?.prompt_cache as { hits?: number; tokens_reused?: number } | undefined;
    const same = r.turns.every((t, i) => t.text === off.turns[i]?.text);
    const s = {
      model: r.model, topology: r.topology, cacheMb: r.cacheMb,
      firstMs: r.turns[0]!.ttftMs, lastMs: r.turns.at(-1)!.ttftMs, laterMedianMs: median(r.turns.slice(1).map((t) => t.ttftMs)), totalMs: total,
      speedup: offTotal / total, sameText: same, hits: cache?.hits ?? 0, tokensReused: cache?.tokens_reused ?? 0, lastPromptTokens: r.turns.at(-1)!.promptTokens,
    };
    table.push([s.model, s.topology, s.cacheMb === 0 ? 'off' : `${s.cacheMb} MB`, s.firstMs.toFixed(0), s.lastMs.toFixed(0), s.laterMedianMs.toFixed(0), s.totalMs.toFixed(0),
      `${s.speedup.toFixed(2)}x`, String(s.sameText), String(s.hits), String(s.tokensReused), String(s.lastPromptTokens ?? '-')]);
    return s;
  });
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  for (const row of table) console.log(row.map((c, i) => c.padEnd(widths[i]!)).join('  '));
  await mkdir(join(repoRoot, 'bench', 'results'), { recursive: true });
  const out = join(repoRoot, 'bench', 'results', 'prefix-cache.json');
  await writeFile(out, JSON.stringify({ date: new Date().toISOString(), threads: Number(THREADS), turns: TURNS, loadavg: loadavg(), summary, rows }, null, 2));
  console.log(`wrote ${out}`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    procs.killAll();
    process.exit(1);
  },
);
