// The ring against one process on the same model: `kiwi serve` vs a rendezvous + `kiwi host` + two
// members on loopback, each a real process, measured through the OpenAI API (SSE): time to first
// token and tokens/s of one stream, aggregate tokens/s of 4 concurrent streams.
//   - loopback rows: the activation encodings between stages (f32, f16, int8, int8 + zstd);
//   - delayed rows: every ring link through a userspace delay proxy (test-support/delay-proxy.ts,
//     standing in for `tc netem`, which this kernel lacks) at 1, 10 and 40 ms one way: f32;
//     `--activations auto`, where the host chooses per link (pipeline/link-wire.ts) from the
//     link's kind and RTT; and the same policy given a throughput measured by
//     transport/link-throughput.ts over an encrypted link through a proxy of the same delay (what
//     each session link measures as it comes up; all links are alike here, so that choice runs as a fixed wire).
// Next to each measured ms/token: the planner's prediction (circuit_ms of planFleet, with the block
// probe's block_ms, step_ms and head_ms on this machine as every device's, the ring links' one-way
// times (half their RTTs) and, for a ring, the per-hop cost beyond those that the host measured
// from its own decode steps during the warm-up stream (status drift.hop_ms; planner/plan.ts prices
// it per edge), taken before the timed stream); "no hop" is the same without it. Per ring, each
// stage's predicted ms against the mean the host measured over the timed stream (members' compute;
// the host's own stages).
// Members run in this file's member mode (below) so that they can advertise their proxy instead of
// their own listener (MemberSession's `advertise`); they are otherwise what `kiwi join` runs.
// Model: $KIWI_MODEL, else a `kiwi synth` model written to a temporary directory: the named shape
// $KIWI_BENCH_SHAPE in $KIWI_BENCH_QUANT (default q4_0; llama-3.2-1b is a shape whose stage times
// issue 14's prediction error is judged on), else a small Llama-family model (8 layers, width 512,
// Q8_0) where a step's fixed costs dominate and the wires and links stand out. Threads per process:
// $KIWI_BENCH_THREADS (default 1, so three ring processes do not fight over a small machine's cores
// more than one process does).
// One process and the first loopback ring run side by side: both stay up and their streams
// alternate for KIWI_BENCH_ROUNDS rounds (medians, with each round's figures in the JSON), since
// this machine's speed drifts by a third over minutes and one stream each would compare two moments.
// Knobs: KIWI_BENCH_SHAPE, KIWI_BENCH_QUANT (above), KIWI_BENCH_TOKENS (64), KIWI_BENCH_ROUNDS (5), KIWI_BENCH_DELAYS (1,10,40), KIWI_BENCH_LOOPBACK (f32,f16,int8,int8+zstd; 0: none).
// Run: npx tsx bench/ring.ts   Prints a table and writes bench/results/ring.json.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { summarizeModel } from '../electron/engine/model/model-summary.js';
import { chooseLinkWire } from '../electron/engine/pipeline/link-wire.js';
import { modelSizesFromGguf } from '../electron/engine/planner/model-sizes.js';
import { deviceCosts, stageCost } from '../electron/engine/planner/cost-model.js';
import type { DeviceSpec } from '../electron/engine/planner/fleet.js';
import { planFleet } from '../electron/engine/planner/plan.js';
import { blockShapeOf, measureBlock } from '../electron/engine/runtime/block-probe.js';
import { startDelayProxy } from '../electron/engine/test-support/delay-proxy.js';
import { measureThroughput } from '../electron/engine/transport/link-throughput.js';
import { openSecureLink, type SecureLink } from '../electron/engine/transport/secure-link.js';
import { encodeStepFrame, type ActivationEncoding, type WireOptions } from '../electron/engine/transport/tensor-frame.js';
import { dialDirect, listenDirect, type WsLink } from '../electron/engine/transport/ws.js';
import { processSet, runProxiedMember, sseStream, type MemberConfig, type Spawned, type Stream } from './ring-processes.js';

