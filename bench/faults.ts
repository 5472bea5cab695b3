// Randomized fault injection against a ring of real processes on loopback (issue 7): a rendezvous,
// `kiwi host` and four `kiwi join` members with small reported memory (every member holds layers;
// the model fits without any one). Each trial streams a greedy completion and kills members with
// SIGKILL at a random point of one of five kinds: during the prefill of a long prompt, early in the
// decode, late in the decode, during the re-plan of an earlier kill (a second member), or two
// members at once. Killed members are started again under the same identity between trials, so
// the ring is whole for the next one (a fresh ring is started when it does not come back).
// Reports trials, completed streams, streams identical to the text without failure (`kiwi
// generate`), time from the kill to the next token at the client (median, max), the host's
// recoveries (re-plans, weight bytes moved, resumed requests) and prints a table; writes
// bench/results/faults.json.
//   KIWI_FAULTS_TRIALS (default 20), KIWI_FAULTS_SEED (default 1), KIWI_MODEL (default stories260K).
// Large-model mode (issue 15), KIWI_FAULTS_SCALE=8b: a `kiwi synth` Llama-3.1-8B Q4_0 (or
// KIWI_MODEL), the host and three members sized so that any two members and the host hold the
// model, a 2,048-position context, members keeping standby layers (KIWI_FAULTS_STANDBY_GB, default
// 3; 0: none, every re-plan loads over the network); one member killed per trial, in turn during
// the prefill of a 512-token prompt, at the 60th generated token (of 120) and at the 500th (of
// 520); a replay at the 500th is set against the undisturbed ring's prefill of a prompt about as
// long. Writes bench/results/faults-8b.json.
// KIWI_KEEP_CACHES=0 (read by `kiwi host`): a re-plan rebuilds every layer of the live requests
// instead of skipping those the survivors kept (runtime/stage-keep.ts), for comparison; the JSON
// then goes to faults[-8b]-rebuild-all.json. KIWI_CUT_MIN_MB=off (read by `kiwi host`): stages
// are never split where losing a member would cut them (pipeline/fault-cuts.ts), so a survivor
// whose range moves reopens it whole; the JSON then goes to faults[-8b]-no-cuts.json.
// KIWI_PIPELINED_RECOVERY=0 (read by `kiwi host`): a re-plan serves the new ring only once every
// stage is open, instead of once every member's weights are in (a member still opening its
// sessions queues the steps sent to it); the JSON then goes to faults[-8b]-serial.json. With
// pipelining, a re-plan's time ends when the ring is served, so "after the re-plan" includes the
// rest of the survivors' session opening.
// Run: npx tsx bench/faults.ts
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { openGguf } from '../electron/engine/model/gguf/gguf-reader.js';
import { testModelPath } from '../electron/engine/model/test-models.js';
import { modelSizesFromGguf } from '../electron/engine/planner/model-sizes.js';
import { FaultRing, generateReference, servingAllReady, stallAfter, streamCompletion, summarize, type FaultMember, type HostStatus, type Recovery, type StreamResult } from '../electron/engine/test-support/fault-ring.js';
import { askStatus, kiwiEntry, ProcessSet, repoRoot, waitEvent } from '../electron/engine/test-support/processes.js';

const run = promisify(execFile);

const LARGE = process.env.KIWI_FAULTS_SCALE === '8b';
const TRIALS = Number(process.env.KIWI_FAULTS_TRIALS ?? (LARGE ? 10 : 20));
const SEED = Number(process.env.KIWI_FAULTS_SEED ?? 1);
const PROMPT = 'Once upon a time';
/** The host's context in the large mode: a 512-token prompt or 520 generated tokens fit. */
const LARGE_CONTEXT = 2048;
const STANDBY_GB = Number(process.env.KIWI_FAULTS_STANDBY_GB ?? 3);

