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
// Run: npx tsx bench/faults.ts
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { testModelPath } from '../electron/engine/model/test-models.js';
import { FaultRing, generateReference, stallAfter, streamCompletion, summarize, type FaultMember, type HostStatus, type Recovery, type StreamResult } from '../electron/engine/test-support/fault-ring.js';
import { askStatus, kiwiEntry, ProcessSet, repoRoot, waitEvent } from '../electron/engine/test-support/processes.js';

const run = promisify(execFile);

const TRIALS = Number(process.env.KIWI_FAULTS_TRIALS ?? 20);
const SEED = Number(process.env.KIWI_FAULTS_SEED ?? 1);
const TOKENS = 128;
const PREFILL_TOKENS = 32;
const PROMPT = 'Once upon a time';
const KINDS = ['prefill', 'early-decode', 'late-decode', 'during-replan', 'two-at-once'] as const;
type Kind = (typeof KINDS)[number];

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
const model = process.env.KIWI_MODEL ?? (await testModelPath('stories260K.gguf'));
const modelId = basename(model).replace(/\.gguf$/i, '');
const kiwiJson = async (...args: string[]): Promise<Record<string, unknown>> =>
  JSON.parse((await run(process.execPath, [...kiwiEntry(), ...args, '--json'], { cwd: repoRoot, maxBuffer: 1 << 26 })).stdout.trim().split('\n').pop() as string) as Record<string, unknown>;
/** A long prompt for prefill kills: as many sentences as fill about 3/4 of the context the host serves (at most 4096). */
async function longPrompt(): Promise<string> {
  const context = Math.min(4096, (await kiwiJson('inspect', model)).context_length as number);
  for (let n = 60; ; n = Math.floor(n / 2)) {
    const text = Array.from({ length: n }, (_, i) => `Day ${i}: the little dog ran to the park and played with a red ball.`).join(' ');
    if (n <= 1 || ((await kiwiJson('tokenize', '--model', model, text)).ids as number[]).length <= context * 0.75) return text;
  }
}
const LONG_PROMPT = await longPrompt();
const MEMBERS: FaultMember[] = ['m1', 'm2', 'm3', 'm4'].map((name, i) => ({ name, memoryBytes: 64 * 1024 * 1024, ownModel: i === 0 }));

interface Trial {
  trial: number;
  kind: Kind;
  victims: string[];
  /** Token index at whose arrival the first member was killed (-1: during the prefill). */
  killAtToken: number;
  completed: boolean;
  identical: boolean;
  error: string | null;
  /** Kill → next token at the client: the longest wait for a piece after the kill, ms (null when none came). */
  failureToNextTokenMs: number | null;
  recoveries: Recovery[];
  /** Wall time of the stream, ms. */
  streamMs: number;
}

const procs = new ProcessSet();
let ring: FaultRing | undefined;
const startRing = async (): Promise<FaultRing> => FaultRing.start(procs, { model, members: MEMBERS, dir, heartbeatMs: 500, heartbeatTimeoutS: 3, recoveryTimeoutS: 30 });

/** Restarts the members that are gone and waits until all of them hold layers again; false when the ring does not come back. */
/** Re-plans that brought restarted members back in (between trials). */
const rejoins: Recovery[] = [];

async function makeWhole(r: FaultRing): Promise<boolean> {
  for (const m of MEMBERS) if (!r.alive(m.name)) await r.startMember(m.name);
  const before = (await r.status()).recoveries ?? [];
  try {
    const after = await r.waitStatus((s) => s.phase === 'serving' && MEMBERS.every((m) => s.stages.some((x) => x.name === m.name && (x.state === 'ready' || x.state === 'kept'))), 'every member back in the ring', 90_000, 250);
    rejoins.push(...(after.recoveries ?? []).filter((x) => !before.some((b) => b.epoch === x.epoch)));
    return true;
  } catch (err) {
    console.error(`the ring did not become whole again: ${(err as Error).message}`);
    return false;
  }
}

