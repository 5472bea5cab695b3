// The ring against one process on the same model: `kiwi serve` vs a rendezvous + `kiwi host` + two
// `kiwi join` members on loopback, each a real process, measured through the OpenAI API (SSE):
// time to first token and tokens/s of one stream, aggregate tokens/s of 4 concurrent streams, and
// the activation encodings between stages (f32, f16, int8, int8 + zstd) with their frame sizes.
// Model: $KIWI_MODEL, else a `kiwi synth` Llama-family model (8 layers, width 512, Q8_0) written
// to a temporary directory. Threads per process: $KIWI_BENCH_THREADS (default 1, so three ring
// processes do not fight over a small machine's cores more than one process does).
// Run: npx tsx bench/ring.ts   Prints a table and writes bench/results/ring.json.
import { spawn, type ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { encodeStepFrame, type ActivationEncoding } from '../electron/engine/transport/tensor-frame.js';

const TOKENS = Number(process.env.KIWI_BENCH_TOKENS ?? 64);
const THREADS = process.env.KIWI_BENCH_THREADS ?? '1';
const root = join(import.meta.dirname, '..');
const dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-ring-'));
const env = { ...process.env, KIWI_CACHE_DIR: join(dir, 'cache') };
const children: ChildProcess[] = [];

const SHAPE = { name: 'bench-ring', architecture: 'llama', blockCount: 8, embeddingLength: 512, headCount: 8, headCountKv: 4, feedForwardLength: 1536, vocabSize: 4096, contextLength: 1024 };
const model = process.env.KIWI_MODEL ?? join(dir, 'bench-ring.gguf');
if (process.env.KIWI_MODEL === undefined) {
  execFileSync(process.execPath, ['--import', 'tsx', 'electron/kiwi.ts', 'synth', '--shape', JSON.stringify(SHAPE), '--quant', 'q8_0', '--out', model, '--json'], { cwd: root, env, stdio: ['ignore', 'ignore', 'ignore'] });
}
const modelId = model.split('/').pop()!.replace(/\.gguf$/i, '');

function kiwi(args: string[]): { child: ChildProcess; event: (name: string) => Promise<Record<string, unknown>> } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'electron/kiwi.ts', ...args, '--json'], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  const events: Array<Record<string, unknown>> = [];
  const waiters: Array<() => void> = [];
  createInterface({ input: child.stdout! }).on('line', (line) => {
    try {
      events.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      return;
    }
    for (const w of waiters.splice(0)) w();
  });
  const stderr: string[] = [];
  createInterface({ input: child.stderr! }).on('line', (l) => stderr.push(l));
  const event = async (name: string): Promise<Record<string, unknown>> => {
    for (;;) {
      const hit = events.find((e) => e.event === name);
      if (hit !== undefined) return hit;
      if (child.exitCode !== null) throw new Error(`kiwi ${args[0]} exited: ${stderr.join('\n')}`);
      await new Promise<void>((r) => {
        waiters.push(r);
        setTimeout(r, 200);
      });
    }
  };
  return { child, event };
}

async function stopAll(): Promise<void> {
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      c.kill('SIGTERM');
      await new Promise((r) => c.once('exit', r));
    }
  }
}

interface Stream {
  ttftMs: number;
  tokens: number;
  decodeMs: number;
}