/** What a kind of trial streams and when it kills: the token at whose arrival (-1: during the prefill of the long prompt), and how many members. */
interface KindSpec {
  maxTokens: number;
  killAt: () => number;
  victims: 1 | 2;
}
const SMALL_KINDS: Record<string, KindSpec> = {
  'prefill': { maxTokens: 32, killAt: () => -1, victims: 1 },
  'early-decode': { maxTokens: 128, killAt: () => between(2, 24), victims: 1 },
  'late-decode': { maxTokens: 128, killAt: () => between(70, 110), victims: 1 },
  'during-replan': { maxTokens: 128, killAt: () => between(2, 24), victims: 2 },
  'two-at-once': { maxTokens: 128, killAt: () => between(2, 24), victims: 2 },
};
const LARGE_KINDS: Record<string, KindSpec> = {
  'decode-60': { maxTokens: 120, killAt: () => 60, victims: 1 },
  'decode-500': { maxTokens: 520, killAt: () => 500, victims: 1 },
  'prefill': { maxTokens: 32, killAt: () => -1, victims: 1 },
};
const SPECS = LARGE ? LARGE_KINDS : SMALL_KINDS;
/** KIWI_FAULTS_KINDS=decode-60,prefill: only these kinds (a shorter run of the ones a change is about). */
const KINDS = process.env.KIWI_FAULTS_KINDS?.split(',') ?? Object.keys(SPECS);
for (const k of KINDS) if (SPECS[k] === undefined) throw new Error(`KIWI_FAULTS_KINDS: no kind '${k}' (${Object.keys(SPECS).join(', ')})`);
/** The large mode takes its kinds in turn (every kind in a 10-trial run), the small one at random. */
const kindOf = (trial: number): string => (LARGE ? KINDS[trial % KINDS.length]! : pick(KINDS));

/** mulberry32: a small seeded generator, so that a run can be repeated trial for trial. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const random = seeded(SEED);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
const between = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1));

const sharedModels = resolve(import.meta.dirname, '../../shared/models');
if (process.env.KIWI_TEST_MODELS === undefined && existsSync(sharedModels)) process.env.KIWI_TEST_MODELS = sharedModels;
const dir = await mkdtemp(join(tmpdir(), 'kiwi-bench-faults-'));
process.env.KIWI_CACHE_DIR = join(dir, 'cache');
const model = process.env.KIWI_MODEL ?? (LARGE ? await synthLarge(join(dir, 'llama-3.1-8b-q4_0.gguf')) : await testModelPath('stories260K.gguf'));
const modelId = basename(model).replace(/\.gguf$/i, '');
const kiwiJson = async (...args: string[]): Promise<Record<string, unknown>> =>
  JSON.parse((await run(process.execPath, [...kiwiEntry(), ...args, '--json'], { cwd: repoRoot, maxBuffer: 1 << 26 })).stdout.trim().split('\n').pop() as string) as Record<string, unknown>;

async function synthLarge(path: string): Promise<string> {
  console.log(`writing a synthetic Llama-3.1-8B Q4_0 to ${path}`);
  await run(process.execPath, [...kiwiEntry(), 'synth', '--shape', 'llama-3.1-8b', '--quant', 'q4_0', '--out', path, '--seed', '1', '--json'], { cwd: repoRoot });
  return path;
}

/** The context the host serves: the model's, at most 4096 (the large mode's is LARGE_CONTEXT). */
const context = LARGE ? LARGE_CONTEXT : Math.min(4096, (await kiwiJson('inspect', model)).context_length as number);
/** A long prompt for prefill kills: as many sentences as fill about 3/4 of the context (1/4 in the large mode, 512 tokens); `day` names its days. */
async function longPrompt(day = 'Day'): Promise<{ text: string; tokens: number }> {
  const share = LARGE ? 0.25 : 0.75;
  for (let n = LARGE ? 40 : 60; ; n = Math.floor(n / 2)) {
    const text = Array.from({ length: n }, (_, i) => `${day} ${i}: the little dog ran to the park and played with a red ball.`).join(' ');
    const tokens = ((await kiwiJson('tokenize', '--model', model, text)).ids as number[]).length;
    if (n <= 1 || tokens <= context * share) return { text, tokens };
  }
}
const LONG_PROMPT = (await longPrompt()).text;

