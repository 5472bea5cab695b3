// Kiwi's stage runtime against llama.cpp (node-llama-cpp, CPU, same thread count) on a `kiwi synth`
// GGUF of Llama-3.2-1B shape at Q4_0, Q8_0 and Q4_K_M (llama.cpp's Q4_K/Q6_K mix): prefill
// tokens/s for a 128-token prompt, decode tokens/s, peak RSS, shard build time cold and warm, and
// the memory-bandwidth floor (weight bytes per token / measured bandwidth). Each engine runs in
// its own child process (so peak RSS is its own); rounds alternate between them (and which goes
// first) so a noisy neighbour hits both alike. Both also decode after a long prompt
// (KIWI_BENCH_LONG positions): what attention over a long KV cache adds to every step.
// Run: npx tsx bench/single-node.ts
// Env: KIWI_BENCH_ROUNDS (default 7), KIWI_BENCH_THREADS (default all cores),
//      KIWI_BENCH_LONG (prompt positions of the long decode, default 2048; 0: none),
//      KIWI_BENCH_QUANTS (default q4_0,q8_0,q4_k_m), KIWI_BENCH_DECODE (decode tokens, default 32),
//      KIWI_BENCH_FAST=0 for exact f32 activations (default: int8 activations, as llama.cpp),
//      KIWI_BENCH_FAST_LAYOUT=0 to leave out Kiwi's fast weight layout (`--weight-layout fast`:
//      Q4_0 requantized to blocks of 128, lossy; a third engine on q4_0).
// Agreement with llama.cpp, per engine: greedy tokens equal before the first difference, and the
// top-1 share along llama.cpp's greedy tokens (each engine fed them in turn).
// Prints a table and writes bench/results/single-node.json.
import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { hugePagesEnv } from '../electron/engine/device/huge-pages.js';

const ROUNDS = Number(process.env.KIWI_BENCH_ROUNDS ?? 7);
const LONG = Number(process.env.KIWI_BENCH_LONG ?? 2048);
const THREADS = Number(process.env.KIWI_BENCH_THREADS ?? os.availableParallelism());
const QUANTS = (process.env.KIWI_BENCH_QUANTS ?? 'q4_0,q8_0,q4_k_m').split(',');
const DECODE_TOKENS = Number(process.env.KIWI_BENCH_DECODE ?? 32);
const FAST = process.env.KIWI_BENCH_FAST !== '0';
const FAST_LAYOUT = process.env.KIWI_BENCH_FAST_LAYOUT !== '0';
const PROMPT_TOKENS = 128;

type Engine = 'kiwi' | 'kiwi-fast' | 'llama.cpp';
type WorkerKind = 'kiwi' | 'llama.cpp' | 'kiwi-build';
type Layout = 'exact' | 'fast';
interface RoundResult {
  prefillTokPerS: number;
  decodeTokPerS: number;
  /** Decode tokens/s after a LONG-position prompt (undefined: LONG 0). */
  longDecodeTokPerS?: number;
  /** The greedy tokens after the prompt (DECODE_TOKENS + 1). */
  tokens: number[];
}
type Message =
  | { type: 'ready'; coldBuildMs?: number; warmBuildMs?: number; loadMs: number; peakRssBytes?: number }
  | { type: 'round'; result: RoundResult }
  | { type: 'rss'; peakRssBytes: number }
  | { type: 'agree'; argmax: number[] }
  | { type: 'error'; message: string };

/** The prompt: fixed ids inside every vocabulary (BOS + a cycle of ordinary tokens). */
function promptIds(): number[] {
  return [1, ...Array.from({ length: PROMPT_TOKENS - 1 }, (_, i) => 1000 + ((i * 7919) % 20000))];
}

/** The long decode's prompt: LONG positions. */
function longPromptIds(): number[] {
  return [1, ...Array.from({ length: LONG - 1 }, (_, i) => 1000 + ((i * 104729) % 20000))];
}

type Generate = (prompt: number[]) => Promise<[prefillMs: number, decodeMs: number, tokens: number[]]>;

