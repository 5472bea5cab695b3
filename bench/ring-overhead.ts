// Per-token overhead of a ring without speculation (issue 16's target: per-token time of the ring
// <= compute-only time + the sum of the links' one-way delays + 2 ms per hop). For each model: one
// process (`kiwi serve`, the compute-only time), then a rendezvous + `kiwi host` + two members on
// loopback (3 stages, 3 hops round the ring) with the members' listeners direct, and behind a
// userspace delay proxy (test-support/delay-proxy.ts; this kernel has no netem) of 0 and 20 ms one
// way. A stream's decode time per token is measured through the OpenAI API (SSE, greedy, median of
// KIWI_BENCH_ROUNDS streams); the sum of one-way delays is what the proxies add (delay x ring links
// through a proxy; loopback's own latency counts as overhead); the overhead per hop =
// (ring ms/token - compute-only ms/token - sum of one-way delays) / 3. A second figure takes the
// links' one-way delay as measured through a proxy of the same delay (proxyOneWayMs: the proxy's
// own TCP hop through this process and its timer's precision), which is the link a ring gets here.
// Members run in this file's member mode (`kiwi join` that advertises the proxy's address), and
// every process runs without ICE: a UDP link would go round the TCP proxy.
// Models: stories260K ($KIWI_TEST_MODELS or /work/shared/models), and a `kiwi synth` Llama-family
// model (8 layers, width 512, Q8_0). 1 thread per process ($KIWI_BENCH_THREADS).
// Knobs: KIWI_BENCH_TOKENS (64), KIWI_BENCH_ROUNDS (5), KIWI_BENCH_DELAYS (0,20; "direct" rows always),
// KIWI_BENCH_MODELS (stories,synth); KIWI_STAGE_WORKER=0 (inherited by every process) runs stages
// on the main thread, which shows what the worker thread's two hops per stage cost.
// Run: npx tsx bench/ring-overhead.ts   Prints a table and writes bench/results/ring-overhead.json.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect, createServer, type AddressInfo } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { startDelayProxy } from '../electron/engine/test-support/delay-proxy.js';
import { decodeFrame, FrameType } from '../electron/engine/transport/frame-codec.js';
import { SecureChannel } from '../electron/engine/transport/secure-channel.js';
import { decodeStepFrame, encodeStepFrame } from '../electron/engine/transport/tensor-frame.js';
import { processSet, runProxiedMember, sseStream, type MemberConfig } from './ring-processes.js';

const TOKENS = Number(process.env.KIWI_BENCH_TOKENS ?? 64);
const ROUNDS = Number(process.env.KIWI_BENCH_ROUNDS ?? 5);
const THREADS = process.env.KIWI_BENCH_THREADS ?? '1';
const DELAYS_MS = (process.env.KIWI_BENCH_DELAYS ?? '0,20').split(',').filter((d) => d !== '').map(Number);
const HOPS = 3;
/** How long each setup's idle CPU is measured. */
const IDLE_MS = 3000;
const root = join(import.meta.dirname, '..');
const SYNTH = { name: 'overhead-synth', architecture: 'llama', blockCount: 8, embeddingLength: 512, headCount: 8, headCountKv: 4, feedForwardLength: 1536, vocabSize: 4096, contextLength: 1024 };

interface Row {
  model: string;
  case: string;
  delayMs: number | null;
  msPerToken: number;
  computeMsPerToken: number;
  /** The one-way delay the proxies add over the ring: delay x ring links through a proxy. */
  oneWaySumMs: number;
  overheadPerHopMs: number;
  /** The same with the links' one-way delay as measured through a proxy of that delay (its own hop and timer included). */
  measuredOneWaySumMs?: number;
  overheadPerHopBeyondMeasuredMs?: number;
  /** The ring links' RTTs and kinds as the host measured them when they came up. */
  linkRttsMs: number[];
  linkKinds?: string[];
  proxiedLinks?: number;
  /** CPU ms per token summed over the setup's processes, and the ring's extra per hop over one process. */
  cpuMsPerToken: number;
  cpuOverheadPerHopMs: number;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * What one hop's software costs in one process, per one-token decode frame of width `hidden` (us,
 * median of 2000): encode the step frame (f32, metadata JSON), seal it (chacha20-poly1305), open it,
 * decode it (JSON, checks), and a macrotask hop (setImmediate), as a member does per step.
 */