/**
 * The small mode: four members of 64 MiB (every one holds layers, the model fits without any
 * one). The large one: three members of 12.5 blocks and a host of 8.5 blocks and the head, so the
 * first plan gives everyone layers and the host with any two members holds all 32.
 */
async function ringMembers(): Promise<{ members: FaultMember[]; hostArgs: string[] }> {
  if (!LARGE) return { members: ['m1', 'm2', 'm3', 'm4'].map((name, i) => ({ name, memoryBytes: 64 * 1024 * 1024, ownModel: i === 0 })), hostArgs: [] };
  const sizes = modelSizesFromGguf(await openGguf(model));
  const perBlock = sizes.blockResidentBytes! + sizes.kvBytesPerTokenPerLayer * context;
  const hostCaps = join(dir, 'capabilities-host.json');
  await writeFile(hostCaps, JSON.stringify({ fleet_device: { memory_bytes: Math.round(sizes.stageOverheadBytes! + sizes.headResidentBytes + 8.5 * perBlock) } }));
  const standby = STANDBY_GB > 0 ? ['--standby-gb', String(STANDBY_GB)] : [];
  const members = ['m1', 'm2', 'm3'].map((name) => ({ name, memoryBytes: Math.round(sizes.stageOverheadBytes! + 12.5 * perBlock), args: standby }));
  return { members, hostArgs: ['--capabilities', hostCaps, '--context', String(context), ...standby] };
}
const { members: MEMBERS, hostArgs: HOST_ARGS } = await ringMembers();

/**
 * The large mode's yardstick for a replay after a kill at the 500th token: the whole ring's
 * prefill of a prompt about as long, undisturbed (time to its first token). Its words differ from
 * LONG_PROMPT's, so no trial finds it in the prompt cache.
 */
async function ringPrefill(r: FaultRing): Promise<{ tokens: number; ms: number }> {
  const { text, tokens } = await longPrompt('Night');
  const got = await streamCompletion(r.url, { model: modelId, prompt: text, maxTokens: 1 }, () => undefined, { stallMs: 60_000 * SLOW });
  if (got.error !== undefined || got.pieces.length === 0) throw new Error(`the ring's prefill failed: ${got.error?.message ?? 'no token'}`);
  return { tokens, ms: got.pieces[0]!.at - got.startedAt };
}

interface Trial {
  trial: number;
  kind: string;
  victims: string[];
  /** Token index at whose arrival the first member was killed (-1: during the prefill). */
  killAtToken: number;
  completed: boolean;
  identical: boolean;
  error: string | null;
  /** Kill → next token at the client: the longest wait for a piece after the kill, ms (null when none came). */
  failureToNextTokenMs: number | null;
  /** Kill → the host's re-plan start, ms. */
  detectMs: number | null;
  recoveries: Recovery[];
  /** Σ fetch_bytes of the plans made after the kill (the planner's figure of what members lack). */
  planFetchBytes: number;
  /** The survivors' loads in the re-plans of the trial. */
  loads: Load[];
  /** Wall time of the stream, ms. */
  streamMs: number;
  /** The host's plans since the previous trial (members planned in again, then this trial's re-plans): each stage as `device start-end` and its sessions. */
  plans: string[][];
}

/** Per ring, how many of the host's events earlier trials have read for their plans. */
const plansRead = new WeakMap<FaultRing, number>();

/** The host's plans since the last call for `r`, each stage as `device start-end` with its sessions (`x2`). */
function plansSince(r: FaultRing): string[][] {
  const events = r.host.events.slice(plansRead.get(r) ?? 0);
  plansRead.set(r, r.host.events.length);
  return events.filter((e) => e.event === 'plan').map((e) => (e.stages as Array<{ device: string; start: number; end: number; segments: number }>)
    .map((s) => `${s.device} ${s.start}-${s.end}${s.segments > 1 ? ` x${s.segments}` : ''}`));
}

/** The large mode's waits: an 8B ring loads, re-plans and replays in minutes on this machine, not seconds. */
const SLOW = LARGE ? 10 : 1;
const procs = new ProcessSet();
let ring: FaultRing | undefined;
const startRing = async (): Promise<FaultRing> => {
  const r = await FaultRing.start(procs, { model, members: MEMBERS, dir, heartbeatMs: 500, heartbeatTimeoutS: LARGE ? 10 : 3, recoveryTimeoutS: 30 * SLOW, hostArgs: HOST_ARGS, formTimeoutMs: 90_000 * SLOW });
  await standbyDone(r);
  return r;
};

