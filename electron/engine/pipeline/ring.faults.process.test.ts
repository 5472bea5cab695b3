// Fault injection with real processes on loopback (issue 7): a rendezvous, `kiwi host` and three or
// four `kiwi join` members, each reporting little memory so that the plan gives every member layers
// while the model still fits without any one of them. Members are killed with SIGKILL at chosen
// moments (during a long prompt's prefill, after k streamed tokens, while the re-plan for an earlier
// kill is under way, two at once), leave gracefully (SIGINT: they hand their range back first) or
// come back under the same identity. For every greedy trial the client's full streamed text must be
// exactly the text without failure (`kiwi generate` on one machine, which the API gives when
// nothing fails) and the stream must end without an error. Without members enough to hold the
// model, requests wait and fail with a clear error after the recovery timeout, or complete when a
// member returns in time.
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openGguf } from '../model/gguf/gguf-reader.js';
import { testModelPath } from '../model/test-models.js';
import { modelSizesFromGguf } from '../planner/model-sizes.js';
import { FaultRing, firstDifference, generateReference, servingAllReady, streamCompletion as streamRaw, summarize, synthModel, type FaultMember, type FaultRingOptions, type HostStatus, type StreamResult } from '../test-support/fault-ring.js';
import { askStatus, isolatedCacheDir, ProcessSet, until, waitEvent } from '../test-support/processes.js';

const procs = new ProcessSet();
const tempDir = isolatedCacheDir('kiwi-ring-faults-');
afterEach(() => procs.killAll());
afterAll(() => procs.dispose());

/** Enough memory for a couple of stories260K blocks with their KV at full context: the host (all its RAM) keeps the rest. */
const SMALL = 64 * 1024 * 1024;
const three = (): FaultMember[] => [
  { name: 'ada', memoryBytes: SMALL, ownModel: true },
  { name: 'bob', memoryBytes: SMALL },
  { name: 'cy', memoryBytes: SMALL },
];

const PROMPT = 'Once upon a time';
const TOKENS = 160;
/** A prompt of about 1,700 tokens (of 2,048 positions), so that the prefill takes a while. */
const LONG_PROMPT = Array.from({ length: 60 }, (_, i) => `Day ${i}: the little dog ran to the park and played with a red ball.`).join(' ');

/** A stream that stalls fails the trial well before the test's own timeout, so the logs get printed. */
const streamCompletion = (...[url, req, onPiece]: Parameters<typeof streamRaw>): Promise<StreamResult> => streamRaw(url, req, onPiece, { stallMs: 40_000 });

const references = new Map<string, Promise<Awaited<ReturnType<typeof generateReference>>>>();
function reference(model: string, prompt: string, tokens: number): Promise<Awaited<ReturnType<typeof generateReference>>> {
  const key = `${model}\0${prompt}\0${tokens}`;
  let r = references.get(key);
  if (r === undefined) {
    r = generateReference(model, prompt, tokens);
    references.set(key, r);
  }
  return r;
}

async function stories(): Promise<string> {
  return testModelPath('stories260K.gguf');
}

function startRing(model: string, members: FaultMember[], extra: Partial<FaultRingOptions> = {}): Promise<FaultRing> {
  return FaultRing.start(procs, { model, members, dir: tempDir(), heartbeatMs: 500, heartbeatTimeoutS: 10, recoveryTimeoutS: 30, ...extra });
}

/** The stream must be the reference exactly and end cleanly; on failure, say what happened around the ring. */
function expectIdentical(ring: FaultRing, got: StreamResult, want: string, killedAt?: number): void {
  const piecesBeforeKill = killedAt === undefined ? undefined : got.pieces.filter((p) => p.at <= killedAt).length;
  const stream = { status: got.status, error: got.error, finish: got.finishReason, done: got.done, pieces: got.pieces.length, piecesBeforeKill, firstDifference: firstDifference(got, want) };
  const context = `\n--- stream: ${JSON.stringify(stream)}\n${ring.logs()}`;
  expect(got.error, `the stream failed${context}`).toBeUndefined();
  expect(got.text, `the streamed text differs from the text without failure${context}`).toBe(want);
  expect(got.done, `the stream did not end with [DONE]${context}`).toBe(true);
}