async function hopSoftwareUs(hidden: number): Promise<Record<string, number>> {
  const key = new Uint8Array(32).fill(7);
  const a = new SecureChannel({ sendKey: key, receiveKey: key });
  const b = new SecureChannel({ sendKey: key, receiveKey: key });
  const hiddenState = new Float32Array(hidden).map((_, i) => Math.sin(i));
  const metadata = { epoch: '1', step: '17', rows: JSON.stringify([{ id: 3, pos: 40, cap: 256 }]), 'ms.0-2': '1.234' };
  const parts: Record<string, number[]> = { encode: [], seal: [], open: [], decode: [], setImmediate: [] };
  for (let i = 0; i < 2000; i++) {
    let t = performance.now();
    const frame = await encodeStepFrame({ metadata, tensor: { kind: 'hidden', hidden: hiddenState, dims: [1, 1, hidden] } }, { encoding: 'f32', zstd: false });
    parts.encode!.push(performance.now() - t);
    t = performance.now();
    const sealed = a.seal(FrameType.DATA, frame);
    parts.seal!.push(performance.now() - t);
    t = performance.now();
    const opened = b.open(decodeFrame(sealed));
    parts.open!.push(performance.now() - t);
    t = performance.now();
    await decodeStepFrame(opened, { maxBytes: 1 << 20, hidden });
    parts.decode!.push(performance.now() - t);
    t = performance.now();
    await new Promise((r) => setImmediate(r));
    parts.setImmediate!.push(performance.now() - t);
  }
  return Object.fromEntries(Object.entries(parts).map(([k, v]) => [k, median(v) * 1000]));
}

/**
 * One-way ms of a link through a delay proxy of `delayMs`, as the ring's links get it (median of
 * 100 small chunks, a little apart, between two sockets in this process; the proxy's own TCP hop
 * and timer precision included): what "the link's one-way delay" is here.
 */