/** Waits until every member's standby layers for the current plan are on disk (at once without --standby-gb). */
async function standbyDone(r: FaultRing): Promise<void> {
  if (!LARGE || STANDBY_GB <= 0) return;
  const started = Date.now();
  for (const m of MEMBERS) {
    for (;;) {
      const epoch = (await r.status()).epoch;
      const s = (await askStatus(r.member(m.name))).standby as { state: string; epoch?: number; heldBytes: number; layers: number[] } | undefined;
      if (s?.state === 'done' && s.epoch === epoch) break;
      if (Date.now() - started > 30 * 60_000) throw new Error(`${m.name}'s standby layers did not arrive within 30 minutes: ${JSON.stringify(s)}`);
      await new Promise((res) => setTimeout(res, 1000));
    }
  }
  // The host's own: the layers after its blocks, built into its shard cache.
  await r.waitStatus((s) => s.standby?.state === 'done', "the host's standby layers", 30 * 60_000, 1000);
  console.log(`standby layers on disk after ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

/** Re-plans that brought restarted members back in (between trials). */
const rejoins: Recovery[] = [];

/** Restarts the members that are gone and waits until all of them hold layers again; false when the ring does not come back. */
async function makeWhole(r: FaultRing): Promise<boolean> {
  for (const m of MEMBERS) if (!r.alive(m.name)) await r.startMember(m.name);
  const before = (await r.status()).recoveries ?? [];
  try {
    const after = await r.waitStatus((s) => servingAllReady(s) && MEMBERS.every((m) => s.stages.some((x) => x.name === m.name)), 'every member back in the ring', 90_000 * SLOW, 250);
    rejoins.push(...(after.recoveries ?? []).filter((x) => !before.some((b) => b.epoch === x.epoch)));
    await standbyDone(r);
    return true;
  } catch (err) {
    console.error(`the ring did not become whole again: ${(err as Error).message}`);
    return false;
  }
}

/** A survivor's load in a re-plan: where its layers came from and how long it took. */
interface Load {
  member: string;
  source: string;
  transferredBytes: number;
  /** Time receiving them, ms (absent when nothing was received). */
  transferMs?: number;
  loadMs: number;
  /** The sessions its stage runs in after the load (more than one: reshaped or opened split), and the layers it opened anew. */
  segments?: number;
  openedLayers?: number;
}

async function runTrial(r: FaultRing, trial: number, kind: string, want: Map<string, string>): Promise<Trial> {
  const spec = SPECS[kind]!;
  const names = MEMBERS.map((m) => m.name);
  const first = pick(names);
  const second = pick(names.filter((n) => n !== first));
  const victims = spec.victims === 2 ? [first, second] : [first];
  let killAtToken = spec.killAt();
  // The host lists its latest 16 recoveries: new ones are told apart by their epoch.
  const before = (await r.status()).epoch ?? 0;
  const prompt = kind === 'prefill' ? LONG_PROMPT : PROMPT;
  const maxTokens = spec.maxTokens;
  const seenByMember = new Map(names.map((n) => [n, r.member(n).events.length]));
  let killedAt = 0;
  let second$: Promise<void> | undefined;
  const seenEvents = r.host.events.length;
  const kill = (): void => {
    killedAt = Date.now();
    r.signal(first, 'SIGKILL');
    if (kind === 'two-at-once') r.signal(second, 'SIGKILL');
    if (kind === 'during-replan') {
      second$ = waitEvent(r.host, (e) => e.event === 'recovering' && r.host.events.indexOf(e) >= seenEvents, 'the re-plan to start', 30_000)
        .then(() => r.signal(second, 'SIGKILL'))
        .catch(() => r.signal(second, 'SIGKILL'));
    }
  };
  let stream: Promise<StreamResult>;
  if (kind === 'prefill') {
    let arrived = 0;
    stream = streamCompletion(r.url, { model: modelId, prompt, maxTokens }, () => void arrived++, { stallMs: 60_000 * SLOW });
    // The prefill has reached the victim once it holds a KV cache for the request.
    const victim = r.member(first);
    const deadline = Date.now() + 20_000 * SLOW;
    while (Date.now() < deadline && arrived === 0 && ((await askStatus(victim)).requests as number) === 0) await new Promise((res) => setTimeout(res, 5));
    // Recorded as it happened: a prefill that finished before the kill counts as an early-decode kill.
    if (arrived > 0) killAtToken = arrived;
    kill();
  } else {
    stream = streamCompletion(r.url, { model: modelId, prompt, maxTokens }, (i) => {
      if (i === killAtToken) kill();
    }, { stallMs: 60_000 * SLOW });
  }
  const got = await stream;
  await second$;
  let after: HostStatus | undefined;
  try {
    after = await r.waitStatus((s) => s.phase !== 'recovering' && (s.recoveries ?? []).some((x) => x.epoch > before), 'the recovery to be recorded', 30_000 * SLOW, 250);
  } catch {
    after = await r.status();
  }
  const recoveries = (after.recoveries ?? []).filter((x) => x.epoch > before);
  const gap = killedAt > 0 ? stallAfter(got.pieces, killedAt) : undefined;
  // The host's own stage first (its blocks open beside the members' loads), then each surviving member's.
  const hostLoads = r.host.events.slice(seenEvents).filter((e) => e.event === 'stage-ready' && e.peer === 0 && typeof e.load_ms === 'number')
    .map((e) => ({ member: 'host', source: e.source as string, transferredBytes: 0, loadMs: e.load_ms as number, ...(typeof e.segments === 'number' ? { segments: e.segments } : {}), ...(typeof e.opened_layers === 'number' ? { openedLayers: e.opened_layers } : {}) }));
  const loads = [...hostLoads, ...names.filter((n) => !victims.includes(n)).flatMap((n) => r.member(n).events.slice(seenByMember.get(n)).filter((e) => e.event === 'ready')
    .map((e) => ({ member: n, source: e.source as string, transferredBytes: e.transferred_bytes as number, loadMs: e.load_ms as number, ...(typeof e.transfer_ms === 'number' ? { transferMs: e.transfer_ms } : {}), ...(typeof e.segments === 'number' ? { segments: e.segments } : {}), ...(typeof e.opened_layers === 'number' ? { openedLayers: e.opened_layers } : {}) })))];
  // What the re-plans' plans said the members must fetch (given what they hold), to set against what moved.
  const planFetchBytes = r.host.events.slice(seenEvents).filter((e) => e.event === 'plan').reduce((n, e) => n + ((e.fetch_bytes as number | undefined) ?? 0), 0);
  return {
    trial, kind, victims, killAtToken,
    completed: got.error === undefined && got.done,
    identical: got.error === undefined && got.text === want.get(`${prompt}\0${maxTokens}`),
    error: got.error?.message ?? null,
    failureToNextTokenMs: gap ?? null,
    detectMs: recoveries[0] !== undefined && killedAt > 0 ? recoveries[0].startedAt - killedAt : null,
    recoveries,
    planFetchBytes,
    loads,
    streamMs: got.endedAt - got.startedAt,
    plans: plansSince(r),
  };
}

const trials: Trial[] = [];
const started = Date.now();
/** The large mode's undisturbed ring prefill (ringPrefill), measured once the ring is up. */
let prefill: { tokens: number; ms: number } | undefined;
try {
  // The one-machine text of every (prompt, length) a kind streams.
  const want = new Map<string, string>();
  for (const kind of KINDS) {
    const prompt = kind === 'prefill' ? LONG_PROMPT : PROMPT;
    const key = `${prompt}\0${SPECS[kind]!.maxTokens}`;
    if (!want.has(key)) want.set(key, (await generateReference(model, prompt, SPECS[kind]!.maxTokens)).text);
  }
  console.log(`${want.size} reference texts from kiwi generate after ${((Date.now() - started) / 1000).toFixed(0)} s`);
  ring = await startRing();
  if (LARGE && KINDS.includes('decode-500')) {
    prefill = await ringPrefill(ring);
    console.log(`the ring's prefill of ${prefill.tokens} tokens: ${prefill.ms} ms`);
  }
  for (let t = 0; t < TRIALS; t++) {
    const kind = kindOf(t);
    const result = await runTrial(ring, t, kind, want);
    trials.push(result);
    const gap = result.failureToNextTokenMs === null ? '-' : `${result.failureToNextTokenMs} ms`;
    const rec = result.recoveries[0];
    const how = rec === undefined ? '' : ` (re-plan after ${result.detectMs} ms, took ${rec.durationMs} ms, ${(rec.bytesMoved / 2 ** 20).toFixed(1)} MiB moved; loads ${result.loads.map(loadText).join(', ')})`;
    console.log(`trial ${t + 1}/${TRIALS} ${kind} kill ${result.victims.join('+')} at ${result.killAtToken}: ${result.identical ? 'identical' : result.completed ? 'DIFFERENT' : `FAILED (${result.error})`}, next token after ${gap}${how}`);
    if (t + 1 < TRIALS && !(await makeWhole(ring))) {
      console.error(JSON.stringify(summarize(await ring.status().catch(() => undefined))));
      procs.killAll();
      ring = await startRing();
    }
  }
} finally {
  procs.killAll();
}