/** One round of an engine: the short prompt's prefill and decode, then the decode after the long prompt. */
async function roundOf(generate: Generate): Promise<RoundResult> {
  const [prefillMs, decodeMs, tokens] = await generate(promptIds());
  const longMs = LONG > 0 ? (await generate(longPromptIds()))[1] : undefined;
  return {
    prefillTokPerS: (PROMPT_TOKENS * 1000) / prefillMs,
    decodeTokPerS: (DECODE_TOKENS * 1000) / decodeMs,
    ...(longMs !== undefined ? { longDecodeTokPerS: (DECODE_TOKENS * 1000) / longMs } : {}),
    tokens,
  };
}

// ---- child side ----------------------------------------------------------------------------

async function worker(engine: WorkerKind, modelPath: string, cacheDir: string, layout: Layout): Promise<void> {
  const send = (m: Message) => process.send!(m);
  let round: () => Promise<RoundResult>;
  /** Kiwi: the most likely token after the prompt and after each of `forced` fed in turn (teacher forcing). */
  let argmaxAlong: (forced: number[]) => Promise<number[]> = () => Promise.reject(new Error('only Kiwi follows forced tokens'));
  if (engine === 'kiwi-build' || engine === 'kiwi') {
    const { openGguf } = await import('../electron/engine/model/gguf/gguf-reader.js');
    const { modelShapeFromGguf } = await import('../electron/engine/runtime/decoder-shape.js');
    const { ShardCache } = await import('../electron/engine/runtime/shard-cache.js');
    const { Stage } = await import('../electron/engine/runtime/stage.js');
    const { StageChain } = await import('../electron/engine/runtime/stage-chain.js');
    const { argmax } = await import('../electron/engine/runtime/sampling.js');
    const file = await openGguf(modelPath);
    const shape = await modelShapeFromGguf(file, { maxPositions: Math.max(1024, LONG + DECODE_TOKENS + 1) });
    const cache = new ShardCache(cacheDir);
    const opts = { cache, threads: THREADS, accuracyLevel: FAST ? (4 as const) : (0 as const), weightLayout: layout };
    const plan = { start: 0, end: shape.blockCount, head: true };
    if (engine === 'kiwi-build') {
      // The cold build runs in its own process: its peak memory is not the serving process's.
      const t0 = performance.now();
      const cold = await Stage.open(file, shape, plan, opts);
      const coldBuildMs = performance.now() - t0;
      if (cold.origin.source !== 'built') throw new Error('the cold start found a shard in a fresh cache');
      await cold.dispose();
      send({ type: 'ready', coldBuildMs, loadMs: coldBuildMs, peakRssBytes: process.resourceUsage().maxRSS * 1024 });
      process.disconnect();
      return;
    }
    const t1 = performance.now();
    const stage = await Stage.open(file, shape, plan, opts);
    const warmBuildMs = performance.now() - t1;
    if (stage.origin.source !== 'cache') throw new Error('the warm start did not come from the shard cache');
    const chain = new StageChain([stage]);
    // Prefill (in PROMPT_TOKENS chunks), then DECODE_TOKENS greedy steps; returns [prefill ms, decode ms, greedy tokens].
    const generate: Generate = async (prompt) => {
      const caches = chain.newCaches(prompt.length + DECODE_TOKENS + 1);
      const p0 = performance.now();
      let logits: Float32Array = new Float32Array(0);
      for (let i = 0; i < prompt.length; i += PROMPT_TOKENS) logits = (await chain.step([{ tokens: prompt.slice(i, i + PROMPT_TOKENS), caches }]))[0]!;
      const prefillMs = performance.now() - p0;
      const tokens = [argmax(logits)];
      const d0 = performance.now();
      for (let i = 0; i < DECODE_TOKENS; i++) {
        logits = (await chain.step([{ tokens: [tokens.at(-1)!], caches }]))[0]!;
        tokens.push(argmax(logits));
      }
      return [prefillMs, performance.now() - d0, tokens];
    };
    argmaxAlong = async (forced) => {
      const caches = chain.newCaches(PROMPT_TOKENS + forced.length + 1);
      let logits = (await chain.step([{ tokens: promptIds(), caches }]))[0]!;
      const out = [argmax(logits)];
      for (const t of forced.slice(0, -1)) {
        logits = (await chain.step([{ tokens: [t], caches }]))[0]!;
        out.push(argmax(logits));
      }
      return out;
    };
    round = () => roundOf(generate);
    send({ type: 'ready', warmBuildMs, loadMs: warmBuildMs });
  } else {
    const { getLlama } = await import('node-llama-cpp');
    const t0 = performance.now();
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' as never });
    const model = await llama.loadModel({ modelPath });
    const context = await model.createContext({ contextSize: Math.max(1024, LONG + DECODE_TOKENS + 1), threads: THREADS, batchSize: PROMPT_TOKENS });
    const sequence = context.getSequence();
    const loadMs = performance.now() - t0;
    // Prefill, then DECODE_TOKENS greedy steps; returns [prefill ms, decode ms, greedy tokens].
    const generate: Generate = async (prompt) => {
      await sequence.clearHistory();
      const p0 = performance.now();
      let n = 0;
      let prefillMs = 0;
      let d0 = 0;
      const tokens: number[] = [];
      // The first yielded token marks the end of the prompt's evaluation (prefill + one sample).
      for await (const token of sequence.evaluate(prompt as never, { temperature: 0 })) {
        if (n === 0) {
          prefillMs = performance.now() - p0;
          d0 = performance.now();
        }
        tokens.push(Number(token));
        if (n++ >= DECODE_TOKENS) break;
      }
      return [prefillMs, performance.now() - d0, tokens];
    };
    round = () => roundOf(generate);
    send({ type: 'ready', loadMs });
  }
  process.on('message', (m: { cmd: 'round' | 'rss' | 'agree'; forced?: number[] }) => {
    if (m.cmd === 'agree') {
      argmaxAlong(m.forced ?? []).then(
        (argmax) => send({ type: 'agree', argmax }),
        (err: unknown) => send({ type: 'error', message: String((err as Error).stack ?? err) }),
      );
    } else if (m.cmd === 'round') {
      round().then(
        (result) => send({ type: 'round', result }),
        (err: unknown) => send({ type: 'error', message: String((err as Error).stack ?? err) }),
      );
    } else {
      send({ type: 'rss', peakRssBytes: process.resourceUsage().maxRSS * 1024 });
    }
  });
}