/** Waits until the host serves again after `count` completed recoveries. */
async function recovered(ring: FaultRing, count: number): Promise<HostStatus> {
  return ring.waitStatus((s) => servingAllReady(s) && (s.recoveries?.length ?? 0) >= count, `${count} recoveries and the ring serving again`, 60_000, 250);
}

describe('a ring of real processes whose members die, leave and come back (loopback)', () => {
  it('loses a member mid-decode: the stream carries on with exactly the text without failure, and the next requests are served by the re-planned ring', async () => {
    const model = await stories();
    const want = reference(model, PROMPT, TOKENS);
    const ring = await startRing(model, three());
    const before = await ring.status();
    expect(before.stages.filter((s) => s.peer !== 0).map((s) => s.name).sort(), 'every member holds layers').toEqual(['ada', 'bob', 'cy']);
    // Without a fault the API gives exactly `kiwi generate`'s text: the reference of every trial.
    expectIdentical(ring, await streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }), (await want).text);

    let killedAt = 0;
    const got = await streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }, (i) => {
      if (i === 10) {
        ring.signal('bob', 'SIGKILL');
        killedAt = Date.now();
      }
    });
    expect(killedAt).toBeGreaterThan(0);
    expectIdentical(ring, got, (await want).text, killedAt);
    expect(got.pieces.filter((p) => p.at > killedAt).length, 'tokens kept coming after the kill').toBeGreaterThan(100);

    const after = await recovered(ring, 1);
    expect(after.epoch).toBe((before.epoch ?? 1) + 1);
    expect(after.recoveries?.[0]?.resumedRequests, JSON.stringify(summarize(after))).toBe(1);
    expect(after.stages.map((s) => s.name)).not.toContain('bob');
    expect(after.stages.at(-1)?.end).toBe(5);
    expectIdentical(ring, await streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }), (await want).text);
    expect(ring.hostEvents('error')).toEqual([]);
  }, 120_000);

  it('loses a member during the prefill of a long prompt', async () => {
    const model = await stories();
    const want = reference(model, LONG_PROMPT, 48);
    const ring = await startRing(model, three());
    // The last member in ring order is stopped (SIGSTOP) before the request: the prefill reaches
    // the members before it and cannot get past it, so once the first member holds a KV cache for
    // the request the prefill is provably under way, however fast it runs, and killing the stopped
    // member lands inside it.
    const order = (await ring.status()).stages.filter((s) => s.peer !== 0).map((s) => s.name);
    const first = order[0]!;
    const victim = order.at(-1)!;
    expect(order.length, 'a ring of three members').toBe(3);
    ring.signal(victim, 'SIGSTOP');
    const stream = streamCompletion(ring.url, { model: 'stories260K', prompt: LONG_PROMPT, maxTokens: 48 });
    await until(async () => ((await askStatus(ring.member(first))).requests as number) > 0, `the prefill to reach ${first}`, 30_000);
    ring.signal(victim, 'SIGKILL');
    const killedAt = Date.now();
    const got = await stream;
    expectIdentical(ring, got, (await want).text, killedAt);
    expect(got.pieces[0]!.at, 'the first token came before the kill: the prefill was over').toBeGreaterThanOrEqual(killedAt);
    const status = await recovered(ring, 1);
    expect(status.recoveries?.[0]?.resumedRequests).toBe(1);
  }, 120_000);

  it('loses a second member while the re-plan for the first is under way', async () => {
    const model = await stories();
    const want = reference(model, PROMPT, TOKENS);
    const ring = await startRing(model, three());
    let second: Promise<void> | undefined;
    const got = await streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }, (i) => {
      if (i !== 8) return;
      ring.signal('ada', 'SIGKILL');
      second = (async () => {
        await waitEvent(ring.host, (e) => e.event === 'recovering', 'the host to start re-planning', 30_000);
        ring.signal('cy', 'SIGKILL');
      })();
    });
    await second;
    expectIdentical(ring, got, (await want).text);
    const status = await ring.waitStatus((s) => s.phase === 'serving' && !s.stages.some((x) => x.name === 'ada' || x.name === 'cy'), 'a ring without ada and cy', 60_000, 250);
    expect(status.stages.map((s) => s.name).sort()).toEqual(['bob', 'host']);
    expectIdentical(ring, await streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }), (await want).text);
  }, 120_000);

  it('loses two members at once while the rest still hold the model, with two streams of different prompts in flight', async () => {
    const model = await stories();
    const prompts = [PROMPT, 'The little dog'];
    const wants = prompts.map((p) => reference(model, p, TOKENS));
    const ring = await startRing(model, three());
    let killed = false;
    const kill = (i: number): void => {
      if (i !== 12 || killed) return;
      killed = true;
      ring.signal('ada', 'SIGKILL');
      ring.signal('bob', 'SIGKILL');
    };
    const got = await Promise.all(prompts.map((p) => streamCompletion(ring.url, { model: 'stories260K', prompt: p, maxTokens: TOKENS }, kill)));
    expect(killed).toBe(true);
    for (const [i, g] of got.entries()) expectIdentical(ring, g, (await wants[i]!).text);
    const status = await ring.waitStatus((s) => s.phase === 'serving' && s.stages.every((x) => x.name !== 'ada' && x.name !== 'bob'), 'a ring of the host and cy', 60_000, 250);
    expect(status.stages.map((s) => s.name).sort()).toEqual(['cy', 'host']);
  }, 120_000);

  it('lets a member leave gracefully (SIGINT): it hands its range back and the stream never notices', async () => {
    const model = await stories();
    const want = reference(model, PROMPT, TOKENS);
    const ring = await startRing(model, three());
    let left: Promise<number | null> | undefined;
    const got = await streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }, (i) => {
      if (i === 10) left = ring.stop('bob', 'SIGINT');
    });
    expectIdentical(ring, got, (await want).text);
    expect(await left, `bob's exit code; ${ring.logs()}`).toBe(0);
    expect(ring.member('bob').events.some((e) => e.event === 'leaving')).toBe(true);
    const status = await recovered(ring, 1);
    expect(status.stages.map((s) => s.name)).not.toContain('bob');
    expect(ring.hostEvents('error')).toEqual([]);
  }, 120_000);

  it('plans a member that returns under the same identity in again without breaking the streams in flight', async () => {
    const model = await stories();
    const want = reference(model, PROMPT, TOKENS);
    const ring = await startRing(model, three());
    // bob dies mid-stream; the ring carries on without him.
    const first = await streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }, (i) => {
      if (i === 5) ring.signal('bob', 'SIGKILL');
    });
    expectIdentical(ring, first, (await want).text);
    await recovered(ring, 1);
    // He comes back while two streams run: they go on, and he gets layers again at a safe point.
    let restarted: Promise<unknown> | undefined;
    const streams = [0, 1].map(() => streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }, async (i) => {
      // Once, from whichever stream gets there first: two bobs would take each other's place.
      if (i === 5 && restarted === undefined) await (restarted = ring.startMember('bob'));
    }));
    for (const s of await Promise.all(streams)) expectIdentical(ring, s, (await want).text);
    const back = await ring.waitStatus((s) => s.phase === 'serving' && s.stages.some((x) => x.name === 'bob' && (x.state === 'ready' || x.state === 'kept')), 'bob back in the ring', 60_000, 250);
    expect(back.stages.map((s) => s.name).sort()).toEqual(['ada', 'bob', 'cy', 'host']);
    expectIdentical(ring, await streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }), (await want).text);
    expect(ring.hostEvents('error')).toEqual([]);
  }, 120_000);

  it('keeps concurrent streams exact on a synthetic 8-layer model (f32) across four members when one dies', async () => {
    const model = await synthModel(join(tempDir(), 'faults8.gguf'), 8, 'f32');
    const prompts = ['hello world', 'a b c d e f', 'the cat sat'];
    const wants = prompts.map((p) => reference(model, p, 96));
    const ring = await startRing(model, ['m1', 'm2', 'm3', 'm4'].map((name) => ({ name, memoryBytes: SMALL })));
    expectIdentical(ring, await streamCompletion(ring.url, { model: 'faults8', prompt: prompts[0]!, maxTokens: 96 }), (await wants[0]!).text);
    let killedAt: number | undefined;
    const got = await Promise.all(prompts.map((p) => streamCompletion(ring.url, { model: 'faults8', prompt: p, maxTokens: 96 }, (i) => {
      if (i === 20 && killedAt === undefined) {
        killedAt = Date.now();
        ring.signal('m3', 'SIGKILL');
      }
    })));
    for (const [i, g] of got.entries()) expectIdentical(ring, g, (await wants[i]!).text, killedAt);
    const status = await recovered(ring, 1);
    expect(status.recoveries?.[0]?.resumedRequests).toBe(3);
  }, 120_000);

  // Quantized weights run other matmul kernels for a prefill (many rows) than for a decode step
  // (one row); the recompute must still give the tokens the uninterrupted decode would have.
  it('resumes a stream of a quantized (q8_0) synthetic model with exactly the text without failure', async () => {
    const model = await synthModel(join(tempDir(), 'faults8q.gguf'), 8, 'q8_0');
    const want = reference(model, 'hello world', 96);
    const ring = await startRing(model, ['m1', 'm2', 'm3'].map((name) => ({ name, memoryBytes: SMALL })));
    expectIdentical(ring, await streamCompletion(ring.url, { model: 'faults8q', prompt: 'hello world', maxTokens: 96 }), (await want).text);
    let killedAt: number | undefined;
    const got = await streamCompletion(ring.url, { model: 'faults8q', prompt: 'hello world', maxTokens: 96 }, (i) => {
      if (i === 20) {
        killedAt = Date.now();
        ring.signal('m2', 'SIGKILL');
      }
    });
    expectIdentical(ring, got, (await want).text, killedAt);
  }, 120_000);
});