const gaps = trials.map((t) => t.failureToNextTokenMs).filter((g): g is number => g !== null).sort((a, b) => a - b);
const median = gaps.length === 0 ? null : gaps.length % 2 === 1 ? gaps[(gaps.length - 1) / 2]! : (gaps[gaps.length / 2 - 1]! + gaps[gaps.length / 2]!) / 2;
const recoveries = trials.flatMap((t) => t.recoveries);
const summary = {
  model: modelId, seed: SEED, members: MEMBERS.length, trials: trials.length, context, standbyGb: LARGE ? STANDBY_GB : 0,
  completed: trials.filter((t) => t.completed).length,
  identical: trials.filter((t) => t.identical).length,
  failureToNextTokenMs: { median, max: gaps.at(-1) ?? null, samples: gaps.length },
  replans: recoveries.length,
  bytesMoved: recoveries.reduce((a, r) => a + r.bytesMoved, 0),
  recoveryMs: { median: medianOf(recoveries.map((r) => r.durationMs)), max: Math.max(0, ...recoveries.map((r) => r.durationMs)) },
  resumedRequests: recoveries.reduce((a, r) => a + r.resumedRequests, 0),
  rejoins: { replans: rejoins.length, bytesMoved: rejoins.reduce((a, r) => a + r.bytesMoved, 0), recoveryMs: medianOf(rejoins.map((r) => r.durationMs)) },
  ...(prefill !== undefined ? { ringPrefill: prefill, replayOverPrefill: replayRatios() } : {}),
  wallS: Math.round((Date.now() - started) / 1000),
};