/** One greedy SSE stream; counts content chunks as tokens (one per token). */
async function stream(url: string, prompt: string): Promise<Stream> {
  const t0 = performance.now();
  const res = await fetch(`${url}/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: modelId, prompt, max_tokens: TOKENS, temperature: 0, stream: true }),
  });
  if (!res.ok || res.body === null) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let first = 0;
  let tokens = 0;
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    const n = decoder.decode(chunk, { stream: true }).split('\n').filter((l) => l.startsWith('data: {')).length;
    if (n > 0 && first === 0) first = performance.now();
    tokens += n;
  }
  const end = performance.now();
  return { ttftMs: first - t0, tokens, decodeMs: end - first };
}

interface Row {
  case: string;
  ttftMs: number;
  tokensPerS: number;
  aggregate4TokensPerS: number;
}

async function measure(label: string, url: string): Promise<Row> {
  await stream(url, 'warm up the caches');
  const one = await stream(url, 'Once upon a time');
  const t0 = performance.now();
  const four = await Promise.all(['a', 'b', 'c', 'd'].map((p) => stream(url, `story ${p}`)));
  const wall = (performance.now() - t0) / 1000;
  return {
    case: label,
    ttftMs: one.ttftMs,
    tokensPerS: ((one.tokens - 1) * 1000) / one.decodeMs,
    aggregate4TokensPerS: four.reduce((n, s) => n + s.tokens, 0) / wall,
  };
}

const rows: Row[] = [];
try {
  {
    const serve = kiwi(['serve', '--model', model, '--port', '0', '--threads', THREADS]);
    rows.push(await measure('one process (kiwi serve)', (await serve.event('serving')).url as string));
    await stopAll();
  }
  const configs: Array<{ label: string; encoding: ActivationEncoding; zstd: boolean }> = [
    { label: 'ring 3 stages, f32', encoding: 'f32', zstd: false },
    { label: 'ring 3 stages, f16', encoding: 'f16', zstd: false },
    { label: 'ring 3 stages, int8', encoding: 'int8', zstd: false },
    { label: 'ring 3 stages, int8+zstd', encoding: 'int8', zstd: true },
  ];
  for (const c of configs) {
    const rv = kiwi(['rendezvous', '--host', '127.0.0.1', '--port', '0']);
    const url = (await rv.event('listening')).url as string;
    const host = kiwi(['host', '--model', model, '--port', '0', '--rendezvous', url, '--auto-approve', '--expect', '2', '--rendezvous-host', '127.0.0.1',
      '--listen', '127.0.0.1', '--activations', c.encoding, '--threads', THREADS, ...(c.zstd ? ['--zstd'] : [])]);
    const code = (await host.event('session')).code as string;
    for (const name of ['m1', 'm2']) kiwi(['join', code, '--rendezvous', url, '--name', name, '--listen', '127.0.0.1', '--model', model, '--threads', THREADS]);
    rows.push(await measure(c.label, (await host.event('serving')).url as string));
    await stopAll();
  }
} finally {
  await stopAll();
}

// Frame sizes of one decode step's hidden states (1 token) and of a 128-token prefill, per encoding.
const frames: Array<{ encoding: string; decodeBytes: number; prefillBytes: number }> = [];
for (const [encoding, zstd] of [['f32', false], ['f16', false], ['int8', false], ['int8', true]] as const) {
  const size = async (seq: number): Promise<number> => {
    // Normally distributed values with a few outliers, like hidden states (zstd gains little on them).
    const hidden = new Float32Array(seq * SHAPE.embeddingLength).map((_, i) => {
      const g = Math.sqrt(-2 * Math.log(1 - Math.random())) * Math.cos(2 * Math.PI * Math.random());
      return i % 97 === 0 ? g * 20 : g;
    });
    return (await encodeStepFrame({ metadata: { step: '1', rows: '[{"id":1,"pos":0,"cap":256}]' }, tensor: { kind: 'hidden', hidden, dims: [1, seq, SHAPE.embeddingLength] } }, { encoding, zstd })).length;
  };
  frames.push({ encoding: `${encoding}${zstd ? '+zstd' : ''}`, decodeBytes: await size(1), prefillBytes: await size(128) });
}

const base = rows[0]!;
console.log(`model ${modelId}, ${TOKENS} tokens per stream, ${THREADS} thread(s) per process, loopback`);
console.log('case                        TTFT ms   tok/s  x1proc   4 streams tok/s');
for (const r of rows) {
  console.log(`${r.case.padEnd(26)} ${r.ttftMs.toFixed(1).padStart(8)} ${r.tokensPerS.toFixed(1).padStart(7)} ${(r.tokensPerS / base.tokensPerS).toFixed(2).padStart(7)} ${r.aggregate4TokensPerS.toFixed(1).padStart(12)}`);
}
console.log('\nframe bytes (width 512)   decode step   128-token prefill');
for (const f of frames) console.log(`${f.encoding.padEnd(24)} ${String(f.decodeBytes).padStart(12)} ${String(f.prefillBytes).padStart(18)}`);
const out = join(import.meta.dirname, 'results');
await mkdir(out, { recursive: true });
await writeFile(join(out, 'ring.json'), `${JSON.stringify({ model: process.env.KIWI_MODEL ?? SHAPE, tokens: TOKENS, threads: THREADS, rows, frames }, null, 2)}\n`);
await rm(dir, { recursive: true, force: true });