async function proxyOneWayMs(delayMs: number): Promise<number> {
  const arrivals: number[] = [];
  const server = createServer((s) => {
    s.setNoDelay(true);
    // Newline-ended send times: chunks that arrive together in one read are still counted apart.
    createInterface({ input: s }).on('line', (sentAt) => arrivals.push(performance.now() - Number(sentAt)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const proxy = await startDelayProxy({ target: { host: '127.0.0.1', port: (server.address() as AddressInfo).port }, delayMs });
  const client = connect({ host: '127.0.0.1', port: proxy.port });
  client.setNoDelay(true);
  await new Promise((r) => client.once('connect', r));
  for (let i = 0; i < 100; i++) {
    client.write(`${performance.now()}\n`);
    await new Promise((r) => setTimeout(r, 5 + (i % 7)));
  }
  await new Promise((r) => setTimeout(r, delayMs + 50));
  client.destroy();
  await proxy.close();
  await new Promise((r) => server.close(r));
  return median(arrivals);
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-overhead-'));
  const env = { ...process.env, KIWI_CACHE_DIR: join(dir, 'cache') };
  const { children, proxies, spawnNode, kiwi, stopAll } = processSet(root, env);

  /** Decode ms per token of one greedy SSE stream (first token excluded), and its tokens. */
  const stream = async (url: string, modelId: string, prompt: string, maxTokens: number): Promise<{ msPerToken: number; tokens: number }> => {
    const s = await sseStream(url, modelId, prompt, maxTokens);
    if (s.tokens < 2) throw new Error(`a stream of ${s.tokens} tokens`);
    return { msPerToken: s.decodeMs / (s.tokens - 1), tokens: s.tokens };
  };
  /** CPU time (user + system, every thread) of the running children so far, ms (Linux /proc, 10 ms ticks). */
  const childrenCpuMs = async (): Promise<number> => {
    let ticks = 0;
    for (const c of children) {
      if (c.exitCode !== null || c.pid === undefined) continue;
      const stat = await readFile(`/proc/${c.pid}/stat`, 'utf8').catch(() => '');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11] ?? 0) + Number(fields[12] ?? 0);
    }
    return ticks * 10;
  };
  /**
   * Median decode ms per token; and CPU ms per token over every process of the setup beyond what
   * they use idle (what a hop costs in work, which a loaded machine's waits for a core do not inflate).
   */
  const measure = async (url: string, modelId: string): Promise<{ msPerToken: number; cpuMsPerToken: number }> => {
    await stream(url, modelId, 'warm up', 8);
    // What the processes burn while idle (timers, heartbeats, monitors), taken out of the streams' CPU.
    const idle0 = await childrenCpuMs();
    await new Promise((r) => setTimeout(r, IDLE_MS));
    const idleRate = ((await childrenCpuMs()) - idle0) / IDLE_MS;
    const runs: number[] = [];
    let tokens = 0;
    const cpu0 = await childrenCpuMs();
    const t0 = performance.now();
    for (let i = 0; i < ROUNDS; i++) {
      const r = await stream(url, modelId, 'Once upon a time', TOKENS);
      runs.push(r.msPerToken);
      tokens += r.tokens;
    }
    const busy = (await childrenCpuMs()) - cpu0 - idleRate * (performance.now() - t0);
    return { msPerToken: median(runs), cpuMsPerToken: busy / tokens };
  };

  const listenerPort = async (pid: number): Promise<number> => {
    for (let i = 0; i < 200; i++) {
      const ports = execFileSync('ss', ['-ltnpH'], { encoding: 'utf8' }).split('\n')
        .filter((l) => l.includes(`pid=${pid},`))
        .map((l) => Number(l.trim().split(/\s+/)[3]?.split(':').pop()));
      if (ports.length === 1 && Number.isInteger(ports[0])) return ports[0]!;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`member ${pid} never listened`);
  };

  /** A 3-stage ring; delay null: members' listeners direct, else each behind a proxy of that one-way delay. */
  const startRing = async (model: string, delayMs: number | null): Promise<{ url: string; rtts: number[]; kinds: string[]; proxied: number }> => {
    const rv = kiwi(['rendezvous', '--host', '127.0.0.1', '--port', '0']);
    const rvUrl = (await rv.event('listening')).url as string;
    const host = kiwi(['host', '--model', model, '--port', '0', '--rendezvous', rvUrl, '--auto-approve', '--expect', '2', '--rendezvous-host', '127.0.0.1',
      '--listen', '127.0.0.1', '--no-ice', '--replan-drift', 'off', '--activations', 'f32', '--zstd', 'off', '--threads', THREADS]);
    const code = (await host.event('session')).code as string;
    for (const name of ['m1', 'm2']) {
      if (delayMs === null) {
        kiwi(['join', code, '--rendezvous', rvUrl, '--name', name, '--listen', '127.0.0.1', '--no-ice', '--model', model, '--threads', THREADS]);
        continue;
      }
      let pid = 0;
      const proxy = await startDelayProxy({ target: async () => ({ host: '127.0.0.1', port: await listenerPort(pid) }), delayMs });
      proxies.push(proxy);
      const cfg: MemberConfig = { code, rendezvous: rvUrl, name, model, threads: Number(THREADS), advertise: proxy.url };
      pid = spawnNode(['bench/ring-overhead.ts', '--member', JSON.stringify(cfg)]).child.pid!;
    }
    const url = (await host.event('serving')).url as string;
    const linkRtts = (): number[] => host.events.filter((e) => e.event === 'link' && typeof e.rtt_ms === 'number').map((e) => Number(e.rtt_ms));
    for (let i = 0; i < 200 && linkRtts().length < HOPS; i++) await new Promise((r) => setTimeout(r, 100));
    // The latest RTT of each link (a link reports again as it measures).
    const byPair = new Map<string, { rtt: number; kind: string }>();
    for (const e of host.events) if (e.event === 'link' && typeof e.rtt_ms === 'number') byPair.set(`${String(e.a)}-${String(e.b)}`, { rtt: Number(e.rtt_ms), kind: String(e.kind) });
    // Ring links through a proxy: each is one connection a proxy holds open (a member's listener serves ring links only).
    const proxied = proxies.reduce((n, p) => n + p.connections, 0);
    return { url, rtts: [...byPair.values()].map((l) => l.rtt), kinds: [...byPair.values()].map((l) => l.kind), proxied };
  };

  const stories = join(process.env.KIWI_TEST_MODELS ?? '/work/shared/models', 'stories260K.gguf');
  const synth = join(dir, 'overhead-synth.gguf');
  execFileSync(process.execPath, ['--import', 'tsx', 'electron/kiwi.ts', 'synth', '--shape', JSON.stringify(SYNTH), '--quant', 'q8_0', '--out', synth, '--json'], { cwd: root, env, stdio: 'ignore' });
  const which = (process.env.KIWI_BENCH_MODELS ?? 'stories,synth').split(',');
  const models = [...(which.includes('stories') && existsSync(stories) ? [stories] : []), ...(which.includes('synth') ? [synth] : [])];

  const rows: Row[] = [];
  const t0 = performance.now();
  try {
    for (const model of models) {
      const modelId = model.split('/').pop()!.replace(/\.gguf$/i, '');
      const serve = kiwi(['serve', '--model', model, '--port', '0', '--threads', THREADS]);
      const single = await measure((await serve.event('serving')).url as string, modelId);
      const compute = single.msPerToken;
      await stopAll();
      rows.push({ model: modelId, case: 'one process (compute only)', delayMs: null, msPerToken: compute, computeMsPerToken: compute, oneWaySumMs: 0, overheadPerHopMs: 0, linkRttsMs: [], cpuMsPerToken: single.cpuMsPerToken, cpuOverheadPerHopMs: 0 });
      for (const delayMs of [null, ...DELAYS_MS]) {
        const ring = await startRing(model, delayMs);
        const m = await measure(ring.url, modelId);
        const ms = m.msPerToken;
        await stopAll();
        // The delay the proxies add (loopback's own latency counts as overhead: it is the links' cost here).
        const oneWay = (delayMs ?? 0) * ring.proxied;
        const measuredOneWay = delayMs === null ? 0 : (await proxyOneWayMs(delayMs)) * ring.proxied;
        rows.push({
          model: modelId, case: delayMs === null ? 'ring 3 stages, direct' : `ring 3 stages, proxy ${delayMs} ms`, delayMs, msPerToken: ms, computeMsPerToken: compute,
          oneWaySumMs: oneWay, overheadPerHopMs: (ms - compute - oneWay) / HOPS,
          measuredOneWaySumMs: measuredOneWay, overheadPerHopBeyondMeasuredMs: (ms - compute - measuredOneWay) / HOPS,
          linkRttsMs: ring.rtts, linkKinds: ring.kinds, proxiedLinks: ring.proxied,
          cpuMsPerToken: m.cpuMsPerToken, cpuOverheadPerHopMs: (m.cpuMsPerToken - single.cpuMsPerToken) / HOPS,
        });
        console.error(JSON.stringify(rows.at(-1)));
      }
    }
  } finally {
    await stopAll();
    await rm(dir, { recursive: true, force: true });
  }
  const software = { hidden64: await hopSoftwareUs(64), hidden512: await hopSoftwareUs(512) };
  const load = loadavg().map((l) => l.toFixed(2)).join(' ');
  console.log(`${TOKENS} tokens per stream, median of ${ROUNDS}, ${THREADS} thread(s) per process, loopback; load average at the end ${load}; ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  console.log('| model | case | ms/token | compute-only ms/token | added one-way delay ms (links proxied) | overhead per hop ms | measured one-way sum ms | overhead per hop beyond it ms | CPU ms/token (all processes) | CPU overhead per hop ms | link RTTs ms (kind) | within 2 ms/hop |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    const ring = r.linkRttsMs.length > 0;
    const links = r.linkRttsMs.map((x, i) => `${x.toFixed(1)}${r.linkKinds?.[i] === 'direct' ? '' : ` ${r.linkKinds?.[i] ?? '?'}`}`).join(', ');
    console.log(`| ${r.model} | ${r.case} | ${r.msPerToken.toFixed(2)} | ${r.computeMsPerToken.toFixed(2)} | ${ring ? `${r.oneWaySumMs.toFixed(0)} (${r.proxiedLinks ?? 0})` : '-'} | ${ring ? r.overheadPerHopMs.toFixed(2) : '-'} | ${r.measuredOneWaySumMs?.toFixed(1) ?? '-'} | ${r.overheadPerHopBeyondMeasuredMs?.toFixed(2) ?? '-'} | ${r.cpuMsPerToken.toFixed(2)} | ${ring ? r.cpuOverheadPerHopMs.toFixed(2) : '-'} | ${links || '-'} | ${ring ? (r.overheadPerHopMs <= 2 ? 'yes' : 'no') : '-'} |`);
  }
  console.log('\none hop in software, us per one-token frame (median of 2000, one process):');
  for (const [width, parts] of Object.entries(software)) console.log(`  ${width}: ${Object.entries(parts).map(([k, v]) => `${k} ${v.toFixed(1)}`).join(', ')}`);
  await mkdir(join(root, 'bench', 'results'), { recursive: true });
  await writeFile(join(root, 'bench', 'results', 'ring-overhead.json'), JSON.stringify({ tokens: TOKENS, rounds: ROUNDS, threads: THREADS, load, rows, software }, null, 2));
}

if (process.argv[2] === '--member') await runProxiedMember(JSON.parse(process.argv[3] ?? '{}') as MemberConfig);
else await main();