/** Each kill at the 500th token: what followed the re-plan (the replay, then the next token) over the ring's prefill. */
function replayRatios(): number[] {
  return trials.filter((t) => t.kind === 'decode-500').flatMap((t) => {
    const ms = afterReplan(t);
    return ms === null || prefill === undefined ? [] : [Math.round((ms / prefill.ms) * 100) / 100];
  });
}

/** A survivor's load: its source, what it received and at what rate, and the whole load's time. */
function loadText(l: Load): string {
  const rate = l.transferMs !== undefined && l.transferMs > 0 && l.transferredBytes > 0 ? ` ${(l.transferredBytes / 2 ** 20).toFixed(0)} MiB at ${(l.transferredBytes / 1e3 / l.transferMs).toFixed(0)} MB/s,` : '';
  const detail = [l.segments !== undefined && l.segments > 1 ? `${l.segments} segments` : '', l.openedLayers !== undefined ? `${l.openedLayers} layers opened` : ''].filter((x) => x !== '').join(', ');
  return `${l.member} ${l.source}${rate} ${l.loadMs} ms${detail !== '' ? ` (${detail})` : ''}`;
}

/** Kill -> next token less the wait for the re-plan and the re-plan itself (one re-plan only). */
function afterReplan(t: Trial): number | null {
  if (t.failureToNextTokenMs === null || t.detectMs === null || t.recoveries.length !== 1) return null;
  return t.failureToNextTokenMs - t.detectMs - t.recoveries[0]!.durationMs;
}