const TOKENS = Number(process.env.KIWI_BENCH_TOKENS ?? 64);
const ROUNDS = Math.max(1, Number(process.env.KIWI_BENCH_ROUNDS ?? 5));
const THREADS = process.env.KIWI_BENCH_THREADS ?? '1';
const DELAYS_MS = (process.env.KIWI_BENCH_DELAYS ?? '1,10,40').split(',').filter((d) => d !== '').map(Number);
/** The loopback rows' wires (default f32,f16,int8,int8+zstd); KIWI_BENCH_LOOPBACK=0 skips them. */
const LOOPBACK_WIRES = process.env.KIWI_BENCH_LOOPBACK === '0' ? [] : (process.env.KIWI_BENCH_LOOPBACK ?? 'f32,f16,int8,int8+zstd').split(',');
const root = join(import.meta.dirname, '..');
const SHAPE = { name: 'bench-ring', architecture: 'llama', blockCount: 8, embeddingLength: 512, headCount: 8, headCountKv: 4, feedForwardLength: 1536, vocabSize: 4096, contextLength: 1024 };
/** The prompts are a few tokens: the frame shape the auto policy prices. */
const PREFILL_TOKENS = 8;

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-ring-'));
  const env = { ...process.env, KIWI_CACHE_DIR: join(dir, 'cache') };
  const { proxies, spawnNode, kiwi, stopAll } = processSet(root, env);
  const model = process.env.KIWI_MODEL ?? join(dir, 'bench-ring.gguf');
  if (process.env.KIWI_MODEL === undefined) {
    const named = process.env.KIWI_BENCH_SHAPE;
    const synth = named !== undefined ? ['--shape', named, '--quant', process.env.KIWI_BENCH_QUANT ?? 'q4_0'] : ['--shape', JSON.stringify(SHAPE), '--quant', 'q8_0'];
    execFileSync(process.execPath, ['--import', 'tsx', 'electron/kiwi.ts', 'synth', ...synth, '--out', model, '--json'], { cwd: root, env, stdio: ['ignore', 'ignore', 'ignore'] });
  }
  const modelId = model.split('/').pop()!.replace(/\.gguf$/i, '');
  const file = await openGguf(model);
  const summary = summarizeModel(file);
  const hidden = summary.embedding_length;

  /** The host's status listing (its `status` stdin command). */
  const askStatus = async (p: Spawned): Promise<Record<string, unknown>> => {
    const seen = p.events.length;
    p.child.stdin!.write('status\n');
    return p.event('status', (e) => p.events.indexOf(e) >= seen);
  };
  const stream = (url: string, prompt: string, maxTokens = TOKENS): Promise<Stream> => sseStream(url, modelId, prompt, maxTokens);

  interface Row {
    case: string;
    delayMs: number | null;
    wire: string;
    /** What the auto policy chose per ring link, when this row is the auto one. */
    /** The auto row: what each stage sends on, as the host chose it (from each link's kind and RTT). */
    hostChoices?: Array<{ stage: string; wire: string }>;
    /** The auto row: what the policy makes of each ring link with the probe's throughput too. */
    probeChoices?: Array<{ link: string; kind: string; rttMs: number; throughputMBps: number; choice: string }>;
    ttftMs: number;
    tokensPerS: number;
    msPerToken: number;
    predictedMsPerToken: number | null;
    /** The same prediction without the per-hop term. */
    predictedNoHopMsPerToken: number | null;
    /** A ring: the per-hop cost beyond the one-way times the host measured in the warm-up stream (ms), priced per edge. */
    hopMs?: number | null;
    /** A ring: each stage's predicted ms against the host's measured mean over the timed stream. */
    stages?: Array<{ range: string; head: boolean; predictedMs: number; measuredMs: number | null }>;
    aggregate4TokensPerS: number;
    /** The side-by-side rows: each round's one-stream tok/s and four-stream aggregate (the row holds their medians). */
    rounds?: Array<{ tokensPerS: number; aggregate4TokensPerS: number }>;
  }
  type Measured = Omit<Row, 'delayMs' | 'wire' | 'predictedMsPerToken' | 'predictedNoHopMsPerToken'> & { warmStatus?: Record<string, unknown>; timedStatus?: Record<string, unknown> };
  /** With a ring's host: its status after the warm-up stream (the hop figure) and after the timed one (stage times). */
  const measure = async (label: string, url: string, host?: Spawned): Promise<Measured> => {
    // Long enough for the host's hop figure (stage-drift-monitor.ts HOP_MIN_STEPS decode steps).
    await stream(url, 'warm up the caches', 24);
    const warmStatus = host !== undefined ? await askStatus(host) : undefined;
    const one = await stream(url, 'Once upon a time');
    const timedStatus = host !== undefined ? await askStatus(host) : undefined;
    const t0 = performance.now();
    const four = await Promise.all(['a', 'b', 'c', 'd'].map((p) => stream(url, `story ${p}`)));
    const wall = (performance.now() - t0) / 1000;
    const tokensPerS = ((one.tokens - 1) * 1000) / one.decodeMs;
    return {
      case: label, ttftMs: one.ttftMs, tokensPerS, msPerToken: 1000 / tokensPerS, aggregate4TokensPerS: four.reduce((n, s) => n + s.tokens, 0) / wall,
      ...(warmStatus !== undefined ? { warmStatus } : {}), ...(timedStatus !== undefined ? { timedStatus } : {}),
    };
  };

  // The planner's prediction: every device (all on this machine) at the measured block and step time.
  const block = await measureBlock(blockShapeOf(file), { threads: Number(THREADS), runs: 15 });
  const sizes = modelSizesFromGguf(file);
  const device = (name: string, hopMs?: number): DeviceSpec => ({ name, memoryBytes: Math.floor(totalmem() / 3), blockMs: block.blockMs, stepMs: block.stepMs, ...(block.headMs !== undefined ? { headMs: block.headMs } : {}), ...(hopMs !== undefined ? { hopMs } : {}) });
  const predict = (names: string[], rtts: Array<{ a: string; b: string; rttMs: number }>, hopMs?: number): number =>
    planFleet({ model: sizes, context: 4096, concurrency: 1, devices: names.map((name) => device(name, hopMs)), rtts }).circuit;
  /** Every device alike: a stage's predicted ms is the cost model's for its layers (and head). */
  const [stageCosts] = deviceCosts({ model: sizes, context: 4096, concurrency: 1, devices: [device('x')], rtts: [] }, 'measured');

  /** Throughput and RTT of an encrypted WebSocket link through a delay proxy (what a session's link probe would see). */
  const probeThroughDelay = async (delayMs: number | null): Promise<{ throughputMBps: number; rttMs: number }> => {
    const secret = { secret: randomBytes(32), context: 'bench-probe' };
    let accept!: (l: WsLink) => void;
    const inbound = new Promise<WsLink>((r) => (accept = r));
    const listener = await listenDirect({ host: '127.0.0.1', maxPayloadBytes: 4 << 20, onLink: (l) => accept(l) });
    const proxy = delayMs !== null ? await startDelayProxy({ target: { host: '127.0.0.1', port: listener.port }, delayMs }) : undefined;
    const out = await dialDirect(proxy?.url ?? `ws://127.0.0.1:${listener.port}`, { maxPayloadBytes: 4 << 20, timeoutMs: 5000 });
    const [a, b]: [SecureLink, SecureLink] = await Promise.all([
      openSecureLink(out, { role: 'initiator', secret, timeoutMs: 5000 }),
      inbound.then((l) => openSecureLink(l, { role: 'responder', secret, timeoutMs: 5000 })),
    ]);
    const pings: number[] = [];
    for (let i = 0; i < 3; i++) pings.push(await a.ping(30_000));
    const rttMs = Math.min(...pings);
    const r = await measureThroughput(a, rttMs, 30_000);
    a.close();
    b.close();
    await proxy?.close();
    await listener.close();
    return { throughputMBps: r.throughputMBps, rttMs };
  };

  /** The TCP port member `pid` listens on (its direct listener), once it has one. */
  const listenerPort = async (pid: number): Promise<number> => {
    for (let i = 0; i < 100; i++) {
      const ports = execFileSync('ss', ['-ltnpH'], { encoding: 'utf8' }).split('\n')
        .filter((l) => l.includes(`pid=${pid},`))
        .map((l) => Number(l.trim().split(/\s+/)[3]?.split(':').pop()));
      if (ports.length === 1 && Number.isInteger(ports[0])) return ports[0]!;
      if (ports.length > 1) throw new Error(`member ${pid} listens on several ports: ${ports.join(', ')}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`member ${pid} never listened`);
  };

  interface Ring {
    url: string;
    host: Spawned;
    members: Spawned[];
    links: Array<{ a: number; b: number; kind: string; rttMs: number }>;
    /** What each stage sends to the next, as the host chose it (stage-ready events). */
    stageWires: Array<{ peer: number; name: string; wire: string }>;
  }
  const wireArgs = (w: WireOptions): string[] => ['--activations', w.encoding, '--zstd', w.zstd ? 'on' : 'off'];
  const wireName = (w: WireOptions): string => `${w.encoding}${w.zstd ? '+zstd' : ''}`;
  /** A rendezvous, a host (with these --activations/--zstd flags) and two members; with a delay, each member behind its own delay proxy. */
  const startRing = async (hostWire: string[], delayMs: number | null): Promise<Ring> => {
    const rv = kiwi(['rendezvous', '--host', '127.0.0.1', '--port', '0']);
    const rvUrl = (await rv.event('listening')).url as string;
    const host = kiwi(['host', '--model', model, '--port', '0', '--rendezvous', rvUrl, '--auto-approve', '--expect', '2', '--rendezvous-host', '127.0.0.1',
      // The plan stays the one its prediction column is about (drift re-planning would change it mid-run);
      // no ICE: a UDP link would go round the delay proxy (TCP).
      '--listen', '127.0.0.1', '--no-ice', '--replan-drift', 'off', ...hostWire, '--threads', THREADS]);
    const code = (await host.event('session')).code as string;
    const members: Spawned[] = [];
    for (const name of ['m1', 'm2']) {
      if (delayMs === null) {
        members.push(kiwi(['join', code, '--rendezvous', rvUrl, '--name', name, '--listen', '127.0.0.1', '--model', model, '--threads', THREADS]));
        continue;
      }
      let pid = 0;
      const proxy = await startDelayProxy({ target: async () => ({ host: '127.0.0.1', port: await listenerPort(pid) }), delayMs });
      proxies.push(proxy);
      const cfg: MemberConfig = { code, rendezvous: rvUrl, name, model, threads: Number(THREADS), advertise: proxy.url };
      const m = spawnNode(['bench/ring.ts', '--member', JSON.stringify(cfg)]);
      pid = m.child.pid!;
      members.push(m);
    }
    const url = (await host.event('serving')).url as string;
    // Every ring link up (the host reports all three, member pairs included) with its RTT.
    for (let i = 0; i < 100 && host.events.filter((e) => e.event === 'link' && e.rtt_ms !== undefined).length < 3; i++) await new Promise((r) => setTimeout(r, 100));
    const links = host.events.filter((e) => e.event === 'link' && e.rtt_ms !== undefined).map((e) => ({ a: Number(e.a), b: Number(e.b), kind: String(e.kind), rttMs: Number(e.rtt_ms) }));
    const stageWires = host.events.filter((e) => e.event === 'stage-ready').map((e) => ({ peer: Number(e.peer), name: String(e.name), wire: String(e.wire) }));
    return { url, host, members, links, stageWires };
  };

  const plannerNames = ['host', 'm1', 'm2'];
  const predictFor = (ring: Ring, m: Measured): Pick<Row, 'predictedMsPerToken' | 'predictedNoHopMsPerToken' | 'hopMs' | 'stages'> => {
    // The host is peer 0; the members' peer numbers follow (which is m1 does not matter: all devices are alike).
    const peers = [...new Set(ring.links.flatMap((l) => [l.a, l.b]))].sort((x, y) => x - y);
    const nameOf = (p: number): string => plannerNames[peers.indexOf(p)] ?? `peer-${p}`;
    const rtts = ring.links.map((l) => ({ a: nameOf(l.a), b: nameOf(l.b), rttMs: l.rttMs }));
    const hop = (m.warmStatus?.drift as { hopMs?: number | null } | undefined)?.hopMs ?? null;
    // The host's plan (its division); each stage's measured mean over the timed stream.
    const plan = (m.timedStatus?.plan ?? {}) as { stages?: Array<{ start: number; end: number; head: boolean }> };
    const timing = (m.timedStatus?.timing ?? {}) as { meanHostMs?: number | null; meanStageMs?: Record<string, number> };
    const stages = (plan.stages ?? []).map((s) => ({
      range: `${s.start}-${s.end}`, head: s.head, predictedMs: stageCost(stageCosts!, s.end - s.start, s.head),
      measuredMs: (s.head ? timing.meanHostMs : timing.meanStageMs?.[`${s.start}-${s.end}`]) ?? null,
    }));
    return { predictedMsPerToken: predict(plannerNames, rtts, hop ?? undefined), predictedNoHopMsPerToken: predict(plannerNames, rtts), hopMs: hop, stages };
  };
  const strip = ({ warmStatus: _w, timedStatus: _t, ...row }: Measured): Omit<Measured, 'warmStatus' | 'timedStatus'> => row;
  /** Rounds of one case into one: medians of the streams' figures, the middle round's statuses (its stage times), each round kept. */
  const combine = (ms: Measured[]): Measured & Pick<Row, 'rounds'> => {
    const byRate = [...ms].sort((a, b) => a.tokensPerS - b.tokensPerS);
    const mid = byRate[(byRate.length - 1) >> 1]!;
    const aggregate = [...ms].map((m) => m.aggregate4TokensPerS).sort((a, b) => a - b)[(ms.length - 1) >> 1]!;
    return { ...mid, aggregate4TokensPerS: aggregate, rounds: ms.map((m) => ({ tokensPerS: m.tokensPerS, aggregate4TokensPerS: m.aggregate4TokensPerS })) };
  };

  const rows: Row[] = [];
  const t0 = performance.now();
  try {
    const loopback = LOOPBACK_WIRES.map((w) => ({ label: `ring 3 stages, ${w}`, encoding: w.replace('+zstd', '') as ActivationEncoding, zstd: w.endsWith('+zstd') }));
    {
      // Side by side: one process and the first loopback ring, both up, streams alternating by round.
      const serve = kiwi(['serve', '--model', model, '--port', '0', '--threads', THREADS]);
      const serveUrl = (await serve.event('serving')).url as string;
      const first = loopback[0];
      const ring = first !== undefined ? await startRing(wireArgs(first), null) : undefined;
      const alone: Measured[] = [];
      const ringed: Measured[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        const order = r % 2 === 0 ? (['alone', 'ring'] as const) : (['ring', 'alone'] as const);
        for (const which of order) {
          if (which === 'alone') alone.push(await measure('one process (kiwi serve)', serveUrl));
          else if (ring !== undefined) ringed.push(await measure(first!.label, ring.url, ring.host));
        }
      }
      rows.push({ ...strip(combine(alone)), delayMs: null, wire: '-', predictedMsPerToken: predict(['host'], []), predictedNoHopMsPerToken: predict(['host'], []) });
      if (ring !== undefined) {
        const m = combine(ringed);
        rows.push({ ...strip(m), delayMs: null, wire: wireName(first!), ...predictFor(ring, m) });
      }
      await stopAll();
    }
    for (const c of loopback.slice(1)) {
      const ring = await startRing(wireArgs(c), null);
      const m = await measure(c.label, ring.url, ring.host);
      rows.push({ ...strip(m), delayMs: null, wire: wireName(c), ...predictFor(ring, m) });
      await stopAll();
    }
    for (const delayMs of DELAYS_MS) {
      const probe = await probeThroughDelay(delayMs);
      const frame = { hidden, decodeBatch: 1, prefillTokens: PREFILL_TOKENS, decodeSteps: TOKENS };
      // With the probe's throughput the policy's choice is the same for every link here (all alike: direct, through a proxy of this delay).
      const probed = chooseLinkWire({ kind: 'direct', rttMs: probe.rttMs, throughputMBps: probe.throughputMBps }, frame, 'auto');
      const configs: Array<[label: string, hostWire: string[], wire: string]> = [
        ['f32', wireArgs({ encoding: 'f32', zstd: false }), 'f32'],
        // The host's own per-link choice: kind and RTT only, the default throughput of a direct link.
        ['auto', ['--activations', 'auto'], 'auto'],
        [`auto+probe (${probe.throughputMBps.toFixed(0)} MB/s)`, wireArgs(probed), wireName(probed)],
      ];
      for (const [label, hostWire, wire] of configs) {
        const ring = await startRing(hostWire, delayMs);
        const m = await measure(`ring 3 stages, ${delayMs} ms, ${label}`, ring.url, ring.host);
        const row: Row = { ...strip(m), delayMs, wire, ...predictFor(ring, m) };
        if (label === 'auto') {
          row.wire = ring.stageWires.map((w) => w.wire).join('/');
          row.hostChoices = ring.stageWires.map((w) => ({ stage: w.name, wire: w.wire }));
          row.probeChoices = ring.links.map((l) => {
            const c = chooseLinkWire({ kind: l.kind === 'relayed' ? 'relayed' : 'direct', rttMs: l.rttMs, throughputMBps: probe.throughputMBps }, frame, 'auto');
            return { link: `${l.a}-${l.b}`, kind: l.kind, rttMs: l.rttMs, throughputMBps: probe.throughputMBps, choice: wireName(c) };
          });
        }
        const relayed = ring.links.filter((l) => l.kind !== 'direct');
        if (relayed.length > 0) row.case += ` (${relayed.length} link(s) relayed: not delayed)`;
        rows.push(row);
        await stopAll();
      }
    }
  } finally {
    await stopAll();
  }
  const wallS = (performance.now() - t0) / 1000;

  // Frame sizes of one decode step's hidden states (1 token) and of a 128-token prefill, per encoding.
  const frames: Array<{ encoding: string; decodeBytes: number; prefillBytes: number }> = [];
  for (const [encoding, zstd] of [['f32', false], ['f16', false], ['int8', false], ['int8', true]] as const) {
    const size = async (seq: number): Promise<number> => {
      // Normally distributed values with a few outliers, like hidden states.
      const h = new Float32Array(seq * hidden).map((_, i) => {
        const g = Math.sqrt(-2 * Math.log(1 - Math.random())) * Math.cos(2 * Math.PI * Math.random());
        return i % 97 === 0 ? g * 20 : g;
      });
      return (await encodeStepFrame({ metadata: { step: '1', rows: '[{"id":1,"pos":0,"cap":256}]' }, tensor: { kind: 'hidden', hidden: h, dims: [1, seq, hidden] } }, { encoding, zstd })).length;
    };
    frames.push({ encoding: `${encoding}${zstd ? '+zstd' : ''}`, decodeBytes: await size(1), prefillBytes: await size(128) });
  }

  const load = loadavg().map((l) => l.toFixed(2)).join(' ');
  const base = rows[0]!;
  console.log(`model ${modelId} (hidden ${hidden}), ${TOKENS} tokens per stream, ${THREADS} thread(s) per process, loopback; block ${block.blockMs.toFixed(3)} ms, head ${block.headMs?.toFixed(3) ?? '-'} ms; load average at the end ${load}; ${wallS.toFixed(0)} s`);
  console.log(`The first two rows ran side by side, alternating, ${ROUNDS} rounds: medians (each round's tok/s in brackets below them).`);
  // x1proc: tok/s of one stream over one process's; 4 vs 1: four streams' aggregate over this row's one stream.
  console.log('case                                            TTFT ms   tok/s  x1proc  ms/tok  predicted  ratio  no hop  hop ms  4 streams tok/s  4 vs 1');
  const f1 = (x: number | null | undefined): string => (x == null ? '-' : x.toFixed(1));
  for (const r of rows) {
    const ratio = r.predictedMsPerToken !== null ? `${(r.predictedMsPerToken / r.msPerToken).toFixed(2)}x` : '-';
    console.log(`${r.case.padEnd(46)} ${r.ttftMs.toFixed(1).padStart(8)} ${r.tokensPerS.toFixed(1).padStart(7)} ${(r.tokensPerS / base.tokensPerS).toFixed(2).padStart(7)} ${r.msPerToken.toFixed(1).padStart(7)} ${f1(r.predictedMsPerToken).padStart(10)} ${ratio.padStart(6)} ${f1(r.predictedNoHopMsPerToken).padStart(7)} ${(r.hopMs == null ? '-' : r.hopMs.toFixed(2)).padStart(7)} ${r.aggregate4TokensPerS.toFixed(1).padStart(16)} ${(r.aggregate4TokensPerS / r.tokensPerS).toFixed(2).padStart(7)}`);
    if (r.rounds !== undefined) console.log(`    rounds: one stream [${r.rounds.map((x) => x.tokensPerS.toFixed(1)).join(', ')}] tok/s, four streams [${r.rounds.map((x) => x.aggregate4TokensPerS.toFixed(1)).join(', ')}]`);
    if (r.stages !== undefined) console.log(`    stages predicted / measured ms: ${r.stages.map((s) => `[${s.range})${s.head ? '+head' : ''} ${s.predictedMs.toFixed(2)} / ${f1(s.measuredMs)}${s.measuredMs !== null ? ` (${(s.predictedMs / s.measuredMs).toFixed(2)}x)` : ''}`).join(', ')}`);
    if (r.hostChoices !== undefined) console.log(`    auto, as the host chose per link (kind + RTT): ${r.hostChoices.map((c) => `${c.stage} sends ${c.wire}`).join(', ')}`);
    for (const l of r.probeChoices ?? []) {
      console.log(`    auto with the probe, link ${l.link}: ${l.kind}, rtt ${l.rttMs.toFixed(1)} ms, ${l.throughputMBps.toFixed(1)} MB/s -> ${l.choice}`);
    }
  }
  const errors = (xs: Array<[number | null, number | null]>): number[] => xs.filter((p): p is [number, number] => p[0] !== null && p[1] !== null && p[1] > 0).map(([p, m]) => Math.abs(p / m - 1)).sort((a, b) => a - b);
  const mid = (xs: number[]): string => (xs.length === 0 ? '-' : `${(100 * (xs.length % 2 === 1 ? xs[(xs.length - 1) / 2]! : (xs[xs.length / 2 - 1]! + xs[xs.length / 2]!) / 2)).toFixed(0)}%`);
  const ringErr = errors(rows.map((r) => [r.predictedMsPerToken, r.msPerToken]));
  const noHopErr = errors(rows.map((r) => [r.predictedNoHopMsPerToken, r.msPerToken]));
  const stageErr = errors(rows.flatMap((r) => (r.stages ?? []).map((s) => [s.predictedMs, s.measuredMs] as [number, number | null])));
  console.log(`|predicted/measured - 1|: rings median ${mid(ringErr)} over ${ringErr.length} (without the hop term ${mid(noHopErr)}), stages median ${mid(stageErr)} over ${stageErr.length}`);
  console.log('\nframe bytes (width ' + hidden + ')   decode step   128-token prefill');
  for (const f of frames) console.log(`${f.encoding.padEnd(24)} ${String(f.decodeBytes).padStart(12)} ${String(f.prefillBytes).padStart(18)}`);
  const out = join(import.meta.dirname, 'results');
  await mkdir(out, { recursive: true });
  await writeFile(join(out, 'ring.json'), `${JSON.stringify({ date: new Date().toISOString(), model: process.env.KIWI_MODEL ?? (process.env.KIWI_BENCH_SHAPE !== undefined ? `${process.env.KIWI_BENCH_SHAPE} ${process.env.KIWI_BENCH_QUANT ?? 'q4_0'}` : SHAPE), tokens: TOKENS, rounds: ROUNDS, threads: THREADS, blockMs: block.blockMs, headMs: block.headMs ?? null, loadavg: load, wallS, rows, frames }, null, 2)}\n`);
  await rm(dir, { recursive: true, force: true });
}

if (process.argv[2] === '--member') await runProxiedMember(JSON.parse(process.argv[3] ?? '{}') as MemberConfig);
else await main();