// ---- parent side ---------------------------------------------------------------------------

class Child {
  private queue: Array<(m: Message) => void> = [];
  constructor(readonly proc: ChildProcess) {
    proc.on('message', (m: Message) => this.queue.shift()?.(m));
  }
  next(): Promise<Message> {
    return new Promise((resolve, reject) => {
      this.queue.push((m) => (m.type === 'error' ? reject(new Error(m.message)) : resolve(m)));
      this.proc.once('exit', (code) => reject(new Error(`worker exited with ${code}`)));
    });
  }
  async ask(cmd: 'round' | 'rss' | 'agree', forced?: number[]): Promise<Message> {
    const reply = this.next();
    this.proc.send({ cmd, forced });
    return reply;
  }
}

function spawnWorker(engine: WorkerKind, modelPath: string, cacheDir: string, layout: Layout = 'exact'): Child {
  const proc = fork(fileURLToPath(import.meta.url), ['--worker', engine, modelPath, cacheDir, layout], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    // Kiwi's workers run with huge pages where `kiwi` itself would (KIWI_HUGE_PAGES=0: without).
    ...(engine !== 'llama.cpp' ? { env: hugePagesEnv() } : {}),
  });
  return new Child(proc);
}

/** How many greedy tokens two engines share before their first difference. */
function agreeing(a: number[], b: number[]): number {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function main(): Promise<void> {
  const { synthesizeModel } = await import('../electron/engine/model/synth/synth.js');
  const { resolveShape } = await import('../electron/engine/model/synth/shapes.js');
  const { SYNTH_QUANTS } = await import('../electron/engine/model/synth/synth.js');
  const { openGguf } = await import('../electron/engine/model/gguf/gguf-reader.js');
  const { measureHostBandwidth } = await import('../electron/engine/device/memory-bandwidth.js');

  const dir = await mkdtemp(join(os.tmpdir(), 'kiwi-bench-single-'));
  const rows: Record<string, unknown>[] = [];
  const children: Child[] = [];
  try {
    const bandwidth = await measureHostBandwidth({ threads: THREADS, rounds: 3 });
    for (const quant of QUANTS) {
      const type = SYNTH_QUANTS[quant];
      if (type === undefined) throw new Error(`unknown quant ${quant}`);
      const modelPath = join(dir, `llama-3.2-1b-${quant}.gguf`);
      await synthesizeModel({ shape: resolveShape('llama-3.2-1b'), quant: type, out: modelPath, seed: 1 });
      const file = await openGguf(modelPath);
      // Bytes read per decoded token: every matrix once (tied embeddings: the output projection).
      const weightBytes = file.tensors.filter((t) => t.dims.length === 2).reduce((a, t) => a + t.byteLength, 0);
      const floorTokPerS = (bandwidth.gbps * 1e9) / weightBytes;

      const builder = spawnWorker('kiwi-build', modelPath, join(dir, `shards-${quant}`));
      children.push(builder);
      const built = (await builder.next()) as Extract<Message, { type: 'ready' }>;
      const kiwi = spawnWorker('kiwi', modelPath, join(dir, `shards-${quant}`));
      children.push(kiwi);
      const kiwiReady = (await kiwi.next()) as Extract<Message, { type: 'ready' }>;
      const ref = spawnWorker('llama.cpp', modelPath, '');
      children.push(ref);
      const refReady = (await ref.next()) as Extract<Message, { type: 'ready' }>;
      // The fast layout changes Q4_0 only: elsewhere it is the exact engine again.
      let fast: { built: Extract<Message, { type: 'ready' }>; child: Child; ready: Extract<Message, { type: 'ready' }> } | undefined;
      if (FAST_LAYOUT && quant === 'q4_0') {
        const fastBuilder = spawnWorker('kiwi-build', modelPath, join(dir, `shards-${quant}`), 'fast');
        children.push(fastBuilder);
        const fastBuilt = (await fastBuilder.next()) as Extract<Message, { type: 'ready' }>;
        const child = spawnWorker('kiwi', modelPath, join(dir, `shards-${quant}`), 'fast');
        children.push(child);
        fast = { built: fastBuilt, child, ready: (await child.next()) as Extract<Message, { type: 'ready' }> };
      }
      const engines: Array<[Engine, Child, Extract<Message, { type: 'ready' }>]> = [['kiwi', kiwi, kiwiReady], ['llama.cpp', ref, refReady], ...(fast !== undefined ? [['kiwi-fast', fast.child, fast.ready] as [Engine, Child, Extract<Message, { type: 'ready' }>]] : [])];
      const results: Record<Engine, RoundResult[]> = { kiwi: [], 'kiwi-fast': [], 'llama.cpp': [] };
      const loadBefore = os.loadavg()[0]!;
      for (let r = 0; r < ROUNDS; r++) {
        // Rotate which engine goes first, so a burst of load does not always hit the same one.
        const order = engines.map((_, i) => engines[(i + r) % engines.length]!);
        for (const [engine, child] of order) {
          const m = await child.ask('round');
          if (m.type === 'round') results[engine].push(m.result);
        }
      }
      const loadAfter = os.loadavg()[0]!;
      // Top-1 agreement along llama.cpp's greedy tokens (each engine fed them in turn): free-running
      // greedy texts of random weights part within a few tokens (flat logits), so this is the measure.
      const llamaTokens = results['llama.cpp'][0]?.tokens ?? [];
      const along: Partial<Record<Engine, number[]>> = {};
      for (const [engine, child] of engines) {
        if (engine === 'llama.cpp') continue;
        along[engine] = ((await child.ask('agree', llamaTokens)) as Extract<Message, { type: 'agree' }>).argmax;
      }
      const share = (a: number[] | undefined, b: number[] | undefined): number | null =>
        a === undefined || b === undefined || b.length === 0 ? null : a.filter((t, i) => t === b[i]).length / b.length;
      const summary: Record<string, unknown> = {};
      for (const [engine, child, ready] of engines) {
        const rss = (await child.ask('rss')) as Extract<Message, { type: 'rss' }>;
        child.proc.kill();
        const rs = results[engine];
        const decode = rs.map((x) => x.decodeTokPerS);
        summary[engine] = {
          prefill_tok_s: median(rs.map((x) => x.prefillTokPerS)),
          decode_tok_s: median(decode),
          // The best round is the one least disturbed by neighbours (closest to a quiet machine).
          decode_tok_s_best: Math.max(...decode),
          prefill_tok_s_best: Math.max(...rs.map((x) => x.prefillTokPerS)),
          decode_tok_s_rounds: decode,
          long_decode_tok_s: LONG > 0 ? median(rs.map((x) => x.longDecodeTokPerS!)) : null,
          peak_rss_mb: rss.peakRssBytes / 2 ** 20,
          load_ms: ready.loadMs,
        };
      }
      const k = summary.kiwi as Record<string, number>;
      const l = summary['llama.cpp'] as Record<string, number>;
      const f = summary['kiwi-fast'] as Record<string, number> | undefined;
      const firstTokens = (e: Engine): number[] => results[e][0]?.tokens ?? [];
      rows.push({
        quant,
        threads: THREADS,
        kiwi_prefill_tok_s: k.prefill_tok_s,
        llama_prefill_tok_s: l.prefill_tok_s,
        prefill_ratio: k.prefill_tok_s! / l.prefill_tok_s!,
        kiwi_decode_tok_s: k.decode_tok_s,
        llama_decode_tok_s: l.decode_tok_s,
        decode_ratio: k.decode_tok_s! / l.decode_tok_s!,
        kiwi_decode_best_tok_s: k.decode_tok_s_best,
        llama_decode_best_tok_s: l.decode_tok_s_best,
        decode_best_ratio: k.decode_tok_s_best! / l.decode_tok_s_best!,
        prefill_best_ratio: k.prefill_tok_s_best! / l.prefill_tok_s_best!,
        // Per round, Kiwi over the llama.cpp round next to it: the pairs share the same neighbours.
        decode_ratio_rounds: results.kiwi.map((x, i) => x.decodeTokPerS / results['llama.cpp'][i]!.decodeTokPerS),
        kiwi_long_decode_tok_s: k.long_decode_tok_s,
        llama_long_decode_tok_s: l.long_decode_tok_s,
        long_decode_ratio: LONG > 0 ? k.long_decode_tok_s! / l.long_decode_tok_s! : null,
        long_positions: LONG,
        kiwi_peak_rss_mb: k.peak_rss_mb,
        llama_peak_rss_mb: l.peak_rss_mb,
        kiwi_cold_build_ms: built.coldBuildMs ?? null,
        kiwi_cold_build_peak_rss_mb: (built.peakRssBytes ?? 0) / 2 ** 20,
        kiwi_warm_build_ms: kiwiReady.warmBuildMs ?? null,
        llama_load_ms: refReady.loadMs,
        weight_mb: weightBytes / 2 ** 20,
        // Greedy tokens equal before the first difference (of DECODE_TOKENS + 1), first round.
        kiwi_llama_agree: agreeing(firstTokens('kiwi'), firstTokens('llama.cpp')),
        kiwi_llama_top1: share(along.kiwi, llamaTokens),
        ...(f !== undefined
          ? {
              fast_decode_tok_s: f.decode_tok_s,
              fast_decode_ratio: f.decode_tok_s! / l.decode_tok_s!,
              fast_decode_best_ratio: f.decode_tok_s_best! / l.decode_tok_s_best!,
              fast_prefill_ratio: f.prefill_tok_s! / l.prefill_tok_s!,
              fast_decode_ratio_rounds: results['kiwi-fast'].map((x, i) => x.decodeTokPerS / results['llama.cpp'][i]!.decodeTokPerS),
              fast_cold_build_ms: fast!.built.coldBuildMs ?? null,
              fast_peak_rss_mb: f.peak_rss_mb,
              fast_llama_agree: agreeing(firstTokens('kiwi-fast'), firstTokens('llama.cpp')),
              fast_kiwi_agree: agreeing(firstTokens('kiwi-fast'), firstTokens('kiwi')),
              fast_llama_top1: share(along['kiwi-fast'], llamaTokens),
              fast_kiwi_top1: share(along['kiwi-fast'], along.kiwi),
            }
          : {}),
        bandwidth_gbps: bandwidth.gbps,
        bandwidth_floor_tok_s: floorTokPerS,
        loadavg_1m: [loadBefore, loadAfter],
        engines: summary,
      });
      await rm(modelPath, { force: true });
    }
  } finally {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill();
    await rm(dir, { recursive: true, force: true });
  }

  const fmt = (v: unknown): string =>
    typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(v < 10 ? 2 : 1)) : Array.isArray(v) ? v.map(fmt).join('-') : String(v);
  const cols = [
    'quant', 'kiwi_prefill_tok_s', 'llama_prefill_tok_s', 'prefill_ratio', 'kiwi_decode_tok_s', 'llama_decode_tok_s', 'decode_ratio',
    'kiwi_decode_best_tok_s', 'llama_decode_best_tok_s', 'decode_best_ratio', 'prefill_best_ratio', 'kiwi_long_decode_tok_s', 'llama_long_decode_tok_s', 'long_decode_ratio', 'kiwi_peak_rss_mb', 'llama_peak_rss_mb', 'kiwi_cold_build_ms', 'kiwi_warm_build_ms', 'bandwidth_floor_tok_s', 'loadavg_1m',
  ];
  console.log(`threads ${THREADS}, ${ROUNDS} alternating rounds, medians (best = fastest round); prompt ${PROMPT_TOKENS}, decode ${DECODE_TOKENS}; long decode: after ${LONG} positions`);
  console.log(cols.join('\t'));
  for (const r of rows) console.log(cols.map((c) => fmt(r[c])).join('\t'));
  for (const r of rows) console.log(`${String(r.quant)} decode ratio per round: ${(r.decode_ratio_rounds as number[]).map((x) => x.toFixed(2)).join(' ')}; greedy tokens equal to llama.cpp's before the first difference: ${String(r.kiwi_llama_agree)}/${DECODE_TOKENS + 1}; top-1 along llama.cpp's tokens: ${fmt(r.kiwi_llama_top1)}`);
  for (const r of rows.filter((x) => x.fast_decode_tok_s !== undefined)) {
    console.log(
      `${String(r.quant)} fast layout: decode ${fmt(r.fast_decode_tok_s)} tok/s, ${fmt(r.fast_decode_ratio)}x llama.cpp (best rounds ${fmt(r.fast_decode_best_ratio)}x; per round ${(r.fast_decode_ratio_rounds as number[]).map((x) => x.toFixed(2)).join(' ')}), ` +
        `prefill ${fmt(r.fast_prefill_ratio)}x, cold build ${fmt(r.fast_cold_build_ms)} ms, peak RSS ${fmt(r.fast_peak_rss_mb)} MB; greedy tokens equal before the first difference: ${String(r.fast_llama_agree)}/${DECODE_TOKENS + 1} with llama.cpp, ${String(r.fast_kiwi_agree)}/${DECODE_TOKENS + 1} with exact Kiwi; top-1 along llama.cpp's tokens ${fmt(r.fast_llama_top1)} (exact Kiwi's top-1 there: ${fmt(r.fast_kiwi_top1)})`,
    );
  }
  const out = join(fileURLToPath(new URL('.', import.meta.url)), 'results');
  await mkdir(out, { recursive: true });
  const loadavg = os.loadavg();
  await writeFile(
    join(out, 'single-node.json'),
    `${JSON.stringify({ date: new Date().toISOString(), rounds: ROUNDS, threads: THREADS, prompt_tokens: PROMPT_TOKENS, decode_tokens: DECODE_TOKENS, long_positions: LONG, int8_activations: FAST, loadavg, rows }, null, 1)}\n`,
  );
  await stat(join(out, 'single-node.json'));
}

if (process.argv[2] === '--worker') {
  worker(process.argv[3] as WorkerKind, process.argv[4]!, process.argv[5]!, (process.argv[6] ?? 'exact') as Layout).catch((err: unknown) => {
    process.send!({ type: 'error', message: String((err as Error).stack ?? err) });
    process.exitCode = 1;
  });
} else {
  await main();
}