function medianOf(xs: number[]): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

console.log(`\nmodel ${modelId}, ${MEMBERS.length} members + host, seed ${SEED}, ${summary.wallS} s`);
console.log('kind            trials  completed  identical  next token ms (median / max)  re-plans  bytes moved');
for (const kind of KINDS) {
  const ts = trials.filter((t) => t.kind === kind);
  if (ts.length === 0) continue;
  const g = ts.map((t) => t.failureToNextTokenMs).filter((x): x is number => x !== null);
  const rs = ts.flatMap((t) => t.recoveries);
  console.log(`${kind.padEnd(15)} ${String(ts.length).padStart(6)} ${String(ts.filter((t) => t.completed).length).padStart(10)} ${String(ts.filter((t) => t.identical).length).padStart(10)} ${`${medianOf(g) ?? '-'} / ${g.length > 0 ? Math.max(...g) : '-'}`.padStart(29)} ${String(rs.length).padStart(9)} ${String(rs.reduce((a, r) => a + r.bytesMoved, 0)).padStart(12)}`);
}
console.log(`${'all'.padEnd(15)} ${String(summary.trials).padStart(6)} ${String(summary.completed).padStart(10)} ${String(summary.identical).padStart(10)} ${`${summary.failureToNextTokenMs.median ?? '-'} / ${summary.failureToNextTokenMs.max ?? '-'}`.padStart(29)} ${String(summary.replans).padStart(9)} ${String(summary.bytesMoved).padStart(12)}`);
// After the re-plan: the replay of the generated tokens (or the prefill again, for a prefill kill) and the next token.
console.log('\n| trial | kind | killed at token | kill -> re-plan ms | re-plan ms | MiB moved / planned | survivors\' loads | after the re-plan ms | kill -> next token ms | text exact |\n|---|---|---|---|---|---|---|---|---|---|');
for (const t of trials) {
  const moved = t.recoveries.reduce((n, x) => n + x.bytesMoved, 0);
  console.log(`| ${t.trial + 1} | ${t.kind} | ${t.killAtToken} | ${t.detectMs ?? '-'} | ${t.recoveries.map((x) => x.durationMs).join(' + ') || '-'} | ${(moved / 2 ** 20).toFixed(1)} / ${(t.planFetchBytes / 2 ** 20).toFixed(1)} | ${t.loads.map(loadText).join(', ') || '-'} | ${afterReplan(t) ?? '-'} | ${t.failureToNextTokenMs ?? '-'} | ${t.identical ? 'yes' : 'NO'} |`);
}
if (prefill !== undefined) console.log(`kills at the 500th token: after the re-plan / the ring's prefill of ${prefill.tokens} tokens (${prefill.ms} ms): ${replayRatios().map((x) => `${x}x`).join(', ') || '-'}`);
console.log(`re-plans after a fault: ${summary.replans} (median ${summary.recoveryMs.median ?? '-'} ms, max ${summary.recoveryMs.max} ms, ${summary.resumedRequests} requests resumed); members planned in again: ${summary.rejoins.replans} re-plans, ${summary.rejoins.bytesMoved} bytes moved`);
const out = join(import.meta.dirname, 'results');
await mkdir(out, { recursive: true });
const variant = `${process.env.KIWI_KEEP_CACHES === '0' ? '-rebuild-all' : ''}${process.env.KIWI_CUT_MIN_MB === 'off' ? '-no-cuts' : ''}${process.env.KIWI_PIPELINED_RECOVERY === '0' ? '-serial' : ''}`;
await writeFile(join(out, `${LARGE ? 'faults-8b' : 'faults'}${variant}.json`), `${JSON.stringify({ ...summary, rows: trials }, null, 2)}\n`);
await rm(dir, { recursive: true, force: true });
process.exit(0);