async function runTrial(r: FaultRing, trial: number, kind: Kind, want: Map<string, string>): Promise<Trial> {
  const names = MEMBERS.map((m) => m.name);
  const first = pick(names);
  const second = pick(names.filter((n) => n !== first));
  const victims = kind === 'during-replan' || kind === 'two-at-once' ? [first, second] : [first];
  let killAtToken = kind === 'prefill' ? -1 : kind === 'late-decode' ? between(70, 110) : between(2, 24);
  // The host lists its latest 16 recoveries: new ones are told apart by their epoch.
  const before = (await r.status()).epoch ?? 0;
  const prompt = kind === 'prefill' ? LONG_PROMPT : PROMPT;
  const maxTokens = kind === 'prefill' ? PREFILL_TOKENS : TOKENS;
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
    stream = streamCompletion(r.url, { model: modelId, prompt, maxTokens }, () => void arrived++, { stallMs: 60_000 });
    // The prefill has reached the victim once it holds a KV cache for the request.
    const victim = r.member(first);
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && arrived === 0 && ((await askStatus(victim)).requests as number) === 0) await new Promise((res) => setTimeout(res, 5));
    // Recorded as it happened: a prefill that finished before the kill counts as an early-decode kill.
    if (arrived > 0) killAtToken = arrived;
    kill();
  } else {
    stream = streamCompletion(r.url, { model: modelId, prompt, maxTokens }, (i) => {
      if (i === killAtToken) kill();
    }, { stallMs: 60_000 });
  }
  const got = await stream;
  await second$;
  let after: HostStatus | undefined;
  try {
    after = await r.waitStatus((s) => s.phase !== 'recovering' && (s.recoveries ?? []).some((x) => x.epoch > before), 'the recovery to be recorded', 30_000, 250);
  } catch {
    after = await r.status();
  }
  const recoveries = (after.recoveries ?? []).filter((x) => x.epoch > before);
  const gap = killedAt > 0 ? stallAfter(got.pieces, killedAt) : undefined;
  return {
    trial, kind, victims, killAtToken,
    completed: got.error === undefined && got.done,
    identical: got.error === undefined && got.text === want.get(prompt),
    error: got.error?.message ?? null,
    failureToNextTokenMs: gap ?? null,
    recoveries,
    streamMs: got.endedAt - got.startedAt,
  };
}

const trials: Trial[] = [];
const started = Date.now();
try {
  const want = new Map<string, string>([
    [PROMPT, (await generateReference(model, PROMPT, TOKENS)).text],
    [LONG_PROMPT, (await generateReference(model, LONG_PROMPT, PREFILL_TOKENS)).text],
  ]);
  ring = await startRing();
  for (let t = 0; t < TRIALS; t++) {
    const kind = pick(KINDS);
    const result = await runTrial(ring, t, kind, want);
    trials.push(result);
    const gap = result.failureToNextTokenMs === null ? '-' : `${result.failureToNextTokenMs} ms`;
    console.log(`trial ${t + 1}/${TRIALS} ${kind} kill ${result.victims.join('+')}: ${result.identical ? 'identical' : result.completed ? 'DIFFERENT' : `FAILED (${result.error})`}, next token after ${gap}`);
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
  model: modelId, seed: SEED, members: MEMBERS.length, trials: trials.length,
  completed: trials.filter((t) => t.completed).length,
  identical: trials.filter((t) => t.identical).length,
  failureToNextTokenMs: { median, max: gaps.at(-1) ?? null, samples: gaps.length },
  replans: recoveries.length,
  bytesMoved: recoveries.reduce((a, r) => a + r.bytesMoved, 0),
  recoveryMs: { median: medianOf(recoveries.map((r) => r.durationMs)), max: Math.max(0, ...recoveries.map((r) => r.durationMs)) },
  resumedRequests: recoveries.reduce((a, r) => a + r.resumedRequests, 0),
  rejoins: { replans: rejoins.length, bytesMoved: rejoins.reduce((a, r) => a + r.bytesMoved, 0), recoveryMs: medianOf(rejoins.map((r) => r.durationMs)) },
  wallS: Math.round((Date.now() - started) / 1000),
};

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
console.log(`re-plans after a fault: ${summary.replans} (median ${summary.recoveryMs.median ?? '-'} ms, max ${summary.recoveryMs.max} ms, ${summary.resumedRequests} requests resumed); members planned in again: ${summary.rejoins.replans} re-plans, ${summary.rejoins.bytesMoved} bytes moved`);
const out = join(import.meta.dirname, 'results');
await mkdir(out, { recursive: true });
await writeFile(join(out, 'faults.json'), `${JSON.stringify({ ...summary, rows: trials }, null, 2)}\n`);
await rm(dir, { recursive: true, force: true });
process.exit(0);