describe('a ring whose remaining members cannot hold the model', () => {
  // The host must report little memory itself, else it alone holds any small model.

  /** Host and two members each hold about 2 of stories260K's 5 blocks (with KV at full context): any two of them together suffice, one alone does not. */
  async function tightRing(recoveryTimeoutS: number): Promise<FaultRing> {
    const model = await stories();
    // Sized as the host's planner sizes them (the runtime's resident form, KV at full context).
    const sizes = modelSizesFromGguf(await openGguf(model));
    const perBlock = sizes.blockResidentBytes! + sizes.kvBytesPerTokenPerLayer * 2048;
    const head = sizes.headResidentBytes;
    const dir = tempDir();
    const hostCaps = join(dir, 'capabilities-host.json');
    const { writeFile } = await import('node:fs/promises');
    await writeFile(hostCaps, JSON.stringify({ fleet_device: { memory_bytes: head + 2 * perBlock + perBlock / 2 } }));
    return startRing(model, [{ name: 'ada', memoryBytes: 3 * perBlock }, { name: 'bob', memoryBytes: 3 * perBlock }], { recoveryTimeoutS, hostArgs: ['--capabilities', hostCaps] });
  }

  it('makes requests wait, then fail with a clear error after the recovery timeout', async () => {
    const ring = await tightRing(6);
    const got = await streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }, (i) => {
      if (i === 5) {
        ring.signal('ada', 'SIGKILL');
        ring.signal('bob', 'SIGKILL');
      }
    });
    expect(got.error, ring.logs()).toBeDefined();
    expect(got.error?.message ?? '').toMatch(/member|memory|hold|ring/i);
    const status = await ring.status();
    expect(['waiting', 'failed', 'recovering']).toContain(status.phase);
  }, 120_000);

  it('makes requests wait and completes them exactly when a member returns before the timeout', async () => {
    const model = await stories();
    const want = reference(model, PROMPT, TOKENS);
    const ring = await tightRing(60);
    const got = await streamCompletion(ring.url, { model: 'stories260K', prompt: PROMPT, maxTokens: TOKENS }, (i) => {
      if (i === 5) {
        ring.signal('ada', 'SIGKILL');
        ring.signal('bob', 'SIGKILL');
        void (async () => {
          await waitEvent(ring.host, (e) => e.event === 'waiting', 'the host to wait for members', 30_000);
          await ring.startMember('bob');
        })();
      }
    });
    expectIdentical(ring, got, (await want).text);
  }, 120_000);
});
